// The console's figures (docs/console.md): the size of what the binary embeds for it, and the time
// from navigation to the first full render of the fleet page on a fleet of 1,000 nodes of 8 GPUs,
// about two thirds allocated, in Debian's Chromium (headless). Usage:
//   node bench/console_bench.mjs [--nodes 1000] [--runs 5]
// With TESSERA_SCREENSHOTS=DIR it also saves the fleet page it measured there.
// (TESSERA_BIN names the binary; playwright-core comes from tests/console: scripts/console-deps.sh.)
import {spawn} from 'node:child_process';
import {randomBytes} from 'node:crypto';
import {mkdtempSync, readdirSync, rmSync, statSync, writeFileSync} from 'node:fs';
import {createRequire} from 'node:module';
import {tmpdir} from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const args = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const NODES = arg('nodes', 1000);
const RUNS = arg('runs', 5);
const BIN = process.env.TESSERA_BIN ?? path.join(root, 'build/release/tessera');
const ADMIN = `tsr_${randomBytes(32).toString('hex')}`;
const require = createRequire(path.join(root, 'tests/console/package.json'));
const {chromium} = require('playwright-core');

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function call(url, method, route, token, body) {
  const res = await fetch(url + route, {method, headers: {Authorization: `Bearer ${token}`, 'Content-Type': 'application/json'},
                                        body: body ? JSON.stringify(body) : undefined});
  return {status: res.status, body: await res.json()};
}

function start(dir) {
  const fleet = path.join(dir, 'fleet.json');
  writeFileSync(fleet, JSON.stringify({name: 'bench', shapes: [
    {name: 'h100', count: NODES, gpu_model: 'H100-80GB', gpus: 8, vcpus: 192, memory_gib: 2048, nvlink: 'all', gpu_mode: 'exclusive'}]}));
  const server = spawn(BIN, ['server', '--listen', '127.0.0.1:0', '--data', path.join(dir, 'data'), '--fleet', fleet],
                       {env: {...process.env, TESSERA_ADMIN_TOKEN: ADMIN}});
  return new Promise((resolve, reject) => {
    let out = '';
    const grab = (c) => {
      out += c;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve({server, url: m[1]});
    };
    server.stdout.on('data', grab);
    server.stderr.on('data', grab);
    server.on('exit', (code) => reject(new Error(`server exited ${code}: ${out}`)));
  });
}

const dir = mkdtempSync(path.join(tmpdir(), 'tessera-console-bench-'));
const {server, url} = await start(dir);
try {
  const tenant = await call(url, 'POST', '/v1/tenants', ADMIN, {name: 'load', quota: {gpus: NODES * 8}});
  // About two thirds of the GPUs: instances of 1, 2 and 4 GPUs, so some nodes are full and some
  // partly used.
  const sizes = [1, 2, 4];
  let placed = 0;
  const target = Math.floor(NODES * 8 * 0.66);
  for (let i = 0; placed < target; ++i) {
    const gpus = sizes[i % 3];
    const batch = [];
    for (let k = 0; k < 32 && placed < target; ++k, placed += gpus) {
      batch.push(call(url, 'POST', '/v1/instances', tenant.body.token,
                      {gpu_model: 'H100-80GB', gpus, vcpus: 4 * gpus, memory_mib: 8192 * gpus, billing: 'on_demand'}));
    }
    await Promise.all(batch);
  }
  const nodesJson = await fetch(`${url}/v1/nodes?limit=1000`, {headers: {Authorization: `Bearer ${ADMIN}`}}).then((r) => r.text());

  const browser = await chromium.launch({executablePath: process.env.TESSERA_CHROMIUM ?? '/usr/bin/chromium',
                                         args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                                                '--disable-background-networking', '--disable-component-update', '--disable-sync']});
  const times = [];
  const parts = [];
  for (let run = 0; run < RUNS; ++run) {
    const context = await browser.newContext({viewport: {width: 1280, height: 800}});
    await context.addInitScript((token) => {
      sessionStorage.setItem('tessera.token', token);
      sessionStorage.setItem('tessera.me', JSON.stringify({admin: true}));
    }, ADMIN);
    const page = await context.newPage();
    await page.goto(`${url}/#/fleet`);
    await page.waitForSelector('main[data-first-render-ms]', {timeout: 60000});
    const ms = Number(await page.getAttribute('main', 'data-first-render-ms'));
    const draw = Number(await page.getAttribute('#heatmap', 'data-draw-ms'));
    const fetched = await page.evaluate(() => performance.getEntriesByType('resource')
        .filter((e) => e.name.includes('/v1/nodes')).reduce((n, e) => n + e.duration, 0));
    const marks = await page.evaluate(() => Object.fromEntries(performance.getEntriesByType('mark').map((m) => [m.name, Math.round(m.startTime)])));
    const nav = await page.evaluate(() => { const n = performance.getEntriesByType('navigation')[0]; return {response: Math.round(n.responseEnd), dom: Math.round(n.domContentLoadedEventEnd)}; });
    if (process.env.TESSERA_BENCH_DEBUG) console.log({ms, draw, fetched, ...marks, ...nav});
    parts.push({draw, fetched});
    const cells = await page.locator('#heatmap .gpu').count();
    if (cells !== NODES * 8) throw new Error(`the heatmap shows ${cells} GPUs, not ${NODES * 8}`);
    times.push(ms);
    if (run === 0 && process.env.TESSERA_SCREENSHOTS) {
      await page.screenshot({path: path.join(process.env.TESSERA_SCREENSHOTS, `fleet-${NODES}-nodes-laptop.png`)});
    }
    await context.close();
  }
  await browser.close();

  const web = path.join(root, 'web');
  const walk = (d) => readdirSync(d).flatMap((f) => (statSync(path.join(d, f)).isDirectory() ? walk(path.join(d, f)) : [path.join(d, f)]));
  const own = walk(web).reduce((n, f) => n + statSync(f).size, 0);
  const chart = statSync('/usr/share/javascript/chart.js/chart.min.js').size;
  console.log(`fleet page, first render of ${NODES} nodes x 8 GPUs (${placed} GPUs allocated), ${RUNS} runs:`);
  console.log(`  median ${median(times)} ms, min ${Math.min(...times)} ms, max ${Math.max(...times)} ms (from navigation start)`);
  console.log(`  of which the median run's GET /v1/nodes took ${Math.round(median(parts.map((p) => p.fetched)))} ms and drawing the heatmap ${median(parts.map((p) => p.draw))} ms`);
  console.log(`  GET /v1/nodes?limit=1000 answer: ${(nodesJson.length / 1024).toFixed(0)} KiB`);
  console.log(`embedded assets: ${(own / 1024).toFixed(1)} KiB of the console's own files + ${(chart / 1024).toFixed(1)} KiB Chart.js = ${((own + chart) / 1024).toFixed(1)} KiB`);
} finally {
  server.kill('SIGTERM');
  rmSync(dir, {recursive: true, force: true});
}
