// Code shared by the dashboard's pages: DOM and SVG builders, the API client
// (same origin, bearer token from sessionStorage), the event stream, polling
// that pauses while the tab is hidden, and formatting.

const SVGNS = 'http://www.w3.org/2000/svg';

function build(el, attrs, kids) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of kids.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h builds an HTML element: h('a', {href: '#/x'}, 'text', child, [more]).
export function h(tag, attrs, ...kids) {
  return build(document.createElement(tag), attrs, kids);
}

// s builds an SVG element.
export function s(tag, attrs, ...kids) {
  return build(document.createElementNS(SVGNS, tag), attrs, kids);
}

// swap replaces el's children, keeping the focus on the element with the
// same data-key when there was one inside.
export function swap(el, ...kids) {
  const active = document.activeElement;
  const key = active && el.contains(active) ? active.getAttribute('data-key') : null;
  el.replaceChildren(...kids.flat(Infinity).filter((k) => k != null && k !== false));
  if (key) {
    const again = el.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus({ preventScroll: true });
  }
}

// ---- access ------------------------------------------------------------

const TOKEN_KEY = 'strata-token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

function headers(extra) {
  const hd = Object.assign({ Accept: 'application/json' }, extra || {});
  const t = token();
  if (t) hd.Authorization = 'Bearer ' + t;
  return hd;
}

const authListeners = new Set();

// onAuthChange calls fn after a token was entered.
export function onAuthChange(fn) {
  authListeners.add(fn);
  return () => authListeners.delete(fn);
}

// needToken shows the token box; msg says why.
export function needToken(msg) {
  const box = document.getElementById('auth');
  if (!box) return;
  document.getElementById('auth-msg').textContent = msg || '';
  if (box.hidden) {
    box.hidden = false;
    document.getElementById('auth-token').focus();
  }
}

export function setupAuth() {
  const form = document.getElementById('auth-form');
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = document.getElementById('auth-token').value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    else sessionStorage.removeItem(TOKEN_KEY);
    document.getElementById('auth').hidden = true;
    for (const fn of authListeners) fn();
  });
}

// APIError is an error answer of the API, with its JSON body.
export class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function answer(res) {
  const text = await res.text();
  let body = text;
  if ((res.headers.get('Content-Type') || '').includes('json')) {
    try { body = JSON.parse(text); } catch { /* keep the text */ }
  }
  if (res.status === 401 || res.status === 403) {
    needToken((body && body.error) || `HTTP ${res.status}`);
  }
  if (!res.ok) throw new APIError(res.status, typeof body === 'object' ? body : { error: text || `HTTP ${res.status}` });
  return body;
}

// get fetches an API path and returns its JSON (or text).
export async function get(path, opts) {
  return answer(await fetch(path, { headers: headers(), signal: opts && opts.signal }));
}

// post sends body (text) to an API path.
export async function post(path, body, type) {
  return answer(await fetch(path, { method: 'POST', body, headers: headers({ 'Content-Type': type || 'application/yaml' }) }));
}

// ---- polling -----------------------------------------------------------

// poll runs fn now and every ms while the page is visible; the returned
// function stops it, and its now() runs it at once. A run never overlaps
// the previous one.
export function poll(fn, ms) {
  let timer = 0, stopped = false, running = false, again = false;
  const run = async () => {
    clearTimeout(timer);
    if (stopped || document.hidden) return;
    // A call while one runs (an event arrived) runs once more after it, so
    // that the answer is not older than the event.
    if (running) { again = true; return; }
    running = true;
    do {
      again = false;
      try { await fn(); } catch (e) { /* the page shows its own errors */ }
    } while (again && !stopped);
    running = false;
    if (!stopped && !document.hidden) timer = setTimeout(run, ms);
  };
  const vis = () => { if (!document.hidden) run(); };
  document.addEventListener('visibilitychange', vis);
  run();
  const stop = () => { stopped = true; clearTimeout(timer); document.removeEventListener('visibilitychange', vis); };
  stop.now = run;
  return stop;
}

// debounce calls fn at most once per ms, after the last call.
export function debounce(fn, ms) {
  let t = 0;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}

// ---- events ------------------------------------------------------------

// The event stream is read with fetch rather than EventSource so that it
// can carry the Authorization header; the protocol is the same
// (text/event-stream, resumed after the last sequence number seen).
const KEEP = 2000;
export const events = {
  list: [],
  lastSeq: 0,
  state: 'connecting',
  listeners: new Set(),
  stateListeners: new Set(),
  ctrl: null,
  retry: 1000,
  on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); },
  onState(fn) { this.stateListeners.add(fn); fn(this.state); return () => this.stateListeners.delete(fn); },
  setState(st) { this.state = st; for (const fn of this.stateListeners) fn(st); },
  push(ev) {
    if (ev.seq && ev.seq <= this.lastSeq) return;
    if (ev.seq) this.lastSeq = ev.seq;
    // A repeat (same type, subject and message) comes again with a new
    // seq and a higher count: it replaces the copy shown before.
    if (ev.replaces) {
      const i = this.list.findIndex((e) => e.seq === ev.replaces);
      if (i >= 0) this.list.splice(i, 1);
    }
    this.list.push(ev);
    if (this.list.length > KEEP) this.list.splice(0, this.list.length - KEEP);
    for (const fn of this.listeners) fn(ev);
  },
  restart() { if (this.ctrl) this.ctrl.abort(); this.connect(); },
  async connect() {
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    this.setState('connecting');
    try {
      const res = await fetch(`/v1/events?since=${this.lastSeq}`, { headers: headers({ Accept: 'text/event-stream' }), signal: ctrl.signal });
      if (res.status === 401 || res.status === 403) {
        await answer(res).catch(() => {});
        this.setState('needs token');
        return; // onAuthChange restarts it
      }
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      this.setState('live');
      this.retry = 1000;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('data:')) data += (data ? '\n' : '') + line.slice(5).replace(/^ /, '');
          }
          if (!data) continue;
          try { this.push(JSON.parse(data)); } catch { /* not an event */ }
        }
      }
    } catch (e) {
      if (ctrl.signal.aborted) return;
    }
    if (ctrl.signal.aborted || this.ctrl !== ctrl) return;
    this.setState('reconnecting');
    setTimeout(() => { if (this.ctrl === ctrl) this.connect(); }, this.retry);
    this.retry = Math.min(this.retry * 2, 15000);
  },
};

// onEvents calls fn (debounced) when an event whose type starts with one of
// prefixes arrives.
export function onEvents(prefixes, fn, ms = 250) {
  const d = debounce(fn, ms);
  return events.on((ev) => { if (prefixes.some((p) => (ev.type || '').startsWith(p))) d(ev); });
}

// ---- formatting ----------------------------------------------------------

export function bytes(n) {
  if (n == null) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n >= 100 ? 0 : 1)) + ' ' + u[i];
}

export function millicores(m) {
  if (m == null) return '–';
  return m % 1000 === 0 ? String(m / 1000) : (m / 1000).toFixed(2);
}

export function ms(x) {
  if (x == null || !isFinite(x)) return '–';
  return x < 10 ? x.toFixed(1) + ' ms' : Math.round(x) + ' ms';
}

export function duration(sec) {
  if (sec == null || !isFinite(sec)) return '–';
  if (sec < 1) return Math.round(sec * 1000) + ' ms';
  if (sec < 60) return sec.toFixed(sec < 10 ? 1 : 0) + ' s';
  if (sec < 3600) return Math.floor(sec / 60) + ' min ' + Math.round(sec % 60) + ' s';
  return Math.floor(sec / 3600) + ' h ' + Math.round((sec % 3600) / 60) + ' min';
}

export function when(t) {
  if (!t) return '–';
  const d = new Date(t);
  if (isNaN(d) || d.getFullYear() < 2000) return '–';
  return d.toLocaleTimeString([], { hour12: false });
}

export function ago(t) {
  if (!t) return '–';
  const sec = (Date.now() - new Date(t).getTime()) / 1000;
  if (!isFinite(sec)) return '–';
  if (sec < 5) return 'just now';
  return duration(sec) + ' ago';
}

export function short(digest, n = 12) {
  if (!digest) return '–';
  return String(digest).replace(/^sha256:/, '').slice(0, n);
}

// badge is a small label whose class carries the state (CSS colours it);
// title, if given, says more on hover.
export function badge(state, text, title) {
  return h('span', { class: `badge st-${String(state || 'unknown').replace(/[^a-z0-9-]/gi, '-')}`, title }, text || state || 'unknown');
}

// jobFailed says whether a placement's message, or that of its
// placement.done event, tells that the training job it placed failed: a
// job's placement is done whatever the job's outcome, and the controller
// says which ("job failed on NODE; its nodes are released").
export function jobFailed(message) {
  return /(^|: )job failed\b/.test(message || '');
}

// doneBadge is the badge of a placement state: done, but coloured as a
// failure where the job failed.
export function doneBadge(state, message) {
  return state === 'done' && jobFailed(message) ? badge('failed', state, 'the job failed') : badge(state);
}

// json renders a value as indented JSON text.
export function json(v) {
  return h('pre', { class: 'json' }, JSON.stringify(v, null, 2));
}

// failure renders an error in place of a section.
export function failure(e, what) {
  return h('p', { class: 'error', role: 'alert' }, `${what ? what + ': ' : ''}${e && e.message ? e.message : e}`);
}

export function empty(text) {
  return h('p', { class: 'muted empty' }, text);
}

// section is a titled block.
export function section(title, ...kids) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...kids);
}

export function table(head, rows, opts = {}) {
  return h('div', { class: 'tablewrap' },
    h('table', { class: opts.class || '' },
      opts.caption ? h('caption', {}, opts.caption) : null,
      h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows)));
}

// reducedMotion is true when the person asked for less motion.
export const reducedMotion = matchMedia('(prefers-reduced-motion: reduce)').matches;
