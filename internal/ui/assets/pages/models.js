// Models, data and code: every artifact version with its signer and
// holders, and the transfers in progress here with progress bars.
import { h, swap, get, poll, badge, failure, empty, section, table, bytes, short, when, duration } from '../lib.js';

export const title = 'Models & data';

export function mount(el) {
  const models = h('div');
  const datasets = h('div');
  const code = h('div');
  const transfers = h('div', { 'aria-live': 'polite' });
  el.append(h('h1', {}, 'Models, data and code'),
    section('Transfers to this agent', transfers),
    section('Models', models),
    section('Datasets', datasets),
    section('Code', code));

  async function artifacts() {
    try {
      const all = await get('/v1/artifacts');
      swap(models, groups(all.filter((a) => a.kind === 'model'), 'No models published yet: strata push FILE --name N --version V.'));
      swap(datasets, groups(all.filter((a) => a.kind === 'dataset'), 'No datasets published yet: strata push FILE --kind dataset.'));
      swap(code, groups(all.filter((a) => a.kind === 'code'), 'No code published yet: strata push DIR --kind code (a training job\'s code: TrainingJob code:).'));
      el.dataset.loaded = '1';
    } catch (e) {
      swap(models, failure(e, 'GET /v1/artifacts'));
    }
  }

  let active = false;
  async function xfers() {
    try {
      const ts = await get('/v1/transfers');
      active = ts.some((t) => t.state !== 'done' && t.state !== 'failed');
      swap(transfers, ts.length ? transferTable(ts) : empty('No transfers here yet.'));
    } catch (e) {
      swap(transfers, failure(e, 'GET /v1/transfers'));
    }
  }

  const stopA = poll(artifacts, 10000);
  // Fast while bytes are moving, slow otherwise.
  let timer = 0, stopped = false;
  const tick = async () => {
    if (stopped) return;
    if (!document.hidden) await xfers();
    timer = setTimeout(tick, active ? 1000 : 5000);
  };
  tick();
  return () => { stopA(); stopped = true; clearTimeout(timer); };
}

function groups(list, none) {
  if (!list.length) return empty(none);
  const by = new Map();
  for (const a of list) {
    if (!by.has(a.name)) by.set(a.name, []);
    by.get(a.name).push(a);
  }
  return [...by.entries()].sort((a, b) => a[0].localeCompare(b[0])).map(([name, vs]) => {
    vs.sort((a, b) => new Date(b.created) - new Date(a.created));
    return h('div', { class: 'artifact' },
      h('h3', {}, name),
      table(['Version', 'Digest', 'Size', 'Created', 'Signer', 'Accuracy', 'Holders', 'Pulling'], vs.map((a) => {
        const md = a.metadata || {};
        return h('tr', {},
          h('th', { scope: 'row' }, a.version),
          h('td', { class: 'mono', title: a.digest }, short(a.digest)),
          h('td', { class: 'num' }, bytes(a.size)),
          h('td', {}, when(a.created)),
          h('td', { class: 'mono' }, a.signer || '–'),
          h('td', { class: 'num' }, md['strata.accuracy'] ? Number(md['strata.accuracy']).toFixed(3) : '–'),
          h('td', {}, (a.holders || []).length ? a.holders.map((n) => h('a', { href: `#/mesh/${encodeURIComponent(n)}`, class: 'chip' }, n)) : '–'),
          h('td', {}, (a.pulling || []).join(', ') || '–'));
      })));
  });
}

function transferTable(ts) {
  return table(['Artifact', 'State', 'Progress', 'Rate', 'Elapsed', 'Sources'], ts.map((t) => {
    const f = t.bytes_total > 0 ? Math.min(1, t.bytes_done / t.bytes_total) : 0;
    const bar = h('span', { class: 'progress', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': Math.round(f * 100), 'aria-label': `${t.ref} ${Math.round(f * 100)}%` }, h('span', { class: 'fill' }));
    bar.firstChild.style.width = `${(f * 100).toFixed(1)}%`;
    return h('tr', {},
      h('th', { scope: 'row' }, t.ref || short(t.digest)),
      h('td', {}, badge(t.state)),
      h('td', {}, bar, h('span', { class: 'small' }, `${bytes(t.bytes_done)} of ${bytes(t.bytes_total)}${t.resumed ? ` (resumed at ${bytes(t.resumed)})` : ''}`)),
      h('td', { class: 'num' }, t.rate_bytes_per_sec ? `${bytes(t.rate_bytes_per_sec)}/s` : '–'),
      h('td', { class: 'num' }, duration((t.elapsed_ns || 0) / 1e9)),
      h('td', { class: 'small' }, (t.sources || []).map((s) => `${s.id} (${bytes(s.bytes)}, ${s.chunks} chunks${s.failures ? `, ${s.failures} failures` : ''}${s.rejected ? `, ${s.rejected} rejected` : ''})`).join('; ') || '–'));
  }));
}
