// Costs: this month's spend by day and by instance type, the month's invoice, and the budget,
// from the billing API (a tenant sees its own; the admin every tenant's).
import {h, loadChart, table, thisMonth, usd} from '../ui.js';

function barChart(canvas, labels, values) {
  if (typeof Chart === 'undefined') return null;
  return new Chart(canvas, {
    type: 'bar',
    data: {labels, datasets: [{label: 'USD', data: values, backgroundColor: '#2f6fed'}]},
    options: {animation: false, responsive: true, maintainAspectRatio: false,
              plugins: {legend: {display: false}},
              scales: {y: {beginAtZero: true, ticks: {callback: (v) => `$${v}`}}}},
  });
}

export default {
  id: 'costs',
  title: 'Costs',
  order: 30,
  who: 'any',
  async render(ctx) {
    const {from, to, month} = thisMonth();
    const total = h('div', {class: 'figures', id: 'cost-figures'});
    const canvas = h('canvas', {id: 'chart-days', role: 'img', 'aria-label': 'Spend by day this month'});
    const byType = h('div', {id: 'cost-types'});
    const budgets = h('div', {id: 'cost-budgets'});
    const invoice = h('div', {id: 'cost-invoice'});
    ctx.main.append(h('h1', {}, `Costs, ${month}`), total,
                    h('section', {class: 'card chart'}, h('h2', {}, 'Spend by day'), h('div', {class: 'canvas'}, canvas)),
                    h('div', {class: 'split'},
                      h('section', {class: 'card'}, h('h2', {}, 'By instance type'), byType),
                      h('section', {class: 'card'}, h('h2', {}, 'Budget'), budgets)),
                    h('section', {class: 'card'}, h('h2', {}, `Invoice ${month}`), invoice));
    let chart = null;
    ctx.onLeave(() => chart?.destroy());
    const refresh = async () => {
      const q = `from=${from}&to=${to}`;
      const [days, types, bill, budget] = await Promise.all([
        ctx.api(`/v1/usage?${q}&group_by=day`), ctx.api(`/v1/usage?${q}&group_by=type`),
        ctx.api(`/v1/invoices/${month}`), ctx.api('/v1/budgets')]);
      total.replaceChildren(
          h('div', {class: 'figure'}, h('div', {class: 'value', id: 'cost-total'}, usd(days.total_usd)),
            h('div', {class: 'label'}, 'spent this month')),
          h('div', {class: 'figure'}, h('div', {class: 'value'}, bill.status),
            h('div', {class: 'label'}, `invoice, ${bill.lines ?? bill.items.length} lines`)));
      const labels = days.items.map((d) => d.day.slice(5));
      const values = days.items.map((d) => Number(d.amount_usd));
      if (!chart) {
        await loadChart();
        chart = barChart(canvas, labels, values);
      }
      else {
        chart.data.labels = labels;
        chart.data.datasets[0].data = values;
        chart.update('none');
      }
      byType.replaceChildren(table(
          [{title: 'Instance type', cell: (r) => r.instance_type || '(custom)'},
           {title: 'Hours used', num: true, cell: (r) => (r.seconds / 3600).toFixed(2)},
           {title: 'Cost', num: true, cell: (r) => usd(r.amount_usd)}],
          types.items, {empty: 'Nothing billed this month.'}));
      budgets.replaceChildren(budget.budgets.length
        ? table([{title: 'Tenant', cell: (b) => b.tenant},
                 {title: 'Budget', num: true, cell: (b) => usd(b.monthly_usd)},
                 {title: 'Spent', num: true, cell: (b) => usd(b.spent_usd)},
                 {title: 'Used', cell: (b) => h('meter', {min: 0, max: 100, low: 80, high: 99, optimum: 0,
                                                         value: Math.min(100, b.used_percent)}, `${b.used_percent}%`)},
                 {title: '', cell: (b) => (b.stopping_new_instances ? 'new instances stopped' : '')}],
                budget.budgets)
        : h('p', {class: 'muted'}, 'No budget set (PUT /v1/tenants/{id}/budget, or tessera budgets set).'));
      invoice.replaceChildren(table(
          [{title: 'Instance', cell: (l) => l.instance || l.reservation || '—'},
           {title: 'Type', cell: (l) => l.instance_type || '—'},
           {title: 'Billing', cell: (l) => l.billing},
           {title: 'Seconds', num: true,
            cell: (l) => (l.reserved_unit_seconds ? `${l.reserved_unit_seconds} unit-s reserved` : String(l.seconds))},
           {title: 'Rate/h', num: true, cell: (l) => usd(l.rate_usd_per_hour)},
           {title: 'Amount', num: true, cell: (l) => `${usd(l.amount_usd)}${l.open ? ' (open)' : ''}`}],
          bill.items.slice(-200), {empty: 'No lines yet.',
                                   caption: `Total ${usd(bill.total_usd)}${bill.items.length > 200 ? ' (the last 200 lines shown)' : ''}`}));
    };
    await ctx.every(10000, refresh);
  },
};
