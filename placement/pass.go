package placement

import "math"

// Pipeline stages as numbers (Reason.stage), for the pass loop: it runs
// once per node, so it counts by stage instead of comparing Reasons.
const (
	stageLatency    = 6
	stageCPU        = 7
	stageMemory     = 8
	stageGPU        = 9
	stageConstraint = 10
	stageFeasible   = 12
)

// evalStage is evalRest by stage number, with the node's free resources
// given: the filters of newCtx in the same order.
func (c *evalCtx) evalStage(i int32, f freeState) int {
	if c.slo > 0 {
		if d, _ := c.worstRTT(i); d > c.slo {
			return stageLatency
		}
	}
	if f.cpu < c.res.CPU {
		return stageCPU
	}
	if f.mem < c.res.Memory {
		return stageMemory
	}
	if c.res.GPUs > 0 && c.freeGPUsFast(i, f) < c.res.GPUs {
		return stageGPU
	}
	if len(c.req.Constraints) > 0 {
		if cc := c.cc; cc != nil && cc.cons != nil {
			// The class's answer, inline; the first node of a class asks.
			switch cc.cons[c.s.ix.hotOf(i).class] {
			case 1:
				return stageFeasible
			case 2:
				return stageConstraint
			}
		}
		if !(constraintFilter{}).feasible(c, i, f) {
			return stageConstraint
		}
	}
	return stageFeasible
}

// totalFree is total with node i's free resources given.
func (c *evalCtx) totalFree(i int32, f freeState) float64 {
	if c.wsum == 0 {
		return 0
	}
	t := 0.0
	for _, sc := range c.scorers {
		// The common scorers by their concrete type: no interface call.
		switch sc := sc.(type) {
		case headroomScorer:
			h := c.headroomFast(i, f)
			if sc.pack {
				h = 1 - h
			}
			t += sc.w * h
		default:
			t += sc.weight() * sc.score(c, i, f)
		}
	}
	if c.invW != 0 {
		return t * c.invW // wsum is a power of two: exact
	}
	return t / c.wsum
}

// scan runs the filters over nodes (one group of a cell), counts and
// records the outcomes, and appends the feasible nodes to feas, scored
// unless deferScore.
func (d *Decision) scan(c *evalCtx, g *group, p *passStat, feas []cand, deferScore bool) []cand {
	hot := d.s.ix.hot[g.start : g.start+int32(len(g.nodes))]
	over := len(d.s.over) > 0
	seedMix := mix64(c.req.Seed + 0x9e3779b97f4a7c15)
	for k := range hot {
		h := &hot[k]
		i := h.node
		if len(c.excl) > 0 && c.excluded(i) {
			continue
		}
		f := h.free
		if over && d.s.overlaid(i) {
			f = d.s.over[i]
		}
		st := c.evalStage(i, f)
		p.considered++
		p.counts[st]++
		if st != stageFeasible {
			if d.bulk != nil {
				d.Evaluated++
				d.bulk[st]++
			} else {
				d.record(i, stageReason[st])
			}
			continue
		}
		if d.bulk != nil && d.keyFeas == nil {
			d.Evaluated++
			d.bulkFeas++
		} else {
			d.record(i, reasonFeasible)
		}
		tb := mix64(h.idHash ^ seedMix) // tieBreakHash, seed mixed once
		switch {
		case deferScore:
			feas = append(feas, cand{i, 0, tb})
		case d.streamC > 0:
			// Keep only the best streamC: a bounded heap, worst at the root.
			cd := cand{i, c.totalFree(i, f), tb}
			if len(feas) < d.streamC {
				feas = append(feas, cd)
				d.siftUp(feas, len(feas)-1)
			} else if d.better(cd, feas[0]) {
				feas[0] = cd
				d.siftDown(feas, 0)
			}
		default:
			feas = append(feas, cand{i, c.totalFree(i, f), tb})
		}
	}
	return feas
}

// freeGPUsFast is freeGPUs from the class's matching-GPU mask.
func (c *evalCtx) freeGPUsFast(i int32, f freeState) int {
	if c.cc != nil {
		if _, mask, _, ok := c.cc.gpuClass(c, i); ok {
			return popcount(f.gpus & mask)
		}
	}
	return c.freeGPUs(i, f)
}

// headroomFast is headroom with the GPU part from the class; the same
// arithmetic, so the same bits.
func (c *evalCtx) headroomFast(i int32, f freeState) float64 {
	if c.res.GPUs == 0 || c.cc == nil {
		return c.headroom(i, f)
	}
	_, mask, n, ok := c.cc.gpuClass(c, i)
	if !ok {
		return c.headroom(i, f)
	}
	h := c.s.ix.hotOf(i)
	sum, k := 0.0, 0
	if h.cpu > 0 {
		sum += clamp01(float64(f.cpu-c.res.CPU) / float64(h.cpu))
		k++
	}
	if h.mem > 0 {
		sum += clamp01(float64(f.mem-c.res.Memory) / float64(h.mem))
		k++
	}
	if n > 0 {
		sum += clamp01(float64(popcount(f.gpus&mask)-c.res.GPUs) / float64(n))
		k++
	}
	switch k {
	case 0:
		return 0
	case 2:
		return sum * 0.5
	}
	return sum / float64(k)
}

// evalNodeFast is evalNode for the gang pass, with the GPU signature check
// and GPU counts answered per GPU class. The pass gives it only nodes of a
// gang domain: on a fabric when the gang needs one, so the fabric check
// cannot fail.
func (c *evalCtx) evalNodeFast(i int32, f freeState) Reason {
	if c.cc != nil {
		if r, _, _, ok := c.cc.gpuClass(c, i); ok {
			if r != "" {
				return r
			}
			if st := c.evalStage(i, f); st != stageFeasible {
				return stageReason[st]
			}
			return reasonFeasible
		}
	}
	return c.evalNode(i)
}

// scanDomain evaluates a gang domain's nodes: outcomes for every node not
// excluded, feasible ones scored into feas.
func (d *Decision) scanDomain(c *evalCtx, nodes []int32, feas []cand, outcomes []eval) ([]cand, []eval) {
	over := len(d.s.over) > 0
	seedMix := mix64(c.req.Seed + 0x9e3779b97f4a7c15)
	for _, i := range nodes {
		if len(c.excl) > 0 && c.excluded(i) {
			continue
		}
		h := d.s.ix.hotOf(i)
		f := h.free
		if over && d.s.overlaid(i) {
			f = d.s.over[i]
		}
		rs := c.evalNodeFast(i, f)
		outcomes = append(outcomes, eval{i, rs})
		if rs == reasonFeasible {
			feas = append(feas, cand{i, c.totalFree(i, f), mix64(h.idHash ^ seedMix)})
		}
	}
	return feas, outcomes
}

// memberLess is scoreDomain's member order: nodes on the racks with the
// most feasible nodes first, then by rack name, then by score.
type memberKey struct {
	cand
	racked int32
	rack   int32
}

func (d *Decision) memberLess(a, b memberKey) bool {
	if a.racked != b.racked {
		return a.racked > b.racked
	}
	if a.rack != b.rack {
		return a.rack < b.rack
	}
	return d.better(a.cand, b.cand)
}

// scoreDomainFast is scoreDomain without explanations: the same members
// and the same total (the same arithmetic), chosen in O(feasible · need)
// with rack numbers instead of names, and the fabric's fill from sums
// precomputed at Build.
func (e *Engine) scoreDomainFast(d *Decision, c *evalCtx, tier, key string, dom gangDomain, feas []cand, need int) *domainCand {
	ix := d.s.ix
	if dom.ix == nil || ix.nRacks == 0 {
		dc := e.scoreDomain(d, c, tier, dom, feas, need, false)
		return dc
	}
	if cap(d.scratch.rackN) < ix.nRacks {
		d.scratch.rackN = make([]int32, ix.nRacks)
	}
	rackN := d.scratch.rackN[:ix.nRacks]
	emptyRack := int32(-1) // rack "" is numbered 0 when present, never counted
	if ix.emptyRack {
		emptyRack = 0
	}
	for _, f := range feas {
		if r := ix.rackID[f.i]; r != emptyRack {
			rackN[r]++
		}
	}
	top := make([]memberKey, 0, need+1)
	for _, f := range feas {
		r := ix.rackID[f.i]
		mk := memberKey{f, rackN[r], r}
		if len(top) == need && !d.memberLess(mk, top[need-1]) {
			continue
		}
		// Insert in order.
		k := len(top)
		if k < need {
			top = append(top, mk)
		} else {
			k = need - 1
			top[k] = mk
		}
		for ; k > 0 && d.memberLess(top[k], top[k-1]); k-- {
			top[k], top[k-1] = top[k-1], top[k]
		}
	}
	for _, f := range feas {
		rackN[ix.rackID[f.i]] = 0
	}
	dc := &domainCand{key: key, tier: tier, fabric: dom.fabric, members: make([]cand, len(top))}
	for k, m := range top {
		dc.members[k] = m.cand
	}
	dc.tb = tieBreak(c.req.Seed, dc.key)
	o := e.opts
	wsum, total := 0.0, 0.0
	if len(c.req.Data) > 0 && o.DataWeight > 0 && c.gang {
		secs, _ := d.fabricMove(dom)
		v := o.DataTimeScale.Seconds() / (o.DataTimeScale.Seconds() + secs)
		wsum += o.DataWeight
		total += o.DataWeight * v
	}
	if o.PackWeight > 0 {
		dm := dom.ix
		var used, all int64
		if c.res.GPUs > 0 {
			used, all = dm.usedGPU, dm.allGPU
		} else {
			used, all = dm.usedCPU, dm.allCPU
		}
		// Reservations on a clone change what is in use.
		if u, ok := d.s.used[domainKey(tier, dom.fabric)]; ok {
			if c.res.GPUs > 0 {
				used += u.gpu
			} else {
				used += u.cpu
			}
		}
		fu, fa := float64(used), float64(all)
		if c.res.GPUs > 0 {
			fu += float64(need * c.res.GPUs)
		} else {
			fu += float64(int64(need) * c.res.CPU)
		}
		full := 0.0
		if fa > 0 {
			full = clamp01(fu / fa)
		}
		wsum += o.PackWeight
		total += o.PackWeight * full
	}
	mean := 0.0
	for _, m := range dc.members {
		mean += m.total
	}
	mean /= float64(len(dc.members))
	wsum++
	total += mean
	if wsum > 0 {
		dc.total = total / wsum
	}
	if math.IsNaN(dc.total) {
		dc.total = 0
	}
	return dc
}
