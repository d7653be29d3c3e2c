// The web console in a real browser: Debian's Chromium, headless, driven by playwright-core,
// against a real `tessera server` with simulated agents running real processes. It signs in as a
// tenant and launches, watches and deletes an instance through the page; as another tenant it
// finds none of it; as the admin it checks the fleet heatmap's counts against the API and drains
// a node. It saves a screenshot of every page at laptop and phone widths.
// Run by ctest (tests/CMakeLists.txt); `make test` installs its npm packages first.
import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import {randomBytes} from 'node:crypto';
import {existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync} from 'node:fs';
import {tmpdir} from 'node:os';
import path from 'node:path';
import {after, before, test} from 'node:test';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.TESSERA_BIN ?? path.resolve(here, '../../build/release/tessera');
const SHOTS = process.env.TESSERA_SCREENSHOTS ?? path.resolve(path.dirname(BIN), 'console-screenshots');
const CHROMIUM = process.env.TESSERA_CHROMIUM ?? '/usr/bin/chromium';
const ADMIN = `tsr_${randomBytes(32).toString('hex')}`;
const LAPTOP = {width: 1280, height: 800};
const PHONE = {width: 390, height: 844};

const FLEET = {
  name: 'console',
  shapes: [
    {name: 'h100', count: 2, gpu_model: 'H100-80GB', gpus: 4, vcpus: 128, memory_gib: 1024, nvlink: 'all', gpu_mode: 'exclusive'},
    {name: 'a100', count: 1, gpu_model: 'A100-80GB', gpus: 2, vcpus: 64, memory_gib: 512, gpu_mode: 'mig'},
    {name: 'l40s', count: 1, gpu_model: 'L40S-48GB', gpus: 2, vcpus: 64, memory_gib: 512, gpu_mode: 'shared'},
  ],
};

let chromium;
let server;
let url;
let browser;
let dir;
const tokens = {};
const pageErrors = [];
const refusals = [];  // Every 400 and 409 the pages got: only what a test asked for on purpose.

async function call(method, route, token, body) {
  const res = await fetch(url + route, {
    method, headers: {Authorization: `Bearer ${token}`, ...(body ? {'Content-Type': 'application/json'} : {})},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return {status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null, text};
}

function startServer() {
  return new Promise((resolve, reject) => {
    const fleet = path.join(dir, 'fleet.json');
    writeFileSync(fleet, JSON.stringify(FLEET));
    server = spawn(BIN, ['server', '--listen', '127.0.0.1:0', '--data', path.join(dir, 'data'), '--fleet', fleet,
                         '--sim-agents'], {env: {...process.env, TESSERA_ADMIN_TOKEN: ADMIN}});
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the server did not start: ${out}`)), 30000);
    const onData = (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    server.stdout.on('data', onData);
    server.stderr.on('data', onData);
    server.on('exit', (code) => reject(new Error(`the server exited (${code}): ${out}`)));
  });
}

async function newPage(viewport = LAPTOP) {
  const context = await browser.newContext({viewport});
  const page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(`${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') pageErrors.push(m.text());
  });
  page.on('dialog', (d) => d.accept());
  page.on('response', (r) => {
    if (r.status() === 400 || r.status() === 409) {
      refusals.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
    }
  });
  return page;
}

async function signIn(page, token) {
  await page.goto(`${url}/`);
  await page.fill('#token', token);
  await page.click('form.signin button[type=submit]');
  await page.waitForSelector('#nav a');
}

async function shoot(page, name) {
  mkdirSync(SHOTS, {recursive: true});
  for (const [label, viewport] of [['laptop', LAPTOP], ['phone', PHONE]]) {
    await page.setViewportSize(viewport);
    await page.waitForTimeout(150);  // Charts resize on the next frame.
    await page.screenshot({path: path.join(SHOTS, `${name}-${label}.png`), fullPage: label === 'laptop'});
    if (label === 'phone') {
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 1, `${name} is ${overflow}px wider than a phone's screen`);
    }
  }
  await page.setViewportSize(LAPTOP);
}

async function open(page, id) {
  await page.click(`#nav a[href="#/${id}"]`);
  await page.waitForFunction((p) => document.title.startsWith(p), (await page.textContent(`#nav a[href="#/${id}"]`)).trim());
}

before(async () => {
  try {
    ({chromium} = await import('playwright-core'));
  } catch {
    throw new Error('playwright-core is not installed: run `make test`, or `npm ci` in tests/console');
  }
  assert.ok(existsSync(BIN), `no tessera binary at ${BIN} (set TESSERA_BIN)`);
  assert.ok(existsSync(CHROMIUM), `no Chromium at ${CHROMIUM}: run scripts/bootstrap.sh`);
  dir = mkdtempSync(path.join(tmpdir(), 'tessera-console-'));
  url = await startServer();
  for (const name of ['acme', 'beta']) {
    const r = await call('POST', '/v1/tenants', ADMIN, {name, quota: {gpus: 8}});
    assert.equal(r.status, 201, r.text);
    tokens[name] = r.body.token;
  }
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
  if (dir) rmSync(dir, {recursive: true, force: true});
});

test('the console is served with a strict policy and no inline script', async () => {
  const r = await fetch(`${url}/`);
  assert.equal(r.status, 200);
  const csp = r.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.match(csp, /frame-ancestors 'none'/);
  const html = await r.text();
  assert.doesNotMatch(html, /<script>|<script [^>]*>[^<]+<\/script>|\son\w+=/, 'inline script in index.html');
  const again = await fetch(`${url}/console/app.js`, {headers: {'If-None-Match': r.headers.get('etag') ?? ''}});
  assert.equal(again.status, 200, 'another file answered 304 to index.html’s validator');
  const etag = again.headers.get('etag');
  assert.equal((await fetch(`${url}/console/app.js`, {headers: {'If-None-Match': etag}})).status, 304);
  assert.equal((await fetch(`${url}/console/nothing.js`)).status, 404);
});

test('a bad token gets a clear message and no page', async () => {
  const page = await newPage();
  await page.goto(`${url}/`);
  await page.fill('#token', 'tsr_not_a_token');
  await page.click('form.signin button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#signin-error').textContent.length > 0);
  const message = await page.textContent('#signin-error');
  assert.match(message, /refused/i);
  assert.equal(await page.locator('#nav a').count(), 0);
  await shoot(page, 'signin');
  await page.fill('#token', '');
  await page.click('form.signin button[type=submit]');
  assert.match(await page.textContent('#signin-error'), /Enter a token/);
  await page.context().close();
});

test('a tenant launches an instance through the form, sees it run, reads its log and deletes it', async () => {
  const page = await newPage();
  await signIn(page, tokens.acme);
  assert.doesNotMatch(page.url(), /tsr_/, 'the token is in the URL');
  await page.waitForSelector('#launch');
  await page.selectOption('#launch-kind', 'exclusive');
  await page.selectOption('#launch-type', 'gpu.1xh100');
  await page.selectOption('#launch-billing', 'on_demand');
  assert.match(await page.textContent('#launch-price'), /On-demand \$\d+\.\d\d\/h/);
  await page.fill('#launch-name', 'web-1');
  // Output the page must show as text, never as markup.
  await page.fill('#launch-command', 'echo "hello from the console <img src=x id=injected>"; sleep 600');
  await page.click('#launch button[type=submit]');
  await page.waitForSelector('#toast .toast', {timeout: 10000});
  assert.match(await page.textContent('#toast'), /Launched web-1/);
  const row = page.locator('#instances-list tr[data-state=running]', {hasText: 'web-1'});
  await row.waitFor({timeout: 20000});
  const id = await row.getAttribute('data-id');
  assert.match(id, /^inst-/);
  await shoot(page, 'instances');

  await row.locator('a.open').click();
  await page.waitForFunction(() => document.querySelector('#instance-log')?.textContent.includes('hello from the console'),
                             null, {timeout: 20000});
  assert.match(await page.textContent('#instance-history'), /running/);
  assert.match(await page.textContent('#instance-history'), /pending/);
  assert.match(await page.textContent('#instance-details'), /<img src=x id=injected>/);
  assert.equal(await page.locator('#injected').count(), 0, 'user input became markup');
  assert.equal(await page.locator('canvas#chart-util').count(), 1);
  assert.doesNotMatch(page.url(), /inst-/, 'the instance id is in the URL');
  // Its GPU's readings arrive with the agent's telemetry (every 10 s) and fill the charts.
  await page.waitForFunction(() => Number(document.querySelector('main').dataset.points) >= 2, null, {timeout: 30000});
  await shoot(page, 'instance');

  await page.click('button.danger:has-text("Delete")');
  await page.waitForFunction(() => document.querySelector('main').dataset.instanceState === 'terminated', null,
                             {timeout: 20000});
  assert.match(await page.textContent('#instance-history'), /stopping/);
  const api = await call('GET', `/v1/instances/${id}`, tokens.acme);
  assert.equal(api.body.state, 'terminated');
  // Ended, it still says where it ran, and for how long rather than its age.
  assert.ok(api.body.node, `the ended instance lost its node: ${api.text}`);
  assert.equal(api.body.gpus.length, 1, api.text);
  await page.waitForFunction(() => /Ended/.test(document.querySelector('#instance-details')?.textContent ?? ''));
  assert.match(await page.textContent('#instance-details'), new RegExp(`Node${api.body.node}`));
  assert.match(await page.textContent('#instance-details'), /ran \d/);

  await open(page, 'costs');
  await page.waitForSelector('#cost-total');
  await page.waitForFunction(() => document.querySelector('#cost-invoice tbody tr td')?.textContent.startsWith('inst-'));
  assert.match(await page.textContent('#cost-invoice'), new RegExp(id));
  // A reservation's rate and whole commitment show before anything is reserved; a budget is set.
  // (The first type listed, an A100's, is refused: this fleet's A100s are in MIG mode.)
  await page.waitForFunction(() => /No quote: .*in exclusive mode/.test(document.querySelector('#resv-quote')?.textContent ?? ''));
  await page.selectOption('#resv-type', 'gpu.1xh100');
  await page.waitForFunction(() => /a commitment of \$[\d,]+\.\d\d/.test(document.querySelector('#resv-quote')?.textContent ?? ''));
  await page.selectOption('#resv-term', '3y');
  await page.waitForFunction(() => /to 20\d\d/.test(document.querySelector('#resv-quote').textContent));
  assert.equal((await call('GET', '/v1/reservations', tokens.acme)).body.reservations.length, 0, 'a quote reserved something');
  await page.fill('#budget-usd', '500');
  await page.click('#budget-set button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#cost-budgets')?.textContent.includes('$500.00'));
  await shoot(page, 'costs');
  const gang = await call('POST', '/v1/groups', tokens.acme, {
    name: 'ddp', size: 2, topology: 'nvlink',
    template: {billing: 'on_demand', gpu_model: 'H100-80GB', gpus: 1, vcpus: 4, memory_mib: 16384, command: 'sleep 600'}});
  assert.equal(gang.status, 201, gang.text);
  await open(page, 'groups');
  await page.waitForFunction(() => document.querySelectorAll('#groups-list .member.s-running').length === 2, null,
                             {timeout: 20000});
  assert.match(await page.textContent('#groups-list'), /ddp/);
  // A group made with the form, autoscaled on its backlog.
  await page.fill('#group-name', 'web-serve');
  await page.selectOption('#group-type', 'gpu.1xh100');
  await page.fill('#group-size', '1');
  await page.selectOption('#group-metric', 'pending');
  await page.fill('#group-min', '1');
  await page.fill('#group-max', '2');
  await page.fill('#group-target', '10');
  await page.click('#group-create button[type=submit]');
  await page.waitForFunction(() => /web-serve/.test(document.querySelector('#groups-list').textContent), null, {timeout: 10000});
  const made = (await call('GET', '/v1/groups', tokens.acme)).body.groups.find((g) => g.name === 'web-serve');
  assert.equal(made.autoscale.metric, 'pending');
  assert.equal(made.autoscale.max, 2);
  await shoot(page, 'groups');
  await open(page, 'alerts');
  await page.fill('#rule-name', 'ConsoleHot');
  await page.selectOption('#rule-metric', 'DCGM_FI_DEV_GPU_TEMP');
  await page.fill('#rule-threshold', '80');
  await page.click('#rule-create button[type=submit]');
  await page.waitForFunction(() => /ConsoleHot/.test(document.querySelector('#alert-rules').textContent));
  // A refusal names the field.
  await page.fill('#rule-name', 'not a name');
  await page.click('#rule-create button[type=submit]');
  await page.waitForFunction(() => /name/.test(document.querySelector('#rule-create .error').textContent));
  for (const p of ['alerts', 'catalog']) {
    await open(page, p);
    await page.waitForTimeout(300);
    await shoot(page, `${p}`);
  }
  await page.fill('#rec-params', '7');
  await page.click('#recommend button[type=submit]');
  await page.waitForSelector('#rec-out table');
  assert.match(await page.textContent('#rec-out'), /fits on/);
  await page.context().close();
});

test('the console works from the keyboard alone', async () => {
  const page = await newPage();
  await page.goto(`${url}/`);
  await page.waitForSelector('#token');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'token', 'the token field does not have focus');
  await page.keyboard.type(tokens.acme);
  await page.keyboard.press('Enter');
  await page.waitForSelector('#nav a');
  let reached = false;
  for (let i = 0; i < 30 && !reached; ++i) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => document.activeElement.textContent === 'Costs');
  }
  assert.ok(reached, 'Tab never reaches the Costs link');
  const outline = await page.evaluate(() => document.activeElement.matches(':focus-visible') &&
                                              getComputedStyle(document.activeElement).outlineStyle);
  assert.equal(outline, 'solid', 'the focused link shows no outline');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.title.startsWith('Costs'));
  await page.context().close();
});

test('another tenant sees none of it, even when it asks the page for it', async () => {
  const theirs = await call('POST', '/v1/instances', tokens.acme, {instance_type: 'gpu.1xh100', billing: 'on_demand', name: 'secret-job'});
  assert.equal(theirs.status, 201, theirs.text);
  const page = await newPage();
  await signIn(page, tokens.beta);
  await page.waitForSelector('#instances-list table');
  assert.match(await page.textContent('#instances-list'), /No instances yet/);
  assert.doesNotMatch(await page.textContent('main'), /secret-job/);
  // Open acme's instance through the page's own navigation.
  await page.evaluate((id) => {
    history.pushState({id}, '', '#/instance');
    dispatchEvent(new PopStateEvent('popstate', {state: {id}}));
  }, theirs.body.id);
  await page.waitForFunction(() => document.querySelector('.status.error')?.textContent.length > 0);
  assert.match(await page.textContent('.status.error'), /not found/);
  assert.doesNotMatch(await page.textContent('main'), /secret-job/);
  await open(page, 'costs');
  await page.waitForSelector('#cost-total');
  assert.equal(await page.textContent('#cost-total'), '$0.00');
  // Admin pages are not there for a tenant.
  assert.equal(await page.locator('#nav a[href="#/fleet"]').count(), 0);
  await page.evaluate(() => { location.hash = '#/fleet'; });
  await page.waitForFunction(() => document.querySelector('main h1')?.textContent === 'Not found');
  await call('DELETE', `/v1/instances/${theirs.body.id}`, tokens.acme);
  await page.context().close();
});

test('the admin sees every GPU in the fleet heatmap with the right counts, and drains a node', async () => {
  const held = await call('POST', '/v1/instances', tokens.acme,
                          {gpu_model: 'H100-80GB', gpus: 2, vcpus: 8, memory_mib: 8192, billing: 'on_demand', name: 'pair',
                           command: 'sleep 600'});
  assert.equal(held.status, 201, held.text);
  const slice = await call('POST', '/v1/instances', tokens.acme,
                           {instance_type: 'mig.a100-80gb.3g.40gb', billing: 'on_demand', name: 'slice'});
  assert.equal(slice.status, 201, slice.text);
  const nodes = (await call('GET', '/v1/nodes?limit=1000', ADMIN)).body.nodes;
  const migNode = nodes.find((n) => n.gpus.some((g) => (g.mig_instances ?? []).length > 0));
  assert.ok(migNode, 'the MIG instance is on no node');
  const gpus = nodes.reduce((n, x) => n + x.gpus.length, 0);
  const allocated = nodes.reduce((n, x) => n + x.gpus.reduce((m, g) => m + (1000 - g.free_milli), 0), 0) / 1000;
  assert.ok(allocated >= 2);

  const page = await newPage();
  await signIn(page, ADMIN);
  await page.waitForSelector('#heatmap[data-nodes]');
  assert.equal(await page.getAttribute('#heatmap', 'data-nodes'), String(nodes.length));
  assert.equal(await page.locator('#heatmap .node').count(), nodes.length);
  assert.equal(await page.locator('#heatmap .gpu').count(), gpus);
  assert.equal(await page.locator('#heatmap .gpu.a4').count(),
               nodes.reduce((n, x) => n + x.gpus.filter((g) => g.mode !== 'mig' && g.free_milli === 0).length, 0));
  // A MIG GPU shows its layout: one band for the 3g.40gb instance.
  assert.equal(await page.locator(`#heatmap .node[data-node="${migNode.id}"] .slice`).count(), 1);
  assert.equal((await page.textContent('#fig-nodes .value')).trim(), String(nodes.length));
  assert.equal((await page.textContent('#fig-gpus .value')).trim(), String(gpus));
  const shown = Number(await page.textContent('#fig-allocated .value'));
  assert.ok(Math.abs(shown - allocated) < 0.006, `the page says ${shown} GPUs allocated, the API ${allocated}`);
  assert.match(await page.textContent('#fig-unallocated .value'), /^\d+\.\d%$/);
  await shoot(page, 'fleet');

  const node = nodes[0].id;
  await page.click(`#heatmap .node[data-node="${node}"]`);
  await page.click('#node-action');
  await page.waitForFunction(() => document.querySelector('#node-action')?.textContent === 'Undrain');
  assert.equal((await call('GET', '/v1/nodes?limit=1000', ADMIN)).body.nodes.find((n) => n.id === node).state, 'draining');
  await page.click('#node-action');
  await page.waitForFunction(() => document.querySelector('#node-action')?.textContent === 'Drain');
  assert.equal((await call('GET', '/v1/nodes?limit=1000', ADMIN)).body.nodes.find((n) => n.id === node).state, 'ready');

  await page.fill('#fleet-filter', 'a100');
  await page.waitForFunction(() => document.querySelector('#heatmap').dataset.nodes === '1');
  await page.fill('#fleet-filter', '');
  for (const p of ['instances', 'audit']) {
    await open(page, p);
    await page.waitForTimeout(300);
    await shoot(page, `admin-${p}`);
  }
  assert.match(await page.textContent('#audit-list'), /POST/);

  // The instances table names tenants, says what each holds as people say it, and fits a phone.
  await open(page, 'instances');
  const slices = page.locator('#instances-list tr', {hasText: 'slice'});
  await slices.first().waitFor();
  assert.match(await slices.first().textContent(), /acme/);
  assert.match(await slices.first().textContent(), /3g\.40gb of A100-80GB/);
  await page.setViewportSize(PHONE);
  const cut = await page.evaluate(() => {
    const wrap = document.querySelector('#instances-list .table-wrap');
    return wrap.scrollWidth - wrap.clientWidth;
  });
  assert.ok(cut <= 1, `the instances table is ${cut}px wider than a phone's screen`);
  await page.setViewportSize(LAPTOP);

  // Costs: every tenant with a total each, and one tenant's invoice once picked.
  await open(page, 'costs');
  await page.waitForSelector('#cost-tenants tr[data-tenant]');
  assert.match(await page.textContent('#cost-tenants'), /acme/);
  assert.match(await page.textContent('#cost-invoice'), /pick a tenant/);
  assert.equal(await page.locator('.status.error').count(), 0);
  await shoot(page, 'admin-costs');
  await page.selectOption('#cost-tenant', {label: 'acme'});
  await page.waitForFunction(() => document.querySelector('#cost-invoice tbody tr td')?.textContent.startsWith('inst-'));
  assert.match(await page.textContent('main h1'), /acme/);
  assert.equal(await page.locator('#cost-tenants').isVisible(), false);
  await shoot(page, 'admin-costs-tenant');
  await page.context().close();
});

test('no page raised a script error or broke its content security policy', () => {
  assert.deepEqual(pageErrors.filter((e) => !/Failed to load resource: the server responded with a status of 40[01349]/.test(e)), []);
  assert.deepEqual([...new Set(refusals)].sort(), ['400 POST /v1/alert-rules', '409 POST /v1/reservations'],
                   'a page sent a request the API refused');
});
