// Alerts: the alerts that are pending or firing (and those resolved lately), and the threshold
// rules behind them (a tenant sees its own; the admin every one).
import {actionForm, badge, field, h, select, table, when} from '../ui.js';

// The series a rule most often watches (the API takes any of telemetry's: docs/alerts.md).
const METRICS = ['DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_DEV_GPU_TEMP', 'DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_POWER_USAGE',
                 'DCGM_FI_DEV_XID_ERRORS', 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL', 'tessera_tenant_budget_used_percent'];

function ruleForm(ctx, onCreated) {
  const name = h('input', {id: 'rule-name', placeholder: 'GpuHot', autocomplete: 'off', required: true});
  const metric = select(METRICS.map((m) => [m, m]), {id: 'rule-metric'});
  const op = select(['>', '>=', '<', '<=', '==', '!='].map((o) => [o, o]), {id: 'rule-op'});
  const threshold = h('input', {id: 'rule-threshold', type: 'number', step: 'any', value: '85', required: true});
  const forSeconds = h('input', {id: 'rule-for', type: 'number', min: 0, max: 86400, value: '60'});
  const severity = select([['warning', 'Warning'], ['critical', 'Critical'], ['info', 'Info']], {id: 'rule-severity'});
  const summary = h('input', {id: 'rule-summary', placeholder: 'GPU {{ $labels.gpu }} is at {{ $value }}', autocomplete: 'off'});
  return actionForm({
    id: 'rule-create', title: 'Create a rule', submitLabel: 'Create',
    rows: [h('div', {class: 'row'}, field('Name', name, 'The alertname: letters, digits and _'), field('Metric', metric)),
           h('div', {class: 'row'}, field('Condition', op), field('Threshold', threshold),
             field('For (seconds)', forSeconds, 'How long it must hold before it fires'), field('Severity', severity)),
           h('div', {class: 'row'}, field('Summary', summary, 'Optional; {{ $value }} and {{ $labels.NAME }} are filled in'))],
    send: () => {
      const body = {name: name.value.trim(), metric: metric.value, op: op.value, threshold: Number(threshold.value),
                    for_seconds: Number(forSeconds.value), severity: severity.value};
      if (summary.value.trim()) body.annotations = {summary: summary.value.trim()};
      return ctx.api('/v1/alert-rules', {method: 'POST', body});
    },
    done: (r) => {
      ctx.toast(`Rule ${r.name} created`);
      onCreated();
    },
  });
}

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
                    h('section', {class: 'card'}, h('h2', {}, 'Rules'), rules),
                    ruleForm(ctx, () => refresh()));
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
