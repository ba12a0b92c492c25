package placement

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
	if c.res.GPUs > 0 && c.freeGPUs(i, f) < c.res.GPUs {
		return stageGPU
	}
	if len(c.req.Constraints) > 0 {
		if cc := c.cc; cc != nil && cc.cons != nil {
			// The class's answer, inline; the first node of a class asks.
			switch cc.cons[c.s.ix.hot[i].class] {
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
			h := c.headroom(i, f)
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
func (d *Decision) scan(c *evalCtx, nodes []int32, p *passStat, feas []cand, deferScore bool) []cand {
	hot := d.s.ix.hot
	over := d.s.over != nil
	seedMix := mix64(c.req.Seed + 0x9e3779b97f4a7c15)
	for _, i := range nodes {
		if len(c.excl) > 0 && c.excluded(i) {
			continue
		}
		f := hot[i].free
		if over {
			f = d.s.freeOf(i)
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
		tb := mix64(hot[i].idHash ^ seedMix) // tieBreakHash, seed mixed once
		if deferScore {
			feas = append(feas, cand{i, 0, tb})
		} else {
			feas = append(feas, cand{i, c.totalFree(i, f), tb})
		}
	}
	return feas
}
