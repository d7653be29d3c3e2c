// What every page of the console uses: the API client, DOM building that never parses markup
// (every string a user or the server wrote goes in as text, so it cannot become HTML), and the
// formats of money, sizes and times.

const TOKEN_KEY = 'tessera.token';
let onUnauthorized = () => {};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// Called when the API says the session's token no longer holds.
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

// A /v1 call with the session's token (or `opts.token`). Resolves to {res, text}; rejects with
// an ApiError carrying the API's error code and message.
async function request(path, opts = {}) {
  const headers = {Authorization: `Bearer ${opts.token ?? token() ?? ''}`};
  let body;
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.body);
  }
  let res;
  try {
    res = await fetch(path, {method: opts.method ?? 'GET', headers, body, cache: 'no-store',
                             credentials: 'omit', referrerPolicy: 'no-referrer'});
  } catch (e) {
    throw new ApiError(0, 'unreachable', `the server cannot be reached (${e.message})`);
  }
  const text = await res.text();
  if (!res.ok) {
    let err = null;
    try {
      err = JSON.parse(text)?.error;
    } catch {
      err = null;
    }
    err ??= {code: `http_${res.status}`, message: text.slice(0, 200) || res.statusText};
    if (res.status === 401 && opts.token === undefined) onUnauthorized(err.message);
    throw new ApiError(res.status, err.code, err.message);
  }
  return {res, text};
}

// A /v1 call answered with JSON: resolves to the parsed body.
export async function api(path, opts = {}) {
  const {text} = await request(path, opts);
  return text ? JSON.parse(text) : null;
}

// A /v1 call answered with text (logs, CSV): resolves to {text, headers}.
export async function apiText(path, opts = {}) {
  const {res, text} = await request(path, opts);
  return {text, headers: res.headers};
}

// An element: h('td', {class: 'num', onclick: fn, 'aria-label': 'x'}, 'text', child, [more]).
// Strings become text nodes; null and false are skipped.
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (key === 'text') {
      el.textContent = value;
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (key === 'style') {
      for (const [prop, v] of Object.entries(value)) el.style.setProperty(prop, v);
    } else if (key in el && typeof value !== 'string') {
      el[key] = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// A table in a scrolling wrapper. columns: [{title, cell: row => text or node, num: bool}].
// A column may be `wide`: left out on a phone's narrow screen (app.css), so the rest fits.
export function table(columns, rows, opts = {}) {
  const cls = (c) => [c.num ? 'num' : '', c.wide ? 'wide' : ''].join(' ').trim() || null;
  const head = h('tr', {}, columns.map((c) => h('th', {scope: 'col', class: cls(c)}, c.title)));
  const body = rows.map((r) => h('tr', opts.rowProps ? opts.rowProps(r) : {},
                                 columns.map((c) => h('td', {class: cls(c)}, c.cell(r)))));
  const t = h('table', {class: 'grid'},
              opts.caption ? h('caption', {}, opts.caption) : null,
              h('thead', {}, head), h('tbody', {}, body));
  if (rows.length === 0 && opts.empty) {
    t.tBodies[0].append(h('tr', {}, h('td', {colspan: columns.length, class: 'muted'}, opts.empty)));
  }
  return h('div', {class: 'table-wrap'}, t);
}

export function badge(state, label = state) {
  return h('span', {class: `badge s-${state}`}, label);
}

// An instance's state as a badge: "pulling 42%" while its node's agent pulls its image.
export function instanceBadge(inst) {
  const pulling = inst.state === 'pulling' && inst.pull && Number.isFinite(inst.pull.percent);
  return badge(inst.state, pulling ? `pulling ${inst.pull.percent}%` : inst.state);
}

// "12.3456" (USD) -> "$12.35"; amounts under a cent keep four decimals.
export function usd(text) {
  const v = Number(text);
  if (!Number.isFinite(v)) return '—';
  const digits = v !== 0 && Math.abs(v) < 0.01 ? 4 : 2;
  return `$${v.toLocaleString('en-US', {minimumFractionDigits: digits, maximumFractionDigits: digits})}`;
}

export function gib(mib) {
  return `${Math.round((mib / 1024) * 10) / 10} GiB`;
}

// Seconds -> "3d 4h", "5h 2m", "4m 10s".
export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400), hr = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  if (m) return `${m}m ${sec}s`;
  return `${sec}s`;
}

export function age(rfc3339) {
  return duration((Date.now() - Date.parse(rfc3339)) / 1000);
}

export function when(rfc3339) {
  const t = new Date(rfc3339);
  return Number.isNaN(t.getTime()) ? '—' : t.toLocaleString('en-GB', {hour12: false});
}

// The first day of this month (UTC) and now, as the billing API takes them.
export function thisMonth() {
  const now = new Date();
  const from = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const month = `${from.getUTCFullYear()}-${String(from.getUTCMonth() + 1).padStart(2, '0')}`;
  return {from: from.toISOString().replace('.000', ''), to: new Date(Date.now() + 60000).toISOString().replace(/\.\d+Z$/, 'Z'), month};
}

// A shape in words: "gpu.1xh100", "H100-80GB 3g.40gb slice", "0.25 x A100-80GB".
export function shapeText(shape) {
  if (!shape) return '—';
  if (shape.instance_type) return shape.instance_type;
  if (shape.mig_profile) return `${shape.mig_profile} of ${shape.gpu_model}`;
  if (shape.milli_gpu) return `${shape.milli_gpu / 1000} x ${shape.gpu_model}`;
  if (!shape.gpu_model) return 'CPU only';
  return `${shape.gpus} x ${shape.gpu_model}`;
}

// What an instance holds (or, once ended, held): "2 x H100-80GB", "3g.40gb of A100-80GB",
// "0.5 x L40S-48GB".
export function gpusText(gpus) {
  if (!gpus || gpus.length === 0) return '—';
  const g = gpus[0];
  if (g.mig_profile) return `${g.mig_profile} of ${g.model}`;
  if (g.milli_gpu) return `${g.milli_gpu / 1000} x ${g.model}`;
  return `${gpus.length} x ${g.model}`;
}

// How long an instance has been around, or once it ended how long its last run lasted.
export function lifeText(inst) {
  if (!inst.ended_at) return age(inst.created_at);
  return inst.run_seconds === undefined ? 'never ran' : `ran ${duration(inst.run_seconds)}`;
}

// A labelled form field.
export function field(label, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  control.id = id;
  return h('div', {class: 'field'}, h('label', {for: id}, label), control,
           hint ? h('small', {class: 'muted'}, hint) : null);
}

// A form that makes one API call: `send()` builds and makes it; what it answers goes to `done`. A
// refusal is shown under the fields with the API's message, which names the field at fault.
export function actionForm({id, title, rows, submitLabel, send, done}) {
  const error = h('p', {class: 'error', role: 'alert'});
  const submit = h('button', {type: 'submit', class: 'primary'}, submitLabel);
  return h('form', {id, class: 'card', onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    submit.disabled = true;
    try {
      await done(await send());
    } catch (e) {
      error.textContent = `Not done: ${e.message}`;
    } finally {
      submit.disabled = false;
    }
  }}, h('h2', {}, title), ...rows, error, submit);
}

export function select(options, props = {}) {
  return h('select', props, options.map(([value, text]) => h('option', {value}, text)));
}

// Chart.js (Debian's, embedded), loaded once by the first page that draws a chart, so the
// pages without one do not wait for it.
let chartLoaded = null;
export function loadChart() {
  chartLoaded ??= new Promise((resolve, reject) => {
    const script = h('script', {src: '/console/chart.min.js'});
    script.addEventListener('load', () => resolve(window.Chart));
    script.addEventListener('error', () => reject(new Error('Chart.js could not be loaded')));
    document.head.append(script);
  });
  return chartLoaded;
}

// A line chart of points [{x: ms, y}] per series, with times on the x axis (after loadChart).
export function lineChart(canvas, series, opts = {}) {
  if (typeof Chart === 'undefined') return null;
  const palette = ['#2f6fed', '#76b900', '#e8710a', '#a142f4', '#d93025', '#12b5cb'];
  return new Chart(canvas, {
    type: 'line',
    data: {datasets: series.map((s, i) => ({label: s.label, data: s.points, borderColor: palette[i % palette.length],
                                            backgroundColor: palette[i % palette.length], pointRadius: 0,
                                            borderWidth: 2, tension: 0.2}))},
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
      interaction: {mode: 'nearest', intersect: false},
      scales: {
        x: {type: 'linear', ticks: {maxTicksLimit: 6, callback(v) {
          // Seconds too when the span is short, so ticks are not all the same minute.
          const short = this.max - this.min < 10 * 60 * 1000;
          return new Date(v).toLocaleTimeString('en-GB', {hour12: false, hour: '2-digit', minute: '2-digit',
                                                           second: short ? '2-digit' : undefined});
        }}},
        y: {beginAtZero: true, suggestedMax: opts.max, title: {display: Boolean(opts.unit), text: opts.unit}},
      },
      plugins: {legend: {display: series.length > 1}},
    },
  });
}
