// Costs: this month's spend by day and by instance type, the month's invoice, and the budget,
// from the billing API. A tenant sees its own. The admin picks a tenant by name, or sees every
// tenant at once with a total per tenant (an invoice is one tenant's: it shows once one is picked).
import {actionForm, field, h, loadChart, select, table, thisMonth, usd} from '../ui.js';

// Reserve units of an instance type for 1 or 3 years: the rate and the whole commitment are shown
// (the API's dry run) before the click.
function reservationForm(ctx, types, onMade) {
  const type = select(types.filter((t) => t.sharing === 'exclusive').map((t) => [t.id, `${t.id} — ${t.description}`]),
                      {id: 'resv-type'});
  const count = h('input', {id: 'resv-count', type: 'number', min: 1, max: 10000, value: '1', required: true});
  const term = select([['1y', '1 year'], ['3y', '3 years']], {id: 'resv-term'});
  const quote = h('p', {id: 'resv-quote', class: 'price', 'aria-live': 'polite'});
  const body = () => ({instance_type: type.value, count: Number(count.value), term: term.value});
  let asked = 0;
  const requote = async () => {
    const mine = ++asked;
    try {
      const r = await ctx.api('/v1/reservations', {method: 'POST', body: {...body(), dry_run: true}});
      if (mine !== asked) return;
      quote.textContent = `${r.count} x ${r.instance_type} at ${usd(r.rate_usd_per_hour)}/h each, from ${r.start} to ` +
        `${r.end}: a commitment of ${usd(r.commitment_usd)}, billed whether used or not (cancellable until ${r.cancellable_until}).`;
    } catch (e) {
      if (mine === asked) quote.textContent = `No quote: ${e.message}`;
    }
  };
  for (const control of [type, count, term]) control.addEventListener('change', requote);
  requote();
  return actionForm({
    id: 'resv-create', title: 'Reserve capacity', submitLabel: 'Reserve',
    rows: [h('div', {class: 'row'}, field('Instance type', type), field('Units', count), field('Term', term)), quote],
    send: () => ctx.api('/v1/reservations', {method: 'POST', body: body()}),
    done: (r) => {
      ctx.toast(`Reserved ${r.count} x ${r.instance_type} (${r.id})`);
      onMade();
    },
  });
}

// A monthly budget for `tenantId()` (the tenant's own; the admin's picked one).
function budgetForm(ctx, tenantId, onSet) {
  const amount = h('input', {id: 'budget-usd', inputmode: 'decimal', placeholder: '250.00', required: true,
                             pattern: '[0-9]+(\\.[0-9]{1,2})?'});
  const hard = h('input', {id: 'budget-hard', type: 'checkbox'});
  return actionForm({
    id: 'budget-set', title: 'Set the monthly budget', submitLabel: 'Set budget',
    rows: [h('div', {class: 'row'}, field('Monthly budget (USD)', amount, 'Notices at 80% and 100% of it'),
             field('Hard stop', hard, 'When spent, no new on-demand or spot instance starts'))],
    send: () => ctx.api(`/v1/tenants/${encodeURIComponent(tenantId())}/budget`,
                        {method: 'PUT', body: {monthly_usd: amount.value.trim(), hard_stop: hard.checked}}),
    done: () => {
      ctx.toast('Budget set');
      onSet();
    },
  });
}

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

function utilText(row) {
  return row.mean_gpu_util_percent === null || row.mean_gpu_util_percent === undefined
    ? '—' : `${row.mean_gpu_util_percent.toFixed(1)}%`;
}

export default {
  id: 'costs',
  title: 'Costs',
  order: 30,
  who: 'any',
  async render(ctx) {
    const {from, to, month} = thisMonth();
    const names = new Map();
    let tenant = '';  // The admin's pick; '' is every tenant.
    const heading = h('h1', {}, `Costs, ${month}`);
    ctx.main.append(heading);
    if (ctx.me.admin) {
      const tenants = (await ctx.api('/v1/tenants?limit=1000')).tenants;
      for (const t of tenants) names.set(t.id, t.name);
      const picker = select([['', 'All tenants'], ...tenants.map((t) => [t.id, t.name])],
                            {id: 'cost-tenant', name: 'tenant'});
      picker.addEventListener('change', () => {
        tenant = picker.value;
        refresh().catch((e) => ctx.toast(e.message, 'error'));
      });
      ctx.main.append(h('div', {class: 'row'}, field('Tenant', picker)));
    }
    const nameOf = (id) => names.get(id) ?? id;
    const total = h('div', {class: 'figures', id: 'cost-figures'});
    const canvas = h('canvas', {id: 'chart-days', role: 'img', 'aria-label': 'Spend by day this month'});
    const byType = h('div', {id: 'cost-types'});
    const byTenant = h('div', {id: 'cost-tenants'});
    const budgets = h('div', {id: 'cost-budgets'});
    const invoice = h('div', {id: 'cost-invoice'});
    const invoiceTitle = h('h2', {}, `Invoice ${month}`);
    const tenantsCard = h('section', {class: 'card'}, h('h2', {}, 'By tenant'), byTenant);
    const budgetCard = budgetForm(ctx, () => (ctx.me.admin ? tenant : ctx.me.tenant.id), () => refresh());
    ctx.main.append(total,
                    h('section', {class: 'card chart'}, h('h2', {}, 'Spend by day'), h('div', {class: 'canvas'}, canvas)),
                    ...(ctx.me.admin ? [tenantsCard] : []),
                    h('div', {class: 'split'},
                      h('section', {class: 'card'}, h('h2', {}, 'By instance type'), byType),
                      h('section', {class: 'card'}, h('h2', {}, 'Budget'), budgets)),
                    h('section', {class: 'card'}, invoiceTitle, invoice), budgetCard);
    if (!ctx.me.admin) {
      // What this fleet offers: a type whose GPUs it lacks could never be placed.
      const types = (await ctx.api('/v1/instance-types')).instance_types.filter((t) => t.offered_here);
      ctx.main.append(reservationForm(ctx, types, () => refresh()));
    }
    let chart = null;
    ctx.onLeave(() => chart?.destroy());
    const refresh = async () => {
      const who = tenant ? `&tenant=${encodeURIComponent(tenant)}` : '';
      const q = `from=${from}&to=${to}${who}`;
      // The admin's view of every tenant has no single invoice; the cost report totals each.
      const wantInvoice = !ctx.me.admin || tenant;
      const [days, types, bill, budget, report] = await Promise.all([
        ctx.api(`/v1/usage?${q}&group_by=day`), ctx.api(`/v1/usage?${q}&group_by=type`),
        wantInvoice ? ctx.api(`/v1/invoices/${month}${tenant ? `?tenant=${encodeURIComponent(tenant)}` : ''}`) : null,
        ctx.api('/v1/budgets'),
        ctx.me.admin && !tenant ? ctx.api(`/v1/reports/cost?from=${from}&to=${to}`) : null]);
      budgetCard.hidden = ctx.me.admin && !tenant;  // A budget is one tenant's.
      heading.textContent = `Costs, ${month}${tenant ? `: ${nameOf(tenant)}` : ctx.me.admin ? ': all tenants' : ''}`;
      total.replaceChildren(
          h('div', {class: 'figure'}, h('div', {class: 'value', id: 'cost-total'}, usd(days.total_usd)),
            h('div', {class: 'label'}, 'spent this month')),
          bill ? h('div', {class: 'figure'}, h('div', {class: 'value'}, bill.status),
                   h('div', {class: 'label'}, `invoice, ${bill.lines ?? bill.items.length} lines`))
            : h('div', {class: 'figure'}, h('div', {class: 'value'}, String(names.size)),
                h('div', {class: 'label'}, 'tenants')));
      const labels = days.items.map((d) => d.day.slice(5));
      const values = days.items.map((d) => Number(d.amount_usd));
      if (!chart) {
        await loadChart();
        chart = barChart(canvas, labels, values);
      } else {
        chart.data.labels = labels;
        chart.data.datasets[0].data = values;
        chart.update('none');
      }
      byType.replaceChildren(table(
          [{title: 'Instance type', cell: (r) => r.instance_type || '(custom)'},
           {title: 'Hours used', num: true, cell: (r) => (r.seconds / 3600).toFixed(2)},
           {title: 'Cost', num: true, cell: (r) => usd(r.amount_usd)}],
          types.items, {empty: 'Nothing billed this month.'}));
      tenantsCard.hidden = !report;
      if (report) {
        byTenant.replaceChildren(table(
            [{title: 'Tenant', cell: (r) => h('a', {href: '#/costs', onclick: (ev) => {
              ev.preventDefault();
              const picker = document.getElementById('cost-tenant');
              picker.value = r.tenant;
              picker.dispatchEvent(new Event('change'));
            }}, nameOf(r.tenant))},
             {title: 'GPU-hours', num: true, cell: (r) => r.gpu_hours.toFixed(2)},
             {title: 'Mean GPU util', num: true, wide: true, cell: utilText},
             {title: 'Spot would save', num: true, wide: true, cell: (r) => usd(r.spot_would_save_usd)},
             {title: 'Cost', num: true, cell: (r) => usd(r.cost_usd)}],
            report.tenants, {empty: 'Nothing billed this month.', rowProps: (r) => ({dataset: {tenant: r.tenant}})}));
      }
      const shown = budget.budgets.filter((b) => !tenant || b.tenant === tenant);
      budgets.replaceChildren(shown.length
        ? table([{title: 'Tenant', cell: (b) => nameOf(b.tenant)},
                 {title: 'Budget', num: true, cell: (b) => usd(b.monthly_usd)},
                 {title: 'Spent', num: true, cell: (b) => usd(b.spent_usd)},
                 {title: 'Used', cell: (b) => h('meter', {min: 0, max: 100, low: 80, high: 99, optimum: 0,
                                                         value: Math.min(100, b.used_percent)}, `${b.used_percent}%`)},
                 {title: '', cell: (b) => (b.stopping_new_instances ? 'new instances stopped' : '')}],
                shown)
        : h('p', {class: 'muted'}, 'No budget set (PUT /v1/tenants/{id}/budget, or tessera budgets set).'));
      invoiceTitle.textContent = `Invoice ${month}${tenant ? `, ${nameOf(tenant)}` : ''}`;
      if (!bill) {
        invoice.replaceChildren(h('p', {class: 'muted'}, 'An invoice is one tenant’s: pick a tenant above to see it.'));
        return;
      }
      invoice.replaceChildren(table(
          [{title: 'Instance', cell: (l) => l.instance || l.reservation || '—'},
           {title: 'Type', wide: true, cell: (l) => l.instance_type || '—'},
           {title: 'Billing', wide: true, cell: (l) => l.billing},
           {title: 'Seconds', num: true,
            cell: (l) => (l.reserved_unit_seconds ? `${l.reserved_unit_seconds} unit-s reserved` : String(l.seconds))},
           {title: 'Rate/h', num: true, wide: true, cell: (l) => usd(l.rate_usd_per_hour)},
           {title: 'Amount', num: true, cell: (l) => `${usd(l.amount_usd)}${l.open ? ' (open)' : ''}`}],
          bill.items.slice(-200), {empty: 'No lines yet.',
                                   caption: `Total ${usd(bill.total_usd)}${bill.items.length > 200 ? ' (the last 200 lines shown)' : ''}`}));
    };
    await ctx.every(10000, refresh);
  },
};
