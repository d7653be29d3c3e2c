// The catalog: the product matrix (every instance type by GPU model and sharing mode, with its
// price in each billing mode) and the recommender as a form.
import {field, gib, h, select, table, usd} from '../ui.js';

const SHARING = {exclusive: 'whole GPUs', mig: 'MIG slice', shared: 'shared GPU'};

function recommender(ctx) {
  const workload = select([['inference', 'Inference'], ['training', 'Training'], ['fine-tuning', 'Fine-tuning'],
                           ['rendering', 'Rendering'], ['hpc', 'HPC']], {id: 'rec-workload'});
  const params = h('input', {id: 'rec-params', type: 'number', min: 0.1, step: 0.1, placeholder: '7'});
  const memory = h('input', {id: 'rec-memory', type: 'number', min: 1, placeholder: '24'});
  const gpus = h('input', {id: 'rec-gpus', type: 'number', min: 1, max: 1024, value: '1'});
  const hours = h('input', {id: 'rec-hours', type: 'number', min: 1, max: 744, value: '730'});
  const months = h('input', {id: 'rec-months', type: 'number', min: 1, max: 60, value: '1'});
  const budget = h('input', {id: 'rec-budget', type: 'number', min: 0, placeholder: 'none'});
  const interruptible = h('input', {id: 'rec-spot', type: 'checkbox'});
  const nvlink = h('input', {id: 'rec-nvlink', type: 'checkbox'});
  const out = h('div', {id: 'rec-out', 'aria-live': 'polite'});
  const form = h('form', {class: 'card', id: 'recommend', onsubmit: async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({workload: workload.value, gpus: gpus.value, hours_per_month: hours.value,
                                   months: months.value});
    if (params.value) q.set('model_params_b', params.value);
    else if (memory.value) q.set('gpu_memory_gib', memory.value);
    if (budget.value) q.set('budget_usd', budget.value);
    if (interruptible.checked) q.set('interruptible', 'true');
    if (nvlink.checked) q.set('nvlink', 'true');
    try {
      const r = await ctx.api(`/v1/recommend?${q}`);
      out.replaceChildren(r.offers.length
        ? table([{title: 'Offer', cell: (o) => `${o.units > 1 ? `${o.units} x ` : ''}${o.instance_type}`},
                 {title: 'Billing', cell: (o) => o.billing.replace('_', '-')},
                 {title: 'Per month', num: true, cell: (o) => usd(o.monthly_usd)},
                 {title: 'Now', cell: (o) => (o.placeable_now ? 'placeable' : 'would wait')},
                 {title: 'Why', cell: (o) => o.reason}], r.offers,
                {caption: r.memory_gib ? `${r.memory_gib} GiB of GPU memory needed` : null})
        : h('p', {class: 'error'}, `Nothing fits: ${r.why_none ?? 'no offer'}`));
    } catch (e) {
      out.replaceChildren(h('p', {class: 'error'}, e.message));
    }
  }},
  h('h2', {}, 'Which instance should I use?'),
  h('div', {class: 'row'}, field('Workload', workload), field('Model size (billion parameters)', params),
    field('or GPU memory (GiB)', memory), field('GPUs', gpus)),
  h('div', {class: 'row'}, field('Hours a month', hours), field('Months', months), field('Budget a month (USD)', budget),
    h('div', {class: 'field check'}, interruptible, h('label', {for: 'rec-spot'}, 'Can be interrupted (spot)')),
    h('div', {class: 'field check'}, nvlink, h('label', {for: 'rec-nvlink'}, 'All GPUs on one NVLink island'))),
  h('button', {type: 'submit', class: 'primary'}, 'Recommend'), out);
  return form;
}

export default {
  id: 'catalog',
  title: 'Catalog',
  order: 50,
  who: 'any',
  async render(ctx) {
    const {instance_types: types} = await ctx.api('/v1/instance-types');
    const models = [...new Set(types.map((t) => t.gpu_model))].sort();
    const matrix = models.map((m) => h('section', {class: 'card'}, h('h2', {}, m), table(
        [{title: 'Instance type', cell: (t) => t.id}, {title: 'Kind', cell: (t) => SHARING[t.sharing] ?? t.sharing},
         {title: 'GPU', cell: (t) => t.mig_profile ?? (t.milli_gpu ? `${t.milli_gpu / 1000} GPU` : `${t.gpus} GPU${t.gpus > 1 ? 's' : ''}`)},
         {title: 'vCPUs', num: true, cell: (t) => String(t.vcpus)}, {title: 'Memory', num: true, cell: (t) => gib(t.memory_mib)},
         {title: 'On-demand/h', num: true, cell: (t) => usd(t.price_per_hour_usd?.on_demand)},
         {title: 'Spot/h', num: true, cell: (t) => usd(t.price_per_hour_usd?.spot)},
         {title: '1y/h', num: true, cell: (t) => usd(t.price_per_hour_usd?.reserved_1y)},
         {title: '3y/h', num: true, cell: (t) => usd(t.price_per_hour_usd?.reserved_3y)}],
        types.filter((t) => t.gpu_model === m))));
    ctx.main.append(h('h1', {}, 'Catalog'), recommender(ctx), h('div', {id: 'catalog-matrix'}, matrix));
  },
};
