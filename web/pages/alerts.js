// Alerts: the alerts that are pending or firing (and those resolved lately), and the threshold
// rules behind them (a tenant sees its own; the admin every one).
import {badge, h, table, when} from '../ui.js';

function labelsText(labels) {
  return Object.entries(labels ?? {}).map(([k, v]) => `${k}=${v}`).join(' ');
}

export default {
  id: 'alerts',
  title: 'Alerts',
  order: 40,
  who: 'any',
  async render(ctx) {
    const alerts = h('div', {id: 'alerts-list'});
    const rules = h('div', {id: 'alert-rules'});
    ctx.main.append(h('h1', {}, 'Alerts'), h('section', {class: 'card'}, h('h2', {}, 'Alerts'), alerts),
                    h('section', {class: 'card'}, h('h2', {}, 'Rules'), rules));
    const refresh = async () => {
      const [a, r] = await Promise.all([ctx.api('/v1/alerts'), ctx.api('/v1/alert-rules')]);
      const order = {firing: 0, pending: 1, resolved: 2};
      const list = [...a.alerts].sort((x, y) => (order[x.state] ?? 3) - (order[y.state] ?? 3));
      alerts.replaceChildren(table(
          [{title: 'State', cell: (x) => badge(x.state)},
           {title: 'Alert', cell: (x) => x.labels?.alertname ?? x.rule_id},
           {title: 'Severity', cell: (x) => x.labels?.severity ?? '—'},
           {title: 'Value', num: true, cell: (x) => String(Math.round(x.value * 100) / 100)},
           {title: 'Since', cell: (x) => when(x.fired_at ?? x.active_at)},
           {title: 'Summary', cell: (x) => x.annotations?.summary ?? labelsText(x.labels)}],
          list, {empty: 'No alerts: every rule is quiet.'}));
      rules.replaceChildren(table(
          [{title: 'Name', cell: (x) => x.name},
           {title: 'Condition', cell: (x) => `${x.metric} ${x.op} ${x.threshold} for ${x.for_seconds}s`},
           {title: 'Matchers', cell: (x) => labelsText(x.matchers)},
           {title: 'Owner', cell: (x) => x.owner ?? 'operator'}],
          r.rules, {empty: 'No rules.'}));
    };
    await ctx.every(5000, refresh);
  },
};
