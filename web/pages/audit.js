// The audit log (admin): who did what, when, and how it ended, oldest first a page at a time,
// as GET /v1/audit pages it.
import {h, table, when} from '../ui.js';

const LIMIT = 100;

export default {
  id: 'audit',
  title: 'Audit',
  order: 60,
  who: 'admin',
  async render(ctx) {
    const list = h('div', {id: 'audit-list'});
    const pages = [0];  // The `after` of each page seen, for Previous.
    const prev = h('button', {type: 'button', disabled: true}, '← Previous');
    const next = h('button', {type: 'button', disabled: true}, 'Next →');
    const where = h('span', {class: 'muted'});
    ctx.main.append(h('h1', {}, 'Audit log'), h('div', {class: 'toolbar'}, prev, next, where), list);
    let lastSeq = 0;
    const load = async () => {
      const after = pages[pages.length - 1];
      const page = await ctx.api(`/v1/audit?after=${after}&limit=${LIMIT}`);
      const entries = page.entries;
      lastSeq = entries.length ? entries[entries.length - 1].seq : after;
      where.textContent = entries.length ? `entries ${entries[0].seq} to ${lastSeq}` : 'no entries after this point';
      prev.disabled = pages.length === 1;
      next.disabled = entries.length < LIMIT;
      list.replaceChildren(table(
          [{title: '#', num: true, cell: (e) => String(e.seq)}, {title: 'When', cell: (e) => when(e.at)},
           {title: 'Actor', cell: (e) => e.actor}, {title: 'Action', cell: (e) => e.action},
           {title: 'Target', cell: (e) => e.target}, {title: 'Status', num: true, cell: (e) => String(e.status)},
           {title: 'Detail', cell: (e) => h('span', {class: 'detail'}, e.detail)}],
          entries, {empty: 'Nothing audited yet.'}));
    };
    next.addEventListener('click', () => { pages.push(lastSeq); ctx.status.textContent = ''; load(); });
    prev.addEventListener('click', () => { pages.pop(); load(); });
    await ctx.every(10000, load);
  },
};
