// Events: the live stream (/v1/events), newest first, filterable by type.
import { h, swap, events, when, badge, doneBadge, empty, debounce } from '../lib.js';

export const title = 'Events';

const KINDS = ['placement', 'drift', 'job', 'rollout'];

export function mount(el) {
  const on = new Set(KINDS);
  let text = '';
  const count = h('p', { class: 'summary', 'aria-live': 'polite' });
  const body = h('tbody');
  const buttons = KINDS.map((k) => {
    const b = h('button', { type: 'button', 'aria-pressed': 'true', 'data-kind': k }, k);
    b.addEventListener('click', () => {
      if (on.has(k)) on.delete(k); else on.add(k);
      b.setAttribute('aria-pressed', String(on.has(k)));
      render();
    });
    return b;
  });
  const search = h('input', { type: 'search', id: 'ev-filter', placeholder: 'filter: policy, node, text' });
  search.addEventListener('input', debounce(() => { text = search.value.trim().toLowerCase(); render(); }, 150));
  el.append(h('h1', {}, 'Events'),
    h('div', { class: 'filters', role: 'group', 'aria-label': 'Event types' }, buttons, h('label', { for: 'ev-filter', class: 'small' }, 'Text'), search),
    count,
    h('div', { class: 'tablewrap' }, h('table', { class: 'events' },
      h('thead', {}, h('tr', {}, ['Seq', 'Time', 'Type', 'Policy', 'Node', 'Message'].map((c) => h('th', { scope: 'col' }, c)))),
      body)));

  const match = (ev) => {
    const kind = (ev.type || '').split('.')[0];
    if (KINDS.includes(kind) && !on.has(kind)) return false;
    if (!text) return true;
    return [ev.type, ev.policy, ev.node, ev.message].some((v) => (v || '').toLowerCase().includes(text));
  };
  const row = (ev) => {
    const [kind, state] = (ev.type || '').split('.');
    const n = ev.count || 1;
    return h('tr', { 'data-type': ev.type, 'data-seq': String(ev.seq ?? '') },
      h('td', { class: 'num' }, String(ev.seq ?? '')),
      h('td', { class: 'time' }, when(ev.time)),
      h('td', {}, h('span', { class: 'mono' }, `${kind}.`), kind === 'placement' ? doneBadge(state || kind, ev.message) : badge(state || kind, state || kind)),
      h('td', {}, ev.policy || ''),
      h('td', {}, ev.node ? h('a', { href: `#/mesh/${encodeURIComponent(ev.node)}` }, ev.node) : ''),
      h('td', { class: 'msg' }, ev.message || '',
        n > 1 ? h('span', { class: 'count', title: `${n} times, first ${when(ev.first)}` }, ` ×${n}`) : ''));
  };
  const LIMIT = 500;
  function render() {
    const shown = events.list.filter(match).slice(-LIMIT).reverse();
    swap(count, `${shown.length} of ${events.list.length} events${events.list.length ? ` (since seq ${events.list[0].seq})` : ''}.`);
    swap(body, shown.length ? shown.map(row) : h('tr', {}, h('td', { colspan: 6 }, empty('No events yet.'))));
  }
  render();
  el.dataset.loaded = '1';
  const off = events.on((ev) => {
    if (!match(ev)) { swap(count, `${body.children.length} shown of ${events.list.length} events.`); return; }
    if (ev.replaces) body.querySelector(`tr[data-seq="${ev.replaces}"]`)?.remove();
    const first = body.firstElementChild;
    if (first && first.querySelector('.empty')) body.replaceChildren();
    body.prepend(row(ev));
    while (body.children.length > LIMIT) body.lastElementChild.remove();
    swap(count, `${body.children.length} of ${events.list.length} events.`);
  });
  return () => off();
}
