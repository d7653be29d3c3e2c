// Groups: gangs and autoscaled fleets of instances, each with its members' states and, while it
// waits, why (docs/groups.md).
import {badge, h, table} from '../ui.js';

export default {
  id: 'groups',
  title: 'Groups',
  order: 20,
  who: 'any',
  async render(ctx) {
    const list = h('div', {id: 'groups-list'});
    ctx.main.append(h('h1', {}, 'Groups'), list);
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
