// Groups: gangs and autoscaled fleets of instances, each with its members' states and, while it
// waits, why (docs/groups.md); a tenant creates one from an instance type, autoscaled or not.
import {actionForm, badge, field, h, select, table} from '../ui.js';

function createForm(ctx, types, onCreated) {
  const name = h('input', {id: 'group-name', name: 'name', maxlength: 63, placeholder: 'ddp-train', autocomplete: 'off',
                           pattern: '[a-z0-9][a-z0-9._\\-]{0,62}'});
  const type = select(types.filter((t) => t.sharing === 'exclusive').map((t) => [t.id, `${t.id} — ${t.description}`]),
                      {id: 'group-type', name: 'instance_type'});
  const billing = select([['on_demand', 'On-demand'], ['spot', 'Spot'], ['reserved', 'Reserved']], {id: 'group-billing'});
  const size = h('input', {id: 'group-size', type: 'number', min: 1, max: 1024, value: '2', required: true});
  const topology = select([['any', 'Any'], ['node', 'One node'], ['nvlink', 'One NVLink island']], {id: 'group-topology'});
  const command = h('input', {id: 'group-command', placeholder: 'torchrun train.py', autocomplete: 'off'});
  const metric = select([['', 'No autoscale'], ['gpu_util', 'GPU utilization %'], ['fb_used', 'GPU memory used %'],
                         ['pending', 'Backlog per member']], {id: 'group-metric'});
  const min = h('input', {id: 'group-min', type: 'number', min: 1, max: 1024, value: '1'});
  const max = h('input', {id: 'group-max', type: 'number', min: 1, max: 1024, value: '4'});
  const target = h('input', {id: 'group-target', type: 'number', min: 0.001, step: 'any', value: '60'});
  const scaling = h('div', {class: 'row', hidden: true}, field('Min', min), field('Max', max), field('Target', target));
  metric.addEventListener('change', () => { scaling.hidden = !metric.value; });
  return actionForm({
    id: 'group-create', title: 'Create a group', submitLabel: 'Create',
    rows: [h('div', {class: 'row'}, field('Name', name), field('Instance type', type), field('Billing', billing)),
           h('div', {class: 'row'}, field('Members', size), field('Placement', topology),
             field('Command', command, 'Each member runs it, with its rank in RANK and WORLD_SIZE')),
           h('div', {class: 'row'}, field('Autoscale on', metric)), scaling],
    send: () => {
      const body = {size: Number(size.value), topology: topology.value,
                    template: {instance_type: type.value, billing: billing.value}};
      if (name.value.trim()) body.name = name.value.trim();
      if (command.value.trim()) body.template.command = command.value.trim();
      if (metric.value) {
        body.autoscale = {metric: metric.value, min: Number(min.value), max: Number(max.value), target: Number(target.value)};
      }
      return ctx.api('/v1/groups', {method: 'POST', body});
    },
    done: (g) => {
      ctx.toast(`Created ${g.name || g.id}: ${g.state}`);
      onCreated();
    },
  });
}

export default {
  id: 'groups',
  title: 'Groups',
  order: 20,
  who: 'any',
  async render(ctx) {
    const list = h('div', {id: 'groups-list'});
    ctx.main.append(h('h1', {}, 'Groups'), list);
    if (!ctx.me.admin) {
      // What this fleet offers: a type whose GPUs it lacks could never be placed.
      const types = (await ctx.api('/v1/instance-types')).instance_types.filter((t) => t.offered_here);
      ctx.main.append(createForm(ctx, types, () => refresh()));
    }
    const refresh = async () => {
      const {groups} = await ctx.api('/v1/groups');
      list.replaceChildren(table(
          [{title: 'Name', cell: (g) => g.name}, {title: 'State', cell: (g) => badge(g.state)},
           {title: 'Members', cell: (g) => h('span', {class: 'members'},
             g.members.map((m) => h('a', {href: '#/instance', class: `member s-${m.state ?? 'unknown'}`,
                                        title: `rank ${m.rank}: ${m.state}${m.node ? ` on ${m.node}` : ''}`,
                                        onclick: (ev) => { ev.preventDefault(); ctx.go('instance', {id: m.instance}); }},
                                     String(m.rank))))},
           {title: 'Placed', num: true, cell: (g) => `${g.placed}/${g.size}`},
           {title: 'Topology', cell: (g) => `${g.placement}, ${g.topology}`},
           {title: 'Restarts', num: true, cell: (g) => String(g.restarts)},
           {title: 'Autoscale', cell: (g) => (g.autoscale ? `${g.autoscale.metric} → ${g.autoscale.min}..${g.autoscale.max}` : '—')},
           {title: 'Why', cell: (g) => g.reason ?? ''}],
          groups, {empty: 'No groups (POST /v1/groups, or tessera groups create).'}));
    };
    await ctx.every(5000, refresh);
  },
};
