package placement

import "slices"

// Selection in O(feasible · log C), after the kube-scheduler's and
// Nomad's top-k selection: instead of scanning every candidate once per
// replica, the best C candidates are kept in a bounded heap while the
// feasible nodes stream past. The result is exactly what the greedy pick
// gives (Decision.better is a total order), so decisions do not change.

// worse orders the heap: the root is the worst candidate kept.
func (d *Decision) worse(a, b cand) bool { return d.better(b, a) }

// topC appends the best c candidates of feas to out, best first.
func (d *Decision) topC(out, feas []cand, c int) []cand {
	if c <= 0 {
		return out
	}
	h := make([]cand, 0, min(c, len(feas)))
	for _, cd := range feas {
		if len(h) < c {
			h = append(h, cd)
			d.siftUp(h, len(h)-1)
			continue
		}
		if d.better(cd, h[0]) {
			h[0] = cd
			d.siftDown(h, 0)
		}
	}
	// Pop worst first into the tail of out.
	base := len(out)
	out = append(out, h...)
	for n := len(h); n > 0; n-- {
		out[base+n-1] = h[0]
		h[0] = h[n-1]
		h = h[:n-1]
		d.siftDown(h, 0)
	}
	return out
}

func (d *Decision) siftUp(h []cand, k int) {
	for k > 0 {
		p := (k - 1) / 2
		if !d.worse(h[k], h[p]) {
			return
		}
		h[k], h[p] = h[p], h[k]
		k = p
	}
}

func (d *Decision) siftDown(h []cand, k int) {
	for {
		l := 2*k + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && d.worse(h[r], h[l]) {
			m = r
		}
		if !d.worse(h[m], h[k]) {
			return
		}
		h[k], h[m] = h[m], h[k]
		k = m
	}
}

func (d *Decision) isPlaced(i int32) bool {
	if len(d.placed) == 0 {
		return false
	}
	_, ok := d.chosen[i]
	return ok
}

// hotSpreadKey is spreadKey from the packed per-node site and region
// numbers.
func (d *Decision) hotSpreadKey(i int32) int32 {
	if d.req.Spread == SpreadSite {
		return d.s.ix.siteOf[i]
	}
	return d.s.ix.regionOf[i]
}

// pickTop is pick in O(F · log C): the same candidates in the same order,
// and the same spreadShort.
func (d *Decision) pickTop(feas []cand, need int) (picked []cand, spreadShort bool) {
	if need <= 0 || len(feas) == 0 {
		return nil, false
	}
	if d.req.Spread == SpreadNone {
		// Placed nodes (of other client groups) may be among feas: keep
		// enough to skip them.
		top := d.topC(nil, feas, need+len(d.placed))
		for _, cd := range top {
			if len(picked) == need {
				break
			}
			if !d.isPlaced(cd.i) {
				picked = append(picked, cd)
			}
		}
		return picked, false
	}
	// Spread: the greedy pick takes the best candidate of every site (or
	// region) not yet holding a replica, best first; so keep each key's
	// best and take the top of those.
	n := d.s.ix.nSites
	if d.req.Spread == SpreadRegion {
		n = d.s.ix.nRegions
	}
	best := make([]int32, n) // index into feas + 1; -1 for a key in use
	for _, j := range d.placed {
		best[d.hotSpreadKey(j)] = -1
	}
	var keys []int32
	nonPlaced := 0
	for k, cd := range feas {
		if d.isPlaced(cd.i) {
			continue
		}
		nonPlaced++
		key := d.hotSpreadKey(cd.i)
		switch b := best[key]; {
		case b < 0:
		case b == 0:
			best[key] = int32(k) + 1
			keys = append(keys, key)
		case d.better(cd, feas[b-1]):
			best[key] = int32(k) + 1
		}
	}
	heads := make([]cand, len(keys))
	for k, key := range keys {
		heads[k] = feas[best[key]-1]
	}
	picked = d.topC(nil, heads, need)
	return picked, len(picked) < need && nonPlaced > len(picked)
}

// sampleByTieBreak keeps the k candidates with the highest seeded
// tie-break: a uniform sample drawn by the request's seed, in O(len(feas))
// (quickselect). The kept candidates come back in node order.
func sampleByTieBreak(feas []cand, k int) []cand {
	if k >= len(feas) {
		return feas
	}
	lo, hi := 0, len(feas)-1
	for lo < hi {
		// Median of three as pivot; tie-breaks are hashes, so this is
		// near-linear.
		mid := lo + (hi-lo)/2
		a, b, c := feas[lo].tb, feas[mid].tb, feas[hi].tb
		pv := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for feas[i].tb > pv {
				i++
			}
			for feas[j].tb < pv {
				j--
			}
			if i <= j {
				feas[i], feas[j] = feas[j], feas[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			lo = hi
		}
	}
	out := feas[:k]
	sortByNode(out)
	return out
}

func sortByNode(cs []cand) {
	slices.SortFunc(cs, func(a, b cand) int { return int(a.i) - int(b.i) })
}
