// The fleet (admin): every GPU of every node at a glance, the figure the scheduler works to keep
// low (unallocated GPU capacity, and how much of it sits in fragments of partly used GPUs), node
// states, and drain / undrain. Built for 1,000 nodes of 8 GPUs: one pass over the nodes, class
// names instead of per-cell styles, and a filter.
import {field, h} from '../ui.js';

const PAGE = 1000;

async function allNodes(api) {
  const nodes = [];
  let waiting = [];
  let tokenParam = '';
  for (let i = 0; i < 100; ++i) {
    const page = await api(`/v1/nodes?limit=${PAGE}${tokenParam}`);
    nodes.push(...page.nodes);
    if (page.waiting_for_agent) waiting = page.waiting_for_agent;
    if (!page.next_page_token) break;
    tokenParam = `&page_token=${encodeURIComponent(page.next_page_token)}`;
  }
  return {nodes, waiting};
}

// The node's state as its operator sees it: ready, draining, down, or not ready (agent silent).
function nodeState(n) {
  if (n.agent && n.agent.state && n.agent.state !== 'ready') return n.agent.state;
  return n.state;
}

function summarize(nodes) {
  const s = {nodes: nodes.length, states: {}, gpus: 0, allocatedMilli: 0, freeWhole: 0, fragments: 0,
             fragmentMilli: 0, byMode: {}};
  for (const n of nodes) {
    const st = nodeState(n);
    s.states[st] = (s.states[st] ?? 0) + 1;
    for (const g of n.gpus) {
      s.gpus += 1;
      s.allocatedMilli += 1000 - g.free_milli;
      s.byMode[g.mode] = (s.byMode[g.mode] ?? 0) + 1;
      if (g.free_milli === 1000) s.freeWhole += 1;
      else if (g.free_milli > 0) {
        s.fragments += 1;
        s.fragmentMilli += g.free_milli;
      }
    }
  }
  return s;
}

function figure(label, value, detail, id) {
  return h('div', {class: 'figure', id}, h('div', {class: 'value'}, value), h('div', {class: 'label'}, label),
           detail ? h('div', {class: 'detail muted'}, detail) : null);
}

// The memory slices (of 8) a MIG profile spans, from its name ("3g.40gb" -> 4): NVIDIA's A100
// and H100 layouts (1g: 1, 2g: 2, 3g and 4g: 4, 7g: 8).
const MIG_SLICES = {1: 1, 2: 2, 3: 4, 4: 4, 7: 8};

// "3g.40gb@4" -> a segment of the GPU's cell at its place in the MIG layout.
function migSegment(text) {
  const m = /^(\d+)g\.[^@]*@(\d+)$/.exec(text);
  if (!m) return null;
  const size = MIG_SLICES[Number(m[1])] ?? 1;
  return h('span', {class: 'slice', style: {left: `${(Number(m[2]) / 8) * 100}%`, width: `${(size / 8) * 100}%`}});
}

function gpuCell(g, util) {
  const used = 1000 - g.free_milli;
  const level = used === 0 ? 0 : used === 1000 ? 4 : Math.min(3, 1 + Math.floor((used / 1000) * 3));
  const utilText = util === undefined ? 'no reading' : `${Math.round(util)}% busy`;
  const mig = g.mode === 'mig' ? (g.mig_instances ?? []) : [];
  const layout = g.mode === 'mig' ? `, MIG layout: ${mig.join(' + ') || 'no instance'}` : '';
  const cell = h('span', {class: `gpu a${g.mode === 'mig' ? 0 : level} m-${g.mode}`,
                          title: `GPU ${g.index} (${g.mode}${layout}): ${Math.round(used / 10)}% allocated, ${utilText}`},
                 mig.map(migSegment));
  if (util !== undefined) {
    cell.append(h('span', {class: 'util', style: {'--u': `${Math.min(100, Math.max(0, util))}%`}}));
  }
  return cell;
}

export default {
  id: 'fleet',
  title: 'Fleet',
  order: 5,
  who: 'admin',
  async render(ctx) {
    const figures = h('div', {class: 'figures', id: 'fleet-figures'});
    const filter = h('input', {id: 'fleet-filter', type: 'search', placeholder: 'node, model or state', autocomplete: 'off'});
    const heat = h('div', {id: 'heatmap', class: 'heatmap', role: 'list', 'aria-label': 'GPUs by node'});
    const panel = h('aside', {id: 'node-panel', class: 'card', hidden: true, 'aria-live': 'polite'});
    const legend = h('div', {class: 'legend', 'aria-hidden': 'true'},
        ['free', 'a1', 'a2', 'a3', 'full'].map((k, i) => h('span', {}, h('span', {class: `gpu a${i}`}),
          ['free', '≤ 1/3 allocated', '≤ 2/3', 'more', 'all'][i])),
        h('span', {}, h('span', {class: 'gpu a0 m-mig'}, migSegment('3g.40gb@0'), migSegment('1g.10gb@6')),
          'MIG: its instances'),
        h('span', {}, h('span', {class: 'gpu a0 m-shared'}), 'shared (time-sliced)'),
        h('span', {}, h('span', {class: 'gpu a0'}, h('span', {class: 'util', style: {'--u': '60%'}})), 'yellow bar: utilization'));
    ctx.main.append(h('h1', {}, 'Fleet'), figures,
                    h('div', {class: 'toolbar'}, field('Filter', filter), legend), panel, heat);
    let selected = null;
    let last = null;
    let first = true;

    const showPanel = (n) => {
      if (!n) {
        panel.hidden = true;
        return;
      }
      const st = nodeState(n);
      const busy = n.gpus.filter((g) => g.free_milli < 1000).length;
      const action = n.state === 'draining' ? 'undrain' : 'drain';
      panel.hidden = false;
      panel.replaceChildren(
          h('h2', {}, n.id),
          h('p', {}, `${st} · ${n.gpus.length} x ${n.gpu_model || 'no GPU'} · ${busy} in use · ${n.workloads ?? 0} workloads · ${n.vcpus_free}/${n.vcpus} vCPUs free`),
          h('button', {type: 'button', id: 'node-action', class: action === 'drain' ? 'danger' : 'primary', onclick: async () => {
            try {
              await ctx.api(`/v1/nodes/${encodeURIComponent(n.id)}/${action}`, {method: 'POST'});
              ctx.toast(`${n.id}: ${action === 'drain' ? 'draining: no new work is placed there' : 'takes work again'}`);
              await refresh();
            } catch (e) {
              ctx.toast(`${action} failed: ${e.message}`, 'error');
            }
          }}, action === 'drain' ? 'Drain' : 'Undrain'),
          h('button', {type: 'button', onclick: () => { selected = null; showPanel(null); }}, 'Close'));
    };

    const draw = () => {
      if (!last) return;
      const began = performance.now();
      const q = filter.value.trim().toLowerCase();
      const frag = document.createDocumentFragment();
      let shown = 0, gpus = 0;
      for (const n of last.nodes) {
        const st = nodeState(n);
        if (q && !(`${n.id} ${n.gpu_model} ${st}`.toLowerCase().includes(q))) continue;
        ++shown;
        gpus += n.gpus.length;
        const util = new Map((n.agent?.telemetry?.gpus ?? []).filter((t) => !t.lost).map((t) => [t.index, t.gpu_util]));
        const cells = n.gpus.map((g) => gpuCell(g, util.get(g.index)));
        const allocated = n.gpus.filter((g) => g.free_milli < 1000).length;
        frag.append(h('button', {type: 'button', class: `node st-${st}${selected === n.id ? ' selected' : ''}`, role: 'listitem',
                                 dataset: {node: n.id},
                                 'aria-label': `${n.id}, ${st}, ${allocated} of ${n.gpus.length} GPUs in use`},
                       h('span', {class: 'name'}, n.id), h('span', {class: 'meta'}, `${n.gpu_model || '—'} · ${st}`),
                       h('span', {class: 'gpus'}, cells)));
      }
      heat.replaceChildren(frag);
      heat.dataset.nodes = String(shown);
      heat.dataset.gpus = String(gpus);
      heat.dataset.drawMs = String(Math.round(performance.now() - began));
    };
    filter.addEventListener('input', draw);
    // One listener for every tile.
    heat.addEventListener('click', (ev) => {
      const tile = ev.target.closest('.node');
      if (!tile) return;
      selected = tile.dataset.node;
      showPanel(last.nodes.find((n) => n.id === selected));
      heat.querySelector('.node.selected')?.classList.remove('selected');
      tile.classList.add('selected');
    });
    let drawn = '';

    const refresh = async () => {
      last = await allNodes(ctx.api);
      const s = summarize(last.nodes);
      const unallocated = s.gpus - s.allocatedMilli / 1000;
      const pct = s.gpus ? (100 * unallocated) / s.gpus : 0;
      const states = Object.entries(s.states).map(([k, v]) => `${v} ${k}`).join(', ');
      figures.replaceChildren(
          figure('nodes', String(s.nodes), states + (last.waiting.length ? `, ${last.waiting.length} waiting for an agent` : ''), 'fig-nodes'),
          figure('GPUs', String(s.gpus), Object.entries(s.byMode).map(([k, v]) => `${v} ${k}`).join(', '), 'fig-gpus'),
          figure('allocated', (s.allocatedMilli / 1000).toFixed(s.allocatedMilli % 1000 ? 2 : 0), `${s.gpus - s.freeWhole - s.fragments} whole GPUs busy`, 'fig-allocated'),
          figure('unallocated GPU capacity', `${pct.toFixed(1)}%`,
                 `${unallocated.toFixed(2)} GPUs: ${s.freeWhole} wholly free, ${(s.fragmentMilli / 1000).toFixed(2)} in fragments of ${s.fragments} partly used GPUs`, 'fig-unallocated'));
      // Redrawn only when something changed: a quiet fleet costs a fetch every 5 s, not a layout.
      const seen = JSON.stringify(last.nodes);
      if (seen !== drawn) {
        drawn = seen;
        draw();
      }
      if (selected) showPanel(last.nodes.find((n) => n.id === selected));
      if (first) {
        first = false;
        // Milliseconds from navigation to the first full heatmap (the console benchmark reads it).
        requestAnimationFrame(() => { ctx.main.dataset.firstRenderMs = String(Math.round(performance.now())); });
      }
    };
    await ctx.every(5000, refresh);
  },
};
