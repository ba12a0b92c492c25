// RTT from Vivaldi coordinates, as serf's coordinate package computes it,
// and a 2-D layout of the nodes whose screen distances follow those RTTs.

// rttMs is serf's Coordinate.DistanceTo in milliseconds: the Euclidean
// distance of the vectors plus both heights, plus both adjustments when
// that stays positive (the same as placement's rttSeconds).
export function rttMs(a, b) {
  if (!a || !b || !a.Vec || !b.Vec) return NaN;
  let sum = 0;
  for (let i = 0; i < a.Vec.length; i++) {
    const d = a.Vec[i] - (b.Vec[i] || 0);
    sum += d * d;
  }
  const dist = Math.sqrt(sum) + (a.Height || 0) + (b.Height || 0);
  const adj = dist + (a.Adjustment || 0) + (b.Adjustment || 0);
  return (adj > 0 ? adj : dist) * 1000;
}

// matrix returns the n×n RTT matrix (ms) of nodes, zero on the diagonal.
export function matrix(nodes) {
  const n = nodes.length;
  const m = Array.from({ length: n }, () => new Float64Array(n));
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      const d = rttMs(nodes[i].coord, nodes[j].coord);
      m[i][j] = m[j][i] = d;
    }
  }
  return m;
}

// layout places n points in 2-D so that their distances approximate d
// (classical multidimensional scaling: the two leading eigenvectors of the
// double-centred squared-distance matrix, by power iteration). prev maps a
// key to the previous position; the result is flipped or swapped to stay
// close to it, so the map does not jump between refreshes.
export function layout(d, keys, prev) {
  const n = d.length;
  if (n === 0) return [];
  if (n === 1) return [[0, 0]];
  const b = Array.from({ length: n }, () => new Float64Array(n));
  const rowMean = new Float64Array(n);
  let all = 0;
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const v = d[i][j] * d[i][j];
      b[i][j] = v;
      rowMean[i] += v / n;
    }
    all += rowMean[i] / n;
  }
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) b[i][j] = -0.5 * (b[i][j] - rowMean[i] - rowMean[j] + all);
  }
  const vecs = [];
  for (let k = 0; k < 2; k++) {
    let v = new Float64Array(n).map((_, i) => Math.sin(i * 12.9898 + k * 78.233) + 0.01 * (i + 1));
    let lambda = 0;
    for (let it = 0; it < 200; it++) {
      const w = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        let acc = 0;
        for (let j = 0; j < n; j++) acc += b[i][j] * v[j];
        w[i] = acc;
      }
      for (const u of vecs) {
        let dot = 0;
        for (let i = 0; i < n; i++) dot += w[i] * u.v[i];
        for (let i = 0; i < n; i++) w[i] -= dot * u.v[i];
      }
      let norm = 0;
      for (let i = 0; i < n; i++) norm += w[i] * w[i];
      norm = Math.sqrt(norm);
      if (norm < 1e-12) { lambda = 0; break; }
      lambda = norm;
      v = w.map((x) => x / norm);
    }
    vecs.push({ v, lambda });
  }
  let pts = [];
  for (let i = 0; i < n; i++) {
    pts.push(vecs.map((u) => u.v[i] * Math.sqrt(Math.max(u.lambda, 0))));
  }
  if (prev && prev.size) {
    let best = null, bestErr = Infinity;
    for (const swapXY of [false, true]) {
      for (const sx of [1, -1]) {
        for (const sy of [1, -1]) {
          let err = 0, seen = 0;
          const cand = pts.map(([x, y]) => (swapXY ? [sx * y, sy * x] : [sx * x, sy * y]));
          cand.forEach((p, i) => {
            const q = prev.get(keys[i]);
            if (q) { err += (p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2; seen++; }
          });
          if (seen && err < bestErr) { bestErr = err; best = cand; }
        }
      }
    }
    if (best) pts = best;
  }
  return pts;
}
