// Placements: every policy with its state per replica, owner, epoch,
// fallbacks, the rejected counts by reason and the rollout stage; and a plan
// box that explains where pasted YAML would go (POST /v1/plan).
import { h, swap, get, post, poll, onEvents, badge, doneBadge, failure, empty, section, table, bytes, millicores, ago, when, APIError } from '../lib.js';

export const title = 'Placements';

const STAGES = ['retraining', 'canary', 'promoted'];

export function mount(el) {
  const list = h('div', { class: 'policies', 'aria-live': 'polite' });
  const summary = h('p', { class: 'summary' });
  const plan = planBox();
  el.append(h('h1', {}, 'Placements'), summary, list, plan.el);

  async function refresh() {
    try {
      const ps = await get('/v1/placements');
      const placed = ps.filter((p) => p.state === 'placed').length;
      swap(summary, `${ps.length} ${ps.length === 1 ? 'policy' : 'policies'}, ${placed} placed.`);
      swap(list, ps.length ? ps.map(card) : empty('No policies applied yet: strata apply -f FILE, or POST /v1/policies.'));
      el.dataset.loaded = '1';
    } catch (e) {
      swap(summary, failure(e, 'GET /v1/placements'));
    }
  }
  const stop = poll(refresh, 30000);
  const off = onEvents(['placement.', 'rollout.', 'job.'], () => stop.now());
  const offPlan = plan.start();
  return () => { stop(); off(); offPlan(); };
}

function card(p) {
  const r = p.resources || {};
  const res = [r.cpu ? `${millicores(r.cpu)} CPU` : null, r.memory ? bytes(r.memory) : null,
    r.gpus ? `${r.gpus} GPU` : null].filter(Boolean).join(', ');
  const nodes = p.nodes || [];
  const refused = p.refused || {};
  return h('article', { class: 'card policy', 'data-policy': p.policy },
    h('div', { class: 'policy-head' }, h('h2', {}, p.policy), doneBadge(p.state, p.message)),
    p.message ? h('p', { class: 'small' }, p.message) : null,
    h('dl', { class: 'kv' },
      h('dt', {}, 'owner'), h('dd', {}, p.owner || '–'),
      h('dt', {}, 'epoch'), h('dd', {}, `${p.epoch ?? '–'} (generation ${p.generation ?? '–'})`),
      h('dt', {}, 'replicas'), h('dd', {}, `${nodes.filter((n) => n.admitted).length} admitted of ${p.wanted ?? nodes.length} wanted`),
      p.scale && p.scale.from !== p.scale.replicas ? [h('dt', {}, 'autoscaled'),
        h('dd', {}, `${p.scale.from} → ${p.scale.replicas} ${ago(p.scale.at)}: ${p.scale.reason || ''}`)] : null,
      res ? [h('dt', {}, 'each'), h('dd', {}, res)] : null,
      p.updated ? [h('dt', {}, 'updated'), h('dd', {}, `${when(p.updated)} (${ago(p.updated)})`)] : null),
    nodes.length ? nodeTable(nodes) : null,
    Object.keys(refused).length ? [h('h3', {}, 'Refused earlier'), h('ul', { class: 'small' }, Object.entries(refused).map(([n, why]) => h('li', {}, `${n}: ${why}`)))] : null,
    (p.fallbacks || []).length ? [h('h3', {}, 'Fallbacks'), h('ul', { class: 'small fallbacks' }, p.fallbacks.map(fallback))] : null,
    rejected(p.rejected),
    p.rollout ? rollout(p.rollout) : null);
}

// nodeTable lists a placement's nodes: where, admitted, what the node
// says of its replica (loading, serving, failed), whether it is a burst
// replica, and its standby where the service prestages (warm when it has
// the model loaded).
function nodeTable(nodes) {
  const standbys = nodes.some((n) => n.standby);
  const cols = ['Node', 'Tier', 'Site', 'Rank', 'State'];
  if (standbys) cols.push('Standby');
  return table(cols, nodes.map((n) => h('tr', {},
    h('td', {}, h('a', { href: `#/mesh/${encodeURIComponent(n.name)}` }, n.name)),
    h('td', {}, n.burst ? [n.tier, ' ', badge('burst', 'burst', 'overflow: the service\'s own tiers had no room within the SLO')] : n.tier),
    h('td', {}, n.site), h('td', { class: 'num' }, String(n.rank ?? 0)),
    h('td', {}, n.admitted ? badge('admitted') : badge('pending', 'not admitted yet'), n.replica ? [' ', badge(n.replica, n.replica, n.reason || '')] : null),
    standbys ? h('td', {}, n.standby || '–', n.standby_warm ? [' ', badge('warm', 'warm', 'the standby has the model loaded: it answers at once when the replica does not')] : null) : null)));
}

// fallback says why a tier was passed over: the tier, the main reason,
// then the message, which begins with the tier's name too ("edge: 0 of 2
// nodes feasible…"): it is shown once.
function fallback(f) {
  const tier = f.tier || '';
  let msg = f.message || '';
  if (tier && msg.startsWith(`${tier}: `)) msg = msg.slice(tier.length + 2);
  return h('li', {}, h('strong', {}, tier), f.reason ? ` (${f.reason})` : '', msg ? `: ${msg}` : '');
}

function rejected(counts) {
  const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
  if (!entries.length) return null;
  const max = Math.max(...entries.map((e) => e[1]));
  return [h('h3', {}, 'Why not the other nodes'),
    h('ul', { class: 'bars', 'aria-label': 'nodes rejected, by first reason' }, entries.map(([reason, n]) => {
      const bar = h('span', { class: 'bar' });
      bar.style.width = `${(100 * n) / max}%`;
      return h('li', {}, h('span', { class: 'mono' }, reason), h('span', {}, bar), h('span', { class: 'num' }, String(n)));
    }))];
}

function rollout(ro) {
  const steps = ro.steps || [];
  const reached = new Set(steps.map((s) => s.stage));
  const stages = [...STAGES];
  if (ro.stage && !stages.includes(ro.stage)) stages[2] = ro.stage; // rolled-back or failed ends it
  return [h('h3', {}, `Rollout ${ro.model || ''} ${ro.from || '?'} → ${ro.to || '…'}`),
    h('ol', { class: 'stages', 'aria-label': 'rollout stages' }, stages.map((st) => h('li', {
      class: `${reached.has(st) ? 'done' : ''} ${st === ro.stage ? `current st-${st}` : ''}`,
      'aria-current': st === ro.stage ? 'step' : null }, st))),
    h('dl', { class: 'kv' },
      ro.trigger ? [h('dt', {}, 'trigger'), h('dd', {}, `drift at ${ro.trigger.site}/${ro.trigger.node} on ${ro.trigger.feature} (${ro.trigger.detector}, ${ro.trigger.samples} samples)`)] : null,
      ro.job ? [h('dt', {}, 'job'), h('dd', {}, h('a', { href: `#/training/${encodeURIComponent(ro.job)}` }, ro.job))] : null,
      (ro.canary_nodes || []).length ? [h('dt', {}, 'canary'), h('dd', {}, `${ro.canary_nodes.join(', ')}: ${ro.served || 0} served, ${ro.failed || 0} failed of ${ro.canary_requests || '?'}`)] : null,
      ro.message ? [h('dt', {}, 'now'), h('dd', {}, ro.message)] : null),
    steps.length ? h('ol', { class: 'steps' }, steps.map((s) => h('li', {}, h('span', { class: 'mono' }, when(s.time)), ' ', badge(s.stage), ' ', s.message))) : null];
}

function planBox() {
  const text = h('textarea', { id: 'plan-yaml', name: 'yaml', spellcheck: 'false', placeholder: 'apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: …}\nspec: …' });
  const why = h('select', { id: 'plan-why', name: 'why' }, h('option', { value: '' }, '(no node)'));
  const from = h('select', { id: 'plan-from', 'aria-label': 'start from an applied policy' }, h('option', { value: '' }, 'start from an applied policy…'));
  const out = h('div', { id: 'plan-out', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'primary', id: 'plan-run' }, 'Plan');
  const form = h('form', {},
    h('label', { for: 'plan-yaml' }, 'Policy YAML (one or more documents)'),
    text,
    h('div', { class: 'row' },
      h('label', { for: 'plan-why' }, 'Why (not) node'), why, from, button));
  let sources = [];
  from.addEventListener('change', () => {
    const p = sources[Number(from.value)];
    if (p) text.value = p.source;
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!text.value.trim()) { swap(out, failure('paste one or more policy documents first')); return; }
    button.disabled = true;
    swap(out, h('p', { class: 'muted' }, 'Planning…'));
    try {
      const q = why.value ? `?why=${encodeURIComponent(why.value)}` : '';
      const res = await post(`/v1/plan${q}`, text.value);
      swap(out, (Array.isArray(res) ? res : [res]).map((d) => h('div', { class: 'plan-doc' },
        h('h3', {}, d.policy || 'policy', ' ', d.decision ? badge(d.decision.feasible ? 'placed' : 'failed', d.decision.feasible ? 'feasible' : 'not feasible') : null),
        h('pre', { class: 'out plan-explanation' }, d.explanation || ''),
        d.why ? h('pre', { class: 'out plan-why' }, d.why) : null)));
    } catch (err) {
      const errs = err instanceof APIError && err.body && err.body.errors;
      swap(out, failure(err, 'POST /v1/plan'),
        errs ? h('ul', { class: 'small plan-errors' }, errs.map((x) => h('li', {}, `${x.file || 'input'}:${x.line}:${x.column}: ${x.field ? x.field + ': ' : ''}${x.message}`))) : null);
    } finally {
      button.disabled = false;
    }
  });
  const el = section('Plan (dry run)', h('div', { class: 'plan' },
    h('p', { class: 'muted small' }, 'Paste policy YAML to see where it would be placed and why, without applying it.'), form, out));
  return {
    el,
    start() {
      let live = true;
      Promise.all([get('/v1/nodes').catch(() => []), get('/v1/policies').catch(() => [])]).then(([nodes, pols]) => {
        if (!live) return;
        for (const n of [...nodes].sort((a, b) => a.name.localeCompare(b.name))) why.append(h('option', { value: n.name }, n.name));
        sources = pols.filter((p) => p.source);
        sources.forEach((p, i) => from.append(h('option', { value: String(i) }, `${p.kind}/${p.name}`)));
      });
      return () => { live = false; };
    },
  };
}
