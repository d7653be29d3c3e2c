// One instance: what it is and where it runs, its state history, its GPUs' utilization and
// memory over the last 15 minutes, and its log as it grows. Which instance is in the history
// state, not the URL.
import {apiText, badge, duration, gib, gpusText, h, instanceBadge, lifeText, lineChart, loadChart, shapeText, table, usd,
        when} from '../ui.js';

const LOG_KEEP = 256 * 1024;  // Characters shown; the server keeps the newest 256 KiB too.

// Bytes as "42.0 MiB" or "1.3 GiB".
function bytesText(n) {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${(n / 2 ** 20).toFixed(1)} MiB`;
}

function details(inst) {
  const rows = [
    ['ID', inst.id], ['Name', inst.name], ['State', instanceBadge(inst)],
    ['Shape', `${shapeText(inst.shape)} · ${inst.shape.vcpus} vCPUs · ${gib(inst.shape.memory_mib)}`],
    ['Billing', inst.billing.replace('_', '-')], ['Price', `${usd(inst.price_per_hour_usd)}/h`],
    ['Node', inst.node ?? '—'],
    ['GPUs', inst.gpus.length ? `${gpusText(inst.gpus)}: ${inst.gpus.map((g) => `${g.index} ${g.uuid}`).join(', ')}` : '—'],
    ['Command', inst.command || (inst.image ? '(the image’s own entrypoint)' : '—')],
    ['Created', when(inst.created_at)],
  ];
  if (inst.image) {
    rows.push(['Image', `${inst.image} (pull ${inst.pull_policy})`]);
    // The API shows the registry's username only; the password never comes back.
    if (inst.registry_auth) rows.push(['Registry user', inst.registry_auth.username]);
  }
  if (inst.pull) {
    const total = inst.pull.total_bytes > 0 ? bytesText(inst.pull.total_bytes) : 'an unknown size';
    rows.push(['Pull', `${inst.pull.percent}%: ${bytesText(inst.pull.bytes)} of ${total}`]);
  }
  if (inst.started_at) rows.push(['Started', `${when(inst.started_at)} (${inst.start_latency_seconds.toFixed(2)} s to start)`]);
  if (inst.ended_at) rows.push(['Ended', `${when(inst.ended_at)} (${lifeText(inst)})`]);
  if (inst.reason) rows.push(['Reason', inst.reason]);
  if (inst.exit_code !== undefined) rows.push(['Exit code', String(inst.exit_code)]);
  if (inst.group) rows.push(['Group', `${inst.group}, rank ${inst.rank}`]);
  return h('dl', {class: 'card details'}, rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

export default {
  id: 'instance',
  title: 'Instance',
  order: 11,
  who: 'any',
  nav: false,
  async render(ctx) {
    const id = ctx.state.id;
    if (!id) {
      ctx.go('instances');
      return;
    }
    const title = h('h1', {}, id);
    const top = h('div', {id: 'instance-details'});
    const history = h('div', {id: 'instance-history'});
    const utilCanvas = h('canvas', {id: 'chart-util', 'aria-label': 'GPU utilization over 15 minutes', role: 'img'});
    const memCanvas = h('canvas', {id: 'chart-memory', 'aria-label': 'GPU memory used over 15 minutes', role: 'img'});
    const noMetrics = h('p', {id: 'instance-metrics-note', class: 'muted'});
    const log = h('pre', {id: 'instance-log', class: 'log', tabindex: 0, 'aria-label': 'Log'});
    const del = h('button', {type: 'button', class: 'danger', hidden: true}, 'Delete');
    ctx.main.append(
        h('p', {}, h('a', {href: '#/instances'}, '← Instances')), title, del, top,
        h('section', {class: 'charts'},
          h('div', {class: 'card chart'}, h('h2', {}, 'GPU utilization (%)'), h('div', {class: 'canvas'}, utilCanvas)),
          h('div', {class: 'card chart'}, h('h2', {}, 'GPU memory used (GiB)'), h('div', {class: 'canvas'}, memCanvas))),
        noMetrics,
        h('section', {class: 'card'}, h('h2', {}, 'State history'), history),
        h('section', {class: 'card'}, h('h2', {}, 'Log'), log));
    let charts = null;
    ctx.onLeave(() => charts && charts.forEach((c) => c?.destroy()));
    let offset = null;
    let logText = '';

    del.addEventListener('click', async () => {
      if (!confirm(`Delete ${id}?`)) return;
      try {
        await ctx.api(`/v1/instances/${encodeURIComponent(id)}`, {method: 'DELETE'});
        ctx.toast(`Deleting ${id}`);
      } catch (e) {
        ctx.toast(`Not deleted: ${e.message}`, 'error');
      }
    });

    const refresh = async () => {
      const inst = await ctx.api(`/v1/instances/${encodeURIComponent(id)}`);
      title.textContent = `${inst.name}`;
      del.hidden = ctx.me.admin || Boolean(inst.group) || ['terminated', 'succeeded', 'failed', 'stopping', 'preempted'].includes(inst.state);
      top.replaceChildren(details(inst));
      history.replaceChildren(table(
          [{title: 'When', cell: (c) => when(c.at)}, {title: 'State', cell: (c) => badge(c.state)},
           {title: 'Why', cell: (c) => c.reason ?? ''}],
          [...(inst.history ?? [])].reverse(), {empty: 'No transitions recorded.'}));

      // The log: the tail first, then what follows the last offset.
      const path = offset === null ? `/v1/instances/${encodeURIComponent(id)}/logs?tail=1000`
                                   : `/v1/instances/${encodeURIComponent(id)}/logs?after=${offset}`;
      const {text, headers} = await apiText(path);
      offset = Number(headers.get('X-Log-Offset') ?? offset ?? 0);
      if (text) {
        const follow = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        logText = (logText + text).slice(-LOG_KEEP);
        log.textContent = logText;
        if (follow) log.scrollTop = log.scrollHeight;
      } else if (!logText) {
        log.textContent = inst.command || inst.image ? '(no output yet)' : '(this instance runs no command)';
      }

      const metrics = await ctx.api(`/v1/instances/${encodeURIComponent(id)}/metrics?window=15m`);
      const util = metrics.gpus.map((g) => ({label: `GPU ${g.index}`, points: g.points.map((p) => ({x: Date.parse(p.t), y: p.gpu_util}))}));
      const mem = metrics.gpus.map((g) => ({label: `GPU ${g.index}`, points: g.points.map((p) => ({x: Date.parse(p.t), y: p.fb_used_mib / 1024}))}));
      const points = util.reduce((n, s) => n + s.points.length, 0);
      ctx.main.dataset.points = String(points);
      noMetrics.textContent = points ? '' : 'No GPU readings yet: they come with the node agent’s telemetry, every 10 s while it runs.';
      if (!charts) {
        await loadChart();
        charts = [lineChart(utilCanvas, util, {max: 100}), lineChart(memCanvas, mem)];
      } else {
        [util, mem].forEach((series, i) => {
          const c = charts[i];
          if (!c) return;
          c.data.datasets.forEach((d, k) => { d.data = series[k]?.points ?? []; });
          c.update('none');
        });
      }
      ctx.main.dataset.instanceState = inst.state;
      ctx.main.dataset.uptime = inst.started_at ? duration((Date.now() - Date.parse(inst.started_at)) / 1000) : '';
    };
    await ctx.every(2000, refresh);
  },
};
