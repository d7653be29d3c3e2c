// The console's shell: sign-in, the navigation and the router. Pages are modules under pages/,
// listed by /console/manifest.json (made at build time from web/pages/*.js), so adding a page is
// adding a file. Each exports {id, title, order, who: 'any' | 'tenant' | 'admin', nav, render}.
// Page state (which instance is open) lives in the browser's history state, never in the URL.
import {api, ApiError, h, setToken, setUnauthorizedHandler, token} from './ui.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const signout = document.getElementById('signout');
const toastBox = document.getElementById('toast');

const pages = new Map();
let me = null;
let leaving = [];  // What the current page must stop when left: timers, charts.

function toast(message, kind = 'info') {
  const item = h('div', {class: `toast ${kind}`}, message);
  toastBox.append(item);
  setTimeout(() => item.remove(), kind === 'error' ? 8000 : 4000);
}

function leave() {
  for (const fn of leaving) {
    try {
      fn();
    } catch {
      // A chart or timer that is already gone.
    }
  }
  leaving = [];
}

function allowed(page) {
  if (page.who === 'admin') return me.admin;
  if (page.who === 'tenant') return !me.admin;
  return true;
}

function go(id, state = {}) {
  history.pushState(state, '', `#/${id}`);
  route();
}

function renderNav(active) {
  const links = [...pages.values()]
      .filter((p) => p.nav !== false && allowed(p))
      .sort((a, b) => a.order - b.order)
      .map((p) => h('a', {href: `#/${p.id}`, 'aria-current': p.id === active ? 'page' : null}, p.title));
  nav.replaceChildren(...links);
}

function route() {
  leave();
  if (!me) return signIn();
  const id = location.hash.replace(/^#\/?/, '') || (me.admin ? 'fleet' : 'instances');
  const page = pages.get(id);
  renderNav(page ? page.id : '');
  main.replaceChildren();
  if (!page || !allowed(page)) {
    main.append(h('h1', {}, 'Not found'), h('p', {}, `There is no page '${id}' for this token.`));
    return;
  }
  document.title = `${page.title} · Tessera`;
  const status = h('p', {class: 'status', role: 'status'});
  const ctx = {
    main, me, api, h, go, toast,
    state: history.state ?? {},
    // Runs fn now and every ms while the page is shown (not while the tab is hidden); a failure
    // shows on the page and the next round tries again.
    every(ms, fn) {
      let stopped = false;
      let timer = null;
      const tick = async () => {
        if (stopped) return;
        if (!document.hidden) {
          try {
            await fn();
            status.textContent = '';
            status.classList.remove('error');
          } catch (e) {
            if (stopped) return;
            status.textContent = e instanceof ApiError ? `${e.message}` : `${e}`;
            status.classList.add('error');
          }
        }
        if (!stopped) timer = setTimeout(tick, ms);
      };
      leaving.push(() => {
        stopped = true;
        clearTimeout(timer);
      });
      return tick();
    },
    onLeave(fn) {
      leaving.push(fn);
    },
    status,
  };
  main.append(status);
  Promise.resolve(page.render(ctx)).catch((e) => {
    status.textContent = e instanceof ApiError ? e.message : String(e);
    status.classList.add('error');
  });
}

function signOut(message) {
  leave();
  setToken(null);
  me = null;
  sessionStorage.removeItem('tessera.me');
  who.textContent = '';
  signout.hidden = true;
  nav.replaceChildren();
  history.replaceState({}, '', '#/');
  signIn(message);
}

function signIn(message) {
  document.title = 'Sign in · Tessera';
  const input = h('input', {id: 'token', name: 'token', type: 'password', autocomplete: 'off',
                            spellcheck: 'false', required: true, placeholder: 'tsr_…'});
  const error = h('p', {id: 'signin-error', class: 'error', role: 'alert'}, message ?? '');
  const button = h('button', {type: 'submit', class: 'primary'}, 'Sign in');
  const form = h('form', {class: 'card signin', novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    const value = input.value.trim();
    if (!value) {
      error.textContent = 'Enter a token: a tenant token (tessera tenants create) or the admin token the server printed.';
      return;
    }
    button.disabled = true;
    try {
      const answer = await api('/v1/whoami', {token: value});
      setToken(value);
      me = answer;
      sessionStorage.setItem('tessera.me', JSON.stringify(answer));
      showWho();
      history.replaceState({}, '', '#/');
      route();
    } catch (e) {
      error.textContent = e.status === 401 || e.status === 403
          ? `That token was refused: ${e.message}.`
          : `Cannot sign in: ${e.message}.`;
      input.focus();
    } finally {
      button.disabled = false;
    }
  }},
  h('h1', {}, 'Sign in to Tessera'),
  h('p', {class: 'muted'}, 'Use a tenant token to run instances, or the admin token to see the fleet. The token stays in this tab only.'),
  h('div', {class: 'field'}, h('label', {for: 'token'}, 'Token'), input),
  error, button);
  main.replaceChildren(form);
  nav.replaceChildren();
  input.focus();
}

function showWho() {
  who.textContent = me.admin ? 'admin' : `tenant ${me.tenant.name}`;
  signout.hidden = false;
}

async function start() {
  setUnauthorizedHandler((message) => signOut(`Signed out: ${message}.`));
  signout.addEventListener('click', () => signOut('Signed out.'));
  window.addEventListener('popstate', route);
  const manifest = await (await fetch('/console/manifest.json', {cache: 'no-cache'})).json();
  performance.mark('tessera-start');
  const modules = await Promise.all(manifest.pages.map((path) => import(`/console/${path}`)));
  for (const mod of modules) pages.set(mod.default.id, mod.default);
  performance.mark('tessera-pages');
  const saved = sessionStorage.getItem('tessera.me');
  if (token() && saved) {
    me = JSON.parse(saved);
    showWho();
  }
  route();
}

start().catch((e) => {
  main.replaceChildren(h('p', {class: 'error'}, `The console could not start: ${e}`));
});
