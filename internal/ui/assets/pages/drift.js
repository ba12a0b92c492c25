// Drift: per model and site, the score history against the threshold, the
// alarms, and the rollout stages on the same time axis; the latest score per
// feature below.
import { h, s, swap, get, poll, onEvents, events, badge, failure, empty, section, when } from '../lib.js';

export const title = 'Drift';

// pValue says whether the detector's score is a p-value (drift when it
// falls below the threshold) rather than a distance (drift above it).
const pValue = (d) => !d.detector || d.detector === 'ks';

// alarmAt says which side of the threshold alarms: a p-value at or below
// it, a distance at or above it. A bare "threshold 0.001" beside a p-value
// of 0.99 reads like an alarm.
const alarmAt = (d) => pValue(d) ? `alarm below p = ${d.threshold}` : `alarm above ${d.threshold}`;

// score formats a feature's score, naming a p-value as one.
const score = (d, v) => pValue(d) ? `p = ${fmt(v)}` : fmt(v);

export function mount(el) {
  const body = h('div', { 'aria-live': 'polite' });
  el.append(h('h1', {}, 'Drift'),
    h('p', { class: 'summary' }, 'Each chart is one serving node’s monitor: the worst feature’s score per evaluation, the alarm threshold (dashed), alarms (red) and the rollout stages (dotted) on one time axis.'),
    body);

  async function refresh() {
    try {
      const [drift, placements] = await Promise.all([get('/v1/drift'), get('/v1/placements').catch(() => [])]);
      const rollouts = new Map(placements.filter((p) => p.rollout).map((p) => [p.policy, p.rollout]));
      if (!drift.length) {
        swap(body, empty('No drift monitors yet: they start where a policy with drift: serves its model.'));
        el.dataset.loaded = '1';
        return;
      }
      const byModel = new Map();
      for (const d of drift) {
        const k = `${d.model}`;
        if (!byModel.has(k)) byModel.set(k, []);
        byModel.get(k).push(d);
      }
      swap(body, [...byModel.entries()].map(([model, ds]) => section(`${model}`,
        ds.sort((a, b) => a.site.localeCompare(b.site) || a.node.localeCompare(b.node)).map((d) => monitor(d, rollouts.get(d.policy))))));
      el.dataset.loaded = '1';
    } catch (e) {
      swap(body, failure(e, 'GET /v1/drift'));
    }
  }
  const stop = poll(refresh, 15000);
  const off = onEvents(['drift.', 'rollout.'], () => stop.now(), 400);
  return () => { stop(); off(); };
}

function monitor(d, ro) {
  const alarms = events.list.filter((e) => e.type === 'drift.alarm' && e.policy === d.policy && e.node === d.node).map((e) => ({ time: e.time, label: 'alarm' }));
  if (d.alarm_at && !alarms.some((a) => Math.abs(new Date(a.time) - new Date(d.alarm_at)) < 1000)) alarms.push({ time: d.alarm_at, label: 'alarm' });
  return h('div', { class: 'card monitor', 'data-node': d.node },
    h('div', { class: 'policy-head' },
      h('h3', {}, `${d.model}@${d.version} at ${d.site}/${d.node}`),
      stateBadge(d)),
    h('p', { class: 'small muted settings' }, `${d.detector} over ${d.window} samples, ${alarmAt(d)}, reference ${d.reference}${d.ready ? '' : ' (collecting)'}; ${d.seen} samples seen, ${d.served} served, ${d.failed} failed${d.dropped ? `, ${d.dropped} dropped` : ''}${d.invalid ? `, ${d.invalid} invalid (NaN or infinite) dropped` : ''}`),
    d.error ? h('p', { class: 'error' }, d.error) : null,
    chart(d, alarms, ro),
    (d.scores || []).length ? [h('h3', {}, `Latest ${pValue(d) ? 'p-value' : 'score'} per feature (${alarmAt(d)})`),
      h('ul', { class: 'features' }, d.scores.map((sc) => {
        const v = pValue(d) ? sc.p_value : sc.statistic;
        return h('li', { class: sc.drifted ? 'drifted' : '' }, h('span', {}, sc.name), h('span', { class: 'num mono' }, score(d, v)));
      }))] : null);
}

// stateBadge shows the monitor's state: a fresh monitor is warming up (no
// alarm does not yet mean no drift) until it has rows enough to judge.
// Agents before the state field send none: error, alarm, else clear.
function stateBadge(d) {
  const st = d.state || (d.error ? 'error' : d.alarmed ? 'alarm' : 'ok');
  const text = { error: 'error', alarm: 'drifting', warming: 'warming up', ok: 'clear' }[st] || st;
  const title = st === 'warming' ? 'Not yet enough rows to judge: no alarm does not mean no drift yet.' : undefined;
  return badge(st === 'ok' ? 'clear' : st, text, title);
}

function fmt(v) {
  if (v == null || !isFinite(v)) return '–';
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e4)) return v.toExponential(1);
  return v.toFixed(3);
}

function chart(d, alarms, ro) {
  const hist = d.history || [];
  const steps = (ro && ro.steps) || [];
  const W = 760, H = 220, L = 56, R = 14, T = 26, B = 28;
  const times = [...hist.map((p) => +new Date(p.time)), ...alarms.map((a) => +new Date(a.time)), ...steps.map((st) => +new Date(st.time))].filter(isFinite);
  if (!times.length) return h('p', { class: 'muted small' }, 'No evaluation yet.');
  let t0 = Math.min(...times), t1 = Math.max(...times, +new Date(d.updated) || 0);
  if (t1 - t0 < 1000) { t0 -= 500; t1 += 500; }
  const pad = (t1 - t0) * 0.03;
  t0 -= pad; t1 += pad;
  const x = (t) => L + ((+new Date(t) - t0) / (t1 - t0)) * (W - L - R);
  const log = pValue(d);
  let y, ticks;
  if (log) {
    const vals = hist.map((p) => Math.log10(Math.max(p.statistic, 1e-300)));
    const lo = Math.floor(Math.min(...vals, Math.log10(d.threshold || 1e-3)) - 0.5);
    y = (v) => T + (Math.log10(Math.max(v, 1e-300)) / lo) * (H - T - B);
    const step = Math.max(1, Math.ceil(-lo / 5));
    ticks = [];
    for (let e = 0; e >= lo; e -= step) ticks.push([Math.pow(10, e), e === 0 ? '1' : `1e${e}`]);
  } else {
    const hi = Math.max(...hist.map((p) => p.statistic), (d.threshold || 0) * 1.5, 1e-9) * 1.1;
    y = (v) => T + (1 - v / hi) * (H - T - B);
    ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => [f * hi, fmt(f * hi)]);
  }
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img',
    'aria-label': `${d.detector} score history of ${d.model} at ${d.node}: ${hist.length} evaluations, ${hist.filter((p) => p.drifted).length} past the alarm threshold, ${alarms.length} alarms` });
  const axis = s('g', { class: 'axis' });
  for (const [v, label] of ticks) {
    axis.append(s('line', { x1: L, x2: W - R, y1: y(v), y2: y(v) }), s('text', { x: L - 6, y: y(v) + 3.5, 'text-anchor': 'end' }, label));
  }
  const nt = 5;
  for (let i = 0; i <= nt; i++) {
    const t = t0 + ((t1 - t0) * i) / nt;
    axis.append(s('text', { x: x(t), y: H - 8, 'text-anchor': i === 0 ? 'start' : i === nt ? 'end' : 'middle' }, when(t)));
  }
  axis.append(s('text', { x: L, y: 12 }, log ? `${d.detector} p-value, log scale` : `${d.detector} score`));
  svg.append(axis);
  steps.forEach((st, i) => {
    const xx = x(st.time);
    svg.append(s('line', { class: 'stage-mark', x1: xx, x2: xx, y1: T - 4, y2: H - B }),
      s('text', { class: 'mark', x: xx + 3, y: T + 8 + (i % 3) * 12 }, st.stage, s('title', {}, `${when(st.time)} ${st.stage}: ${st.message}`)));
  });
  for (const a of alarms) {
    const xx = x(a.time);
    svg.append(s('line', { class: 'alarm-mark', x1: xx, x2: xx, y1: T - 4, y2: H - B }),
      s('text', { class: 'mark alarm-label', x: xx - 3, y: H - B - 6, 'text-anchor': 'end' }, 'alarm', s('title', {}, `alarm at ${when(a.time)}`)));
  }
  if (d.threshold) {
    const ty = y(d.threshold);
    svg.append(s('line', { class: 'threshold', x1: L, x2: W - R, y1: ty, y2: ty }),
      s('text', { class: 'mark threshold-label', x: W - R - 4, y: ty - 4, 'text-anchor': 'end' }, alarmAt(d)));
  }
  if (hist.length) {
    svg.append(s('polyline', { class: 'series', points: hist.map((p) => `${x(p.time).toFixed(1)},${y(p.statistic).toFixed(1)}`).join(' ') }));
    for (const p of hist) {
      svg.append(s('circle', { class: `pt${p.drifted ? ' drifted' : ''}`, cx: x(p.time), cy: y(p.statistic), r: p.drifted ? 4 : 2.5 },
        s('title', {}, `${when(p.time)} after ${p.seen} samples: ${p.feature} ${score(d, p.statistic)}${p.drifted ? ' (drifted)' : ` (${alarmAt(d)})`}`)));
    }
  }
  return svg;
}
