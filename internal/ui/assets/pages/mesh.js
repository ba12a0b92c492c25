// Mesh: the sites on a map laid out by Vivaldi coordinates (screen distance
// follows the estimated RTT), every site this agent knows with its
// reachability (its own pool's, and other sites' through federation),
// every node's status, GPUs, fabric and load, a node's document on click,
// and the RTT matrix as a heat map.
import { h, s, swap, get, poll, bytes, millicores, ms, badge, json, failure, empty, section, table, ago } from '../lib.js';
import { matrix, layout } from '../rtt.js';

export const title = 'Mesh';

const TIERS = ['edge', 'onprem', 'cloud'];
const tierRank = (t) => { const i = TIERS.indexOf(t); return i < 0 ? TIERS.length : i; };

function order(nodes) {
  return [...nodes].sort((a, b) => tierRank(a.tier) - tierRank(b.tier) || a.site.localeCompare(b.site) || a.name.localeCompare(b.name));
}

export function mount(el, route) {
  let nodes = [];
  let sites = null; // GET /v1/sites; null until it answers
  let sitesErr = null;
  let selected = route.args[0] || '';
  let prevPos = new Map();
  let err = null;

  const summary = h('p', { class: 'summary', 'aria-live': 'polite' });
  const map = h('div', { class: 'map' });
  const detail = h('aside', { class: 'detail', 'aria-label': 'Node document', tabindex: '-1' });
  const list = h('div');
  const siteList = h('div');
  const heat = h('div', { class: 'heat' });
  el.append(
    h('h1', {}, 'Mesh'),
    summary,
    h('div', { class: 'grid-map' },
      section('Sites by RTT', map,
        h('p', { class: 'muted small' }, 'Distance between sites follows the RTT estimated from Vivaldi coordinates; the nodes of a site are fanned out around it.')),
      detail),
    section('Sites', siteList),
    section('Nodes', list),
    section('RTT matrix', heat));

  function render() {
    if (err) { swap(summary, failure(err, 'GET /v1/nodes')); }
    const ordered = order(nodes);
    const poolSites = new Set(ordered.map((n) => n.site));
    const alive = ordered.filter((n) => n.status === 'alive').length;
    const gpus = ordered.reduce((a, n) => a + ((n.capabilities && n.capabilities.gpus) || []).length, 0);
    const remote = (sites || []).filter((st) => st.via === 'federation');
    const cut = remote.filter((st) => st.status !== 'reachable').length;
    if (!err) {
      swap(summary, `${ordered.length} nodes (${alive} alive) in ${poolSites.size} sites, ${gpus} GPUs.` +
        (remote.length ? ` ${remote.length} other sites through federation${cut ? `, ${cut} unreachable` : ''}.` : ''));
    }
    swap(siteList, sitesErr ? failure(sitesErr, 'GET /v1/sites') : sites ? siteTable(sites) : empty('Loading the sites…'));
    swap(map, ordered.length ? drawMap(ordered) : empty('No nodes yet.'));
    swap(list, ordered.length ? nodeTable(ordered) : empty('No nodes yet.'));
    swap(heat, ordered.length > 1 ? heatMap(ordered) : empty('The matrix needs two nodes.'));
    renderDetail();
    if (!err) el.dataset.loaded = '1';
  }

  function renderDetail() {
    const n = nodes.find((x) => x.name === selected || x.id === selected);
    if (!selected) {
      swap(detail, tierSummary(order(nodes)));
      return;
    }
    swap(detail,
      h('div', { class: 'detail-head' },
        h('h2', {}, n ? n.name : selected),
        h('a', { class: 'button', href: '#/mesh', 'data-key': 'close' }, 'Close')),
      n ? h('p', { class: 'muted small' }, `${n.tier} · ${n.site} · ${n.region} · version ${n.version} · updated ${ago(n.updated)}`) : null,
      n ? json(n) : empty(`No node named ${selected}.`));
  }

  function drawMap(ordered) {
    const W = 900, H = 400, M = 70;
    // Until every node has a coordinate, the sites go on a ring.
    const known = ordered.every((n) => n.coord && n.coord.Vec);
    const withCoord = ordered;
    const d = known ? matrix(withCoord) : withCoord.map(() => new Float64Array(withCoord.length));
    const keys = withCoord.map((n) => n.name);
    const pts = layout(d, keys, known ? prevPos : null);
    if (known) prevPos = new Map(keys.map((k, i) => [k, pts[i]]));
    // Sites: centroid of their nodes' positions (ms).
    const bySite = new Map();
    withCoord.forEach((n, i) => {
      const site = bySite.get(n.site) || { name: n.site, tier: n.tier, nodes: [], x: 0, y: 0 };
      site.nodes.push(n);
      site.x += pts[i][0];
      site.y += pts[i][1];
      bySite.set(n.site, site);
    });
    const sites = [...bySite.values()];
    for (const st of sites) { st.x /= st.nodes.length; st.y /= st.nodes.length; }
    let minX = Infinity, maxX = -Infinity, minY = Infinity, maxY = -Infinity;
    for (const st of sites) {
      minX = Math.min(minX, st.x); maxX = Math.max(maxX, st.x);
      minY = Math.min(minY, st.y); maxY = Math.max(maxY, st.y);
    }
    const span = Math.max(maxX - minX, maxY - minY);
    let scale = 0; // px per ms
    if (span >= 0.5 && sites.length > 1) {
      scale = Math.min((W - 2 * M) / Math.max(maxX - minX, 1e-9), (H - 2 * M) / Math.max(maxY - minY, 1e-9));
      for (const st of sites) {
        st.sx = M + (st.x - minX) * scale + (W - 2 * M - (maxX - minX) * scale) / 2;
        st.sy = M + (st.y - minY) * scale + (H - 2 * M - (maxY - minY) * scale) / 2;
      }
    } else {
      // All sites at about the same place (no WAN): a ring, no scale.
      sites.forEach((st, i) => {
        const a = (2 * Math.PI * i) / sites.length - Math.PI / 2;
        const r = sites.length > 1 ? Math.min(W, H) / 2 - M : 0;
        st.sx = W / 2 + r * Math.cos(a);
        st.sy = H / 2 + r * Math.sin(a);
      });
    }
    const many = withCoord.length > 40;
    for (const st of sites) {
      const k = st.nodes.length;
      st.ring = k === 1 ? 0 : Math.max(14, (k * 22) / (2 * Math.PI));
      st.rad = st.ring + 16;
    }
    // Keep the bubbles and their labels apart: a few rounds of pushing
    // overlapping sites away from each other, then back inside the box.
    for (let round = 0; round < 60; round++) {
      let moved = false;
      for (let i = 0; i < sites.length; i++) {
        for (let j = i + 1; j < sites.length; j++) {
          const a = sites[i], b = sites[j];
          let dx = b.sx - a.sx, dy = b.sy - a.sy;
          let dist = Math.hypot(dx, dy);
          const want = a.rad + b.rad + (many ? 8 : 44);
          if (dist >= want) continue;
          if (dist < 1e-6) { dx = 1; dy = 0; dist = 1; }
          const push = (want - dist) / 2;
          a.sx -= (dx / dist) * push; a.sy -= (dy / dist) * push;
          b.sx += (dx / dist) * push; b.sy += (dy / dist) * push;
          moved = true;
        }
      }
      for (const st of sites) {
        st.sx = Math.min(W - st.rad - 70, Math.max(st.rad + 70, st.sx));
        st.sy = Math.min(H - st.rad - 30, Math.max(st.rad + 26, st.sy));
      }
      if (!moved) break;
    }
    const g = s('g');
    for (const st of sites) {
      const k = st.nodes.length;
      const { ring, rad } = st;
      g.append(s('circle', { class: `site tier-${st.tier}`, cx: st.sx, cy: st.sy, r: rad }),
        s('text', { class: 'site-label', x: st.sx, y: st.sy - rad - 6, 'text-anchor': 'middle' }, `${st.name} (${st.tier})`));
      st.nodes.forEach((n, i) => {
        const a = Math.PI + (2 * Math.PI * i) / k;
        const x = st.sx + ring * Math.cos(a), y = st.sy + ring * Math.sin(a);
        const ngpu = ((n.capabilities && n.capabilities.gpus) || []).length;
        const label = `${n.name}: ${n.status}, ${n.tier}/${n.site}${ngpu ? `, ${ngpu} GPUs` : ''}${n.capabilities && n.capabilities.fabric ? `, fabric ${n.capabilities.fabric}` : ''}, ${n.load ? n.load.workloads : 0} workloads`;
        const sel = n.name === selected;
        let lx = x, ly = y + 22, anchor = 'middle';
        if (k > 1) {
          const c = Math.cos(a), sn = Math.sin(a);
          lx = x + c * 14; ly = y + sn * 14 + 4;
          anchor = c > 0.3 ? 'start' : c < -0.3 ? 'end' : 'middle';
          if (anchor === 'middle') ly += sn > 0 ? 8 : -4;
        }
        g.append(s('a', { href: `#/mesh/${encodeURIComponent(n.name)}`, class: 'node-link', 'aria-label': label, 'data-key': 'map-' + n.name },
          s('title', {}, label),
          s('circle', { class: `node st-${n.status}${sel ? ' selected' : ''}`, cx: x, cy: y, r: 9 }),
          ngpu ? s('text', { class: 'node-gpu', x, y: y + 3.5, 'text-anchor': 'middle' }, String(ngpu)) : null,
          many ? null : s('text', { class: 'node-label', x: lx, y: ly, 'text-anchor': anchor }, n.name)));
      });
    }
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'mapsvg', role: 'group', 'aria-label': 'Map of the sites by RTT' }, g);
    if (scale > 0) {
      const target = (W / 5) / scale;
      const nice = [1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 1000].find((v) => v >= target) || target;
      const len = nice * scale;
      svg.append(s('g', { class: 'scalebar' },
        s('line', { x1: 16, y1: H - 16, x2: 16 + len, y2: H - 16 }),
        s('text', { x: 16 + len / 2, y: H - 22, 'text-anchor': 'middle' }, `${nice} ms`)));
    } else if (sites.length > 1) {
      svg.append(s('text', { class: 'muted-svg', x: 16, y: H - 16 }, known ? 'all sites within 0.5 ms: placed on a ring' : 'waiting for every node’s coordinate: sites placed on a ring'));
    }
    const legend = h('ul', { class: 'legend' },
      TIERS.map((t) => h('li', {}, h('span', { class: `swatch tier-${t}` }), t)),
      ['alive', 'suspect', 'failed', 'unreachable', 'left'].map((st) => h('li', {}, h('span', { class: `dot st-${st}` }), st)),
      h('li', {}, 'number in a node: GPUs'));
    const noCoord = ordered.filter((n) => !(n.coord && n.coord.Vec));
    return [h('div', { class: 'scroll' }, svg), legend, noCoord.length ? h('p', { class: 'muted small' }, `No coordinate yet: ${noCoord.map((n) => n.name).join(', ')}`) : null];
  }

  function nodeTable(ordered) {
    const rows = [];
    let tier = null;
    for (const n of ordered) {
      if (n.tier !== tier) {
        tier = n.tier;
        rows.push(h('tr', { class: 'group' }, h('th', { colspan: 10, scope: 'colgroup' }, `${tier} tier`)));
      }
      const c = n.capabilities || {};
      const l = n.load || {};
      const gpus = c.gpus || [];
      const gpuText = gpus.length ? `${l.free_gpus}/${gpus.length} free · ${gpus[0].model}${c.gpu_source ? ` (${c.gpu_source})` : ''}` : '–';
      const cpuTotal = (c.cpu && c.cpu.millicores) || 0;
      const memTotal = (c.memory && c.memory.total) || 0;
      rows.push(h('tr', { class: n.name === selected ? 'selected' : '' },
        h('th', { scope: 'row' }, h('a', { href: `#/mesh/${encodeURIComponent(n.name)}`, 'data-key': 'row-' + n.name }, n.name)),
        h('td', {}, badge(n.status)),
        h('td', {}, n.site),
        h('td', {}, gpuText),
        h('td', {}, c.fabric || '–'),
        h('td', {}, meter(cpuTotal - (l.free_cpu || 0), cpuTotal, `${millicores(l.free_cpu)} of ${millicores(cpuTotal)} free`)),
        h('td', {}, meter(memTotal - (l.free_memory || 0), memTotal, `${bytes(l.free_memory)} of ${bytes(memTotal)} free`)),
        h('td', { class: 'num' }, String(l.workloads || 0)),
        h('td', { class: 'num' }, (l.qps || 0).toFixed(1)),
        h('td', {}, (n.models || []).join(', ') || '–')));
    }
    return table(['Node', 'Status', 'Site', 'GPUs', 'Fabric', 'CPU (cores)', 'Memory', 'Workloads', 'QPS', 'Serves'], rows, { class: 'nodes' });
  }

  function heatMap(ordered) {
    const ns = ordered.filter((n) => n.coord && n.coord.Vec).slice(0, 80);
    const n = ns.length;
    const d = matrix(ns);
    let max = 0;
    for (const row of d) for (const v of row) if (isFinite(v)) max = Math.max(max, v);
    const c = Math.max(6, Math.min(34, Math.floor(600 / Math.max(n, 1))));
    const lab = 90;
    const W = lab + n * c + 8, H = lab + n * c + 8;
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'heatsvg', role: 'img', 'aria-label': `RTT matrix of ${n} nodes, up to ${ms(max)}` });
    const showText = c >= 30;
    ns.forEach((a, i) => {
      svg.append(s('text', { class: 'heat-label', x: lab - 6, y: lab + i * c + c / 2 + 4, 'text-anchor': 'end' }, a.name));
      svg.append(s('text', { class: 'heat-label', transform: `translate(${lab + i * c + c / 2 + 4},${lab - 6}) rotate(-60)` }, a.name));
      ns.forEach((b, j) => {
        const v = d[i][j];
        const t = max > 0 ? v / max : 0;
        const light = 96 - 62 * Math.sqrt(t);
        svg.append(s('rect', { x: lab + j * c, y: lab + i * c, width: c - 1, height: c - 1, fill: `hsl(212 75% ${light}%)` },
          s('title', {}, `${a.name} → ${b.name}: ${ms(v)}`)));
        if (showText && i !== j) {
          svg.append(s('text', { class: light < 60 ? 'heat-val dark' : 'heat-val', x: lab + j * c + c / 2, y: lab + i * c + c / 2 + 4, 'text-anchor': 'middle' }, v < 10 ? v.toFixed(1) : String(Math.round(v))));
        }
      });
    });
    const scaleBar = h('div', { class: 'heat-legend' }, h('span', {}, '0 ms'), h('span', { class: 'ramp' }), h('span', {}, ms(max)));
    return [h('div', { class: 'scroll' }, svg), scaleBar,
      h('p', { class: 'muted small' }, 'Estimated from coordinates in the browser: ‖a−b‖ + both heights, plus both adjustments when positive (serf’s DistanceTo).')];
  }

  const stop = poll(async () => {
    try {
      nodes = await get('/v1/nodes');
      err = null;
    } catch (e) {
      err = e;
    }
    try {
      sites = await get('/v1/sites');
      sitesErr = null;
    } catch (e) {
      sitesErr = e;
    }
    render();
  }, 5000);

  const handle = () => stop();
  handle.update = (r) => {
    selected = r.args[0] || '';
    render();
    // Keyboard users land on the document they asked for.
    if (selected) detail.focus();
  };
  return handle;
}

// siteTable lists the sites this agent knows: those of its own pool, whose
// nodes it sees, and those it knows through federation (their gateways'
// summaries), with the round trip (to a pool site: estimated from the
// agent's Vivaldi coordinate to the site's nearest alive node; to another
// pool's: measured by the gateways' pings, else estimated from the sites'
// WAN coordinates), whether the gateways reach the site only through a
// relay, and when the site was last heard from.
function siteTable(sites) {
  const rows = [...sites].sort((a, b) => (a.via === b.via ? 0 : a.via === 'pool' ? -1 : 1) || a.name.localeCompare(b.name)).map((st) =>
    h('tr', { 'data-site': st.name },
      h('th', { scope: 'row' }, st.name),
      h('td', {}, st.region || '–'),
      h('td', {}, badge(st.status)),
      h('td', {}, st.via === 'pool' ? 'this pool' : st.path === 'relayed' ? 'federation, through a relay' : 'federation'),
      h('td', { class: 'num' }, `${st.alive}/${st.nodes}`),
      h('td', { class: 'num rtt' }, st.rtt_ms != null ? ms(st.rtt_ms) : '–'),
      h('td', { class: 'heard' }, st.heard ? ago(st.heard) : '–')));
  return [table(['Site', 'Region', 'Status', 'Seen through', 'Nodes alive', 'RTT', 'Heard'], rows, { class: 'sites-table' }),
    h('p', { class: 'muted small' }, 'The RTT to a site of this pool is estimated from Vivaldi coordinates, to its nearest alive node; membership hears from its alive nodes all the time. Sites of other pools are known from their gateways’ summaries; their RTT is measured by the gateways’ pings, or estimated from the sites’ WAN coordinates, and a site not heard from for 30 s is unreachable.')];
}

// tierSummary lists the sites of each tier with their nodes, GPUs and
// fabrics.
function tierSummary(ordered) {
  const tiers = new Map();
  for (const n of ordered) {
    if (!tiers.has(n.tier)) tiers.set(n.tier, new Map());
    const sites = tiers.get(n.tier);
    if (!sites.has(n.site)) sites.set(n.site, { region: n.region, nodes: 0, alive: 0, gpus: 0, free: 0, fabrics: new Set() });
    const st = sites.get(n.site);
    const c = n.capabilities || {};
    st.nodes++;
    if (n.status === 'alive') st.alive++;
    st.gpus += (c.gpus || []).length;
    st.free += (n.load && n.load.free_gpus) || 0;
    if (c.fabric) st.fabrics.add(c.fabric);
  }
  return [h('h2', {}, 'Sites by tier'),
    [...tiers.entries()].map(([tier, sites]) => h('div', { class: 'tier-block' },
      h('h3', {}, h('span', { class: `swatch tier-${tier}` }), ` ${tier}`),
      h('ul', { class: 'sites' }, [...sites.entries()].map(([name, st]) => h('li', {},
        h('strong', {}, name), ` (${st.region}): ${st.alive}/${st.nodes} nodes alive`,
        st.gpus ? `, ${st.free}/${st.gpus} GPUs free` : '',
        st.fabrics.size ? `, fabric ${[...st.fabrics].join(', ')}` : ''))))),
    h('p', { class: 'muted small' }, 'Pick a node on the map or in the table to see its document.')];
}

function meter(used, total, label) {
  const f = total > 0 ? Math.min(1, Math.max(0, used / total)) : 0;
  const bar = h('span', { class: 'meter', role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': Math.round(f * 100), 'aria-label': `${Math.round(f * 100)}% used` }, h('span', { class: 'fill' }));
  bar.firstChild.style.width = `${(f * 100).toFixed(1)}%`;
  return h('span', { class: 'meterwrap' }, bar, h('span', { class: 'small' }, label));
}
