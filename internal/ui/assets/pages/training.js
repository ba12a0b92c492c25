// Training: jobs with their per-rank state and each rank's output.
import { h, swap, get, poll, onEvents, badge, failure, empty, section, table, when, duration } from '../lib.js';

export const title = 'Training';

export function mount(el, route) {
  const list = h('div', { 'aria-live': 'polite' });
  const logs = h('div', { id: 'logs' });
  let open = route.args[0] ? { job: route.args[0], rank: Number(route.query.get('rank') || 0) } : null;
  el.append(h('h1', {}, 'Training'), list, logs);

  async function refresh() {
    try {
      const jobs = await get('/v1/jobs');
      swap(list, jobs.length ? jobs.map(card) : empty('No training jobs yet: apply a TrainingJob, or a service with retrain: that drifts.'));
      el.dataset.loaded = '1';
    } catch (e) {
      swap(list, failure(e, 'GET /v1/jobs'));
    }
  }

  async function showLogs() {
    if (!open) { swap(logs); return; }
    const { job, rank } = open;
    swap(logs, section(`Output of ${job}, rank ${rank}`, h('p', { class: 'muted' }, 'Loading…')));
    try {
      const text = await get(`/v1/jobs/${encodeURIComponent(job)}/logs?rank=${rank}`);
      swap(logs, section(`Output of ${job}, rank ${rank}`,
        h('pre', { class: 'out job-logs', tabindex: '0' }, typeof text === 'string' ? text || '(no output)' : JSON.stringify(text, null, 2))));
    } catch (e) {
      swap(logs, section(`Output of ${job}, rank ${rank}`, failure(e, 'GET logs')));
    }
  }

  const stop = poll(refresh, 15000);
  const off = onEvents(['job.'], () => { stop.now(); if (open) showLogs(); });
  showLogs();
  const handle = () => { stop(); off(); };
  handle.update = (r) => {
    open = r.args[0] ? { job: r.args[0], rank: Number(r.query.get('rank') || 0) } : null;
    showLogs().then(() => { const pre = logs.querySelector('pre'); if (pre) pre.focus(); });
  };
  return handle;
}

function card(j) {
  const took = j.started && j.finished ? (new Date(j.finished) - new Date(j.started)) / 1000 : null;
  const members = j.members && j.members.length ? j.members : (j.nodes || []).map((n, i) => ({ rank: i, node: n, state: j.state }));
  return h('article', { class: 'card job', 'data-job': j.name },
    h('div', { class: 'policy-head' }, h('h2', {}, j.name), badge(j.state)),
    h('dl', { class: 'kv' },
      h('dt', {}, 'launcher'), h('dd', {}, j.launcher || '–'),
      h('dt', {}, 'policy'), h('dd', {}, `${j.key || '–'} (generation ${j.generation ?? '–'}, epoch ${j.epoch ?? '–'}${j.attempt ? `, attempt ${j.attempt}` : ''})`),
      j.retrain_of ? [h('dt', {}, 'retrains'), h('dd', {}, j.retrain_of)] : null,
      j.version ? [h('dt', {}, 'registered'), h('dd', {}, `${j.model}@${j.version}${j.accuracy ? `, accuracy ${j.accuracy.toFixed(3)}` : ''}`)] : null,
      j.data && j.data.length ? [h('dt', {}, 'data'), h('dd', { class: 'job-data' }, j.data.map((d) => h('span', { class: 'chip', title: d.digest }, `${d.name}@${d.version}`)))] : null,
      j.code ? [h('dt', {}, 'code'), h('dd', { class: 'job-code', title: j.code.digest }, `${j.code.name}@${j.code.version}`)] : null,
      j.metrics ? [h('dt', {}, 'metrics'), h('dd', { class: 'job-metrics mono' }, Object.keys(j.metrics).sort().map((k) => `${k}=${num(j.metrics[k])}`).join(' '))] : null,
      j.steps && j.steps.length ? [h('dt', {}, 'steps'), h('dd', { class: 'job-steps' }, progress(j.steps))] : null,
      h('dt', {}, 'times'), h('dd', {}, `created ${when(j.created)}, started ${when(j.started)}, finished ${when(j.finished)}${took != null ? ` (${duration(took)})` : ''}`),
      j.error ? [h('dt', {}, 'error'), h('dd', { class: 'error' }, j.error)] : null),
    table(['Rank', 'Node', 'State', 'Exit', 'Output'], members.map((m) => h('tr', {},
      h('td', { class: 'num' }, String(m.rank)),
      h('td', {}, h('a', { href: `#/mesh/${encodeURIComponent(m.node)}` }, m.node)),
      h('td', {}, badge(m.state)),
      h('td', { class: 'num' }, m.exit_code != null ? String(m.exit_code) : '–'),
      h('td', {}, h('a', { class: 'button', href: `#/training/${encodeURIComponent(j.name)}?rank=${m.rank}` }, 'Logs'))))));
}

// num prints a metric: integers as they are, others to 4 significant digits.
function num(v) {
  return Number.isInteger(v) ? String(v) : Number(v.toPrecision(4)).toString();
}

// progress sums up the steps a job reported: how many, and each metric's
// first and last value.
function progress(steps) {
  const first = steps[0].metrics || {}, last = steps[steps.length - 1].metrics || {};
  const names = Object.keys(last).sort();
  return `${steps.length} reported` + (names.length ? `: ${names.map((k) => `${k} ${k in first ? `${num(first[k])} → ` : ''}${num(last[k])}`).join(', ')}` : '');
}
