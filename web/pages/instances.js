// Instances: the list (state, shape, node, GPUs, price, age, what each cost this month) and,
// for a tenant, the launch form driven by the catalog's instance types and their prices.
import {field, gpusText, h, instanceBadge, lifeText, select, shapeText, table, thisMonth, usd} from '../ui.js';

const BILLING = [['on_demand', 'On-demand'], ['spot', 'Spot'], ['reserved', 'Reserved']];
const PRICE_KEY = {on_demand: 'on_demand', spot: 'spot', reserved: 'reserved_1y'};

function launchForm(ctx, types, onLaunched) {
  const kinds = [['exclusive', 'Whole GPUs'], ['mig', 'MIG slice'], ['shared', 'Shared GPU'], ['custom', 'Custom shape']];
  const kind = select(kinds, {id: 'launch-kind', name: 'kind'});
  const type = select([], {id: 'launch-type', name: 'instance_type'});
  const billing = select(BILLING, {id: 'launch-billing', name: 'billing'});
  const name = h('input', {id: 'launch-name', name: 'name', maxlength: 63, placeholder: 'train-llm',
                           pattern: '[a-z0-9][a-z0-9._\\-]{0,62}', autocomplete: 'off'});
  const command = h('input', {id: 'launch-command', name: 'command', placeholder: 'python train.py', autocomplete: 'off'});
  const image = h('input', {id: 'launch-image', name: 'image', maxlength: 255, placeholder: 'registry.example.com/team/train:1.4',
                            autocomplete: 'off'});
  const models = [...new Set(types.map((t) => t.gpu_model))].sort();
  const model = select(models.map((m) => [m, m]), {id: 'launch-model'});
  const gpus = h('input', {id: 'launch-gpus', type: 'number', min: 1, max: 16, value: '1'});
  const vcpus = h('input', {id: 'launch-vcpus', type: 'number', min: 1, max: 256, value: '8'});
  const memory = h('input', {id: 'launch-memory', type: 'number', min: 1, max: 4096, value: '32'});
  const custom = h('div', {class: 'row', hidden: true}, field('GPU model', model), field('GPUs', gpus),
                   field('vCPUs', vcpus), field('Memory (GiB)', memory));
  const price = h('p', {id: 'launch-price', class: 'price', 'aria-live': 'polite'});
  const error = h('p', {class: 'error', role: 'alert'});

  const chosen = () => types.find((t) => t.id === type.value);
  function fillTypes() {
    const isCustom = kind.value === 'custom';
    custom.hidden = !isCustom;
    type.disabled = isCustom;
    type.replaceChildren(...types.filter((t) => t.sharing === kind.value)
        .map((t) => h('option', {value: t.id}, `${t.id} — ${t.description}`)));
    showPrice();
  }
  function showPrice() {
    const t = chosen();
    if (kind.value === 'custom' || !t) {
      price.textContent = 'A custom shape is priced as its share of the model’s cheapest whole-GPU price.';
      return;
    }
    const p = t.price_per_hour_usd ?? {};
    price.replaceChildren(...BILLING.map(([b, label]) =>
      h('span', {class: b === billing.value ? 'chosen' : null}, `${label} ${usd(p[PRICE_KEY[b]])}/h`)));
  }
  kind.addEventListener('change', fillTypes);
  type.addEventListener('change', showPrice);
  billing.addEventListener('change', showPrice);
  const submit = h('button', {type: 'submit', class: 'primary'}, 'Launch');
  const form = h('form', {id: 'launch', class: 'card', onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const body = {billing: billing.value};
    if (name.value.trim()) body.name = name.value.trim();
    if (command.value.trim()) body.command = command.value.trim();
    if (image.value.trim()) body.image = image.value.trim();
    if (kind.value === 'custom') {
      Object.assign(body, {gpu_model: model.value, gpus: Number(gpus.value), vcpus: Number(vcpus.value),
                           memory_mib: Math.round(Number(memory.value) * 1024)});
    } else {
      body.instance_type = type.value;
    }
    submit.disabled = true;
    try {
      const inst = await ctx.api('/v1/instances', {method: 'POST', body});
      ctx.toast(`Launched ${inst.name} (${inst.id}): ${inst.state}`);
      form.reset();
      fillTypes();
      onLaunched();
    } catch (e) {
      error.textContent = `Not launched: ${e.message}`;
    } finally {
      submit.disabled = false;
    }
  }},
  h('h2', {}, 'Launch an instance'),
  h('div', {class: 'row'}, field('Kind', kind), field('Instance type', type), field('Billing', billing)),
  custom,
  h('div', {class: 'row'}, field('Name', name, 'Optional: a-z, 0-9, ., _ and -'),
    field('Command', command, 'Optional: what the instance runs')),
  h('div', {class: 'row'}, field('Image', image, 'Optional: an OCI image to run it in; without a command, its own entrypoint runs')),
  price, error, submit);
  fillTypes();
  return form;
}

export default {
  id: 'instances',
  title: 'Instances',
  order: 10,
  who: 'any',
  async render(ctx) {
    const list = h('div', {id: 'instances-list'});
    ctx.main.append(h('h1', {}, 'Instances'), list);
    if (!ctx.me.admin) {
      // What this fleet offers: a type whose GPUs it lacks could never be placed.
      const types = (await ctx.api('/v1/instance-types')).instance_types.filter((t) => t.offered_here);
      ctx.main.append(launchForm(ctx, types, () => refresh()));
    }
    const refresh = async () => {
      const {from, to} = thisMonth();
      const [instances, usage, tenants] = await Promise.all([
        ctx.api('/v1/instances?limit=1000'),
        ctx.api(`/v1/usage?from=${from}&to=${to}&group_by=instance`).catch(() => ({items: []})),
        ctx.me.admin ? ctx.api('/v1/tenants?limit=1000').catch(() => ({tenants: []})) : {tenants: []},
      ]);
      const names = new Map(tenants.tenants.map((t) => [t.id, t.name]));
      const cost = new Map(usage.items.map((i) => [i.instance, i.amount_usd]));
      const rows = instances.instances;
      const columns = [
        {title: 'Name', cell: (i) => h('a', {href: '#/instance', class: 'open', dataset: {id: i.id},
                                            onclick: (ev) => { ev.preventDefault(); ctx.go('instance', {id: i.id}); }}, i.name)},
        {title: 'State', cell: (i) => instanceBadge(i)},
        {title: 'Shape', wide: true, cell: (i) => shapeText(i.shape)},
        {title: 'Billing', wide: true, cell: (i) => i.billing.replace('_', '-')},
        // An ended instance shows where it ran; a waiting one why it waits.
        {title: 'Node', cell: (i) => i.node ?? (!i.ended_at && i.reason ? h('span', {class: 'muted', title: i.reason}, 'waiting') : '—')},
        {title: 'GPUs', cell: (i) => gpusText(i.gpus)},
        {title: 'Price/h', num: true, wide: true, cell: (i) => usd(i.price_per_hour_usd)},
        {title: 'Age', num: true, cell: (i) => lifeText(i)},
        {title: 'Cost this month', num: true, wide: true, cell: (i) => (cost.has(i.id) ? usd(cost.get(i.id)) : '—')},
      ];
      if (ctx.me.admin) columns.splice(1, 0, {title: 'Tenant', cell: (i) => names.get(i.tenant) ?? i.tenant});
      if (!ctx.me.admin) {
        columns.push({title: '', cell: (i) => ['terminated', 'succeeded', 'failed', 'stopping'].includes(i.state) || i.group
          ? '' : h('button', {type: 'button', class: 'danger small', 'aria-label': `Delete ${i.name}`, onclick: async () => {
            if (!confirm(`Delete ${i.name} (${i.id})?`)) return;
            try {
              await ctx.api(`/v1/instances/${encodeURIComponent(i.id)}`, {method: 'DELETE'});
              ctx.toast(`Deleting ${i.name}`);
              refresh();
            } catch (e) {
              ctx.toast(`Not deleted: ${e.message}`, 'error');
            }
          }}, 'Delete')});
      }
      list.replaceChildren(table(columns, rows, {empty: 'No instances yet.', rowProps: (i) => ({dataset: {id: i.id, state: i.state}})}));
    };
    await ctx.every(3000, refresh);
  },
};
