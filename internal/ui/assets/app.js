// The dashboard's shell: hash routing (#/mesh, #/placements, …), the
// connection indicator, the token box, and one event stream for all pages.
import { events, get, poll, onAuthChange, setupAuth, h, failure } from './lib.js';

const pages = {
  mesh: () => import('./pages/mesh.js'),
  placements: () => import('./pages/placements.js'),
  models: () => import('./pages/models.js'),
  drift: () => import('./pages/drift.js'),
  training: () => import('./pages/training.js'),
  events: () => import('./pages/events.js'),
};

const main = document.getElementById('main');
let unmount = null;
let seq = 0;

// route reads the hash: #/page/arg… → {page, args, query}.
function route() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [p, q] = raw.split('?');
  const parts = p.split('/').filter(Boolean).map(decodeURIComponent);
  const page = pages[parts[0]] ? parts[0] : 'mesh';
  return { page, args: parts.slice(1), query: new URLSearchParams(q || '') };
}

async function show() {
  const r = route();
  const my = ++seq;
  for (const a of document.querySelectorAll('nav a[data-page]')) {
    if (a.dataset.page === r.page) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  let mod;
  try {
    mod = await pages[r.page]();
  } catch (e) {
    main.replaceChildren(failure(e, 'loading the page'));
    return;
  }
  if (my !== seq) return;
  // The same page with other arguments (a node picked on the mesh) updates
  // in place when the page can.
  if (unmount && unmount.page === r.page && unmount.update) {
    unmount.update(r);
    return;
  }
  if (unmount) unmount();
  unmount = null;
  document.title = `${mod.title} · strata`;
  const el = h('div', { class: `page page-${r.page}` });
  main.replaceChildren(el);
  const handle = mod.mount(el, r) || (() => {});
  handle.page = r.page;
  unmount = handle;
}

window.addEventListener('hashchange', () => {
  const prev = unmount && unmount.page;
  show().then(() => {
    if (prev !== route().page) main.focus({ preventScroll: true });
  });
});

setupAuth();
onAuthChange(() => {
  events.restart();
  if (unmount) unmount();
  unmount = null;
  show();
  whoami();
});

const live = document.getElementById('live');
events.onState((st) => {
  live.dataset.state = st;
  live.textContent = st === 'live' ? 'live' : st;
  live.title = st === 'live' ? 'following /v1/events' : `event stream: ${st}`;
});

async function whoami() {
  try {
    const hl = await get('/v1/health');
    document.getElementById('agent').textContent = `${hl.node} · ${hl.alive_members} alive`;
  } catch { /* the pages say what is wrong */ }
}

poll(whoami, 30000);
events.connect();
show();
