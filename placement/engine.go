package placement

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/policy"
)

// scratch is per-decision working memory, pooled: decisions over large
// snapshots would otherwise allocate tens of kilobytes each, and the
// garbage collector then rescans the (large, live) snapshot often.
type scratch struct {
	evals []eval
	feas  []cand
	taken []bool
	rackN []int32 // feasible nodes per rack; kept zero between uses
	outs  []eval  // a gang pass's outcomes
}

func (s *scratch) reset() {
	s.evals, s.feas, s.taken, s.outs = s.evals[:0], s.feas[:0], s.taken[:0], s.outs[:0]
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// tierOrder is the order tiers are walked when a request names none.
var tierOrder = []string{TierEdge, TierOnprem, TierCloud}

// cand is a feasible node with its score.
type cand struct {
	i     int32
	total float64
	tb    uint64
}

// eval is one node's outcome in one pass.
type eval struct {
	i int32
	r Reason
}

// passStat counts outcomes of one pass, for fallback messages.
type passStat struct {
	considered int
	counts     [13]int // by stage; index 12 is feasible
	gpuModel   int     // of counts[4], those for ReasonGPUModel
}

func (p *passStat) add(r Reason, n int) {
	if n <= 0 {
		return
	}
	p.considered += n
	p.counts[r.stage()] += n
	if r == ReasonGPUModel {
		p.gpuModel += n
	}
}

// addTo adds the pass's counts to the decision's metrics.
func (p *passStat) addTo(m *Metrics) {
	for _, r := range Reasons() {
		st := r.stage()
		if st < 0 || p.counts[st] == 0 {
			continue
		}
		n := p.counts[st]
		switch r {
		case ReasonNoGPU:
			n -= p.gpuModel
		case ReasonGPUModel:
			n = p.gpuModel
		}
		if n > 0 {
			if m.Filtered == nil {
				m.Filtered = map[Reason]int{}
			}
			m.Filtered[r] += n
		}
	}
	m.Feasible += p.counts[reasonFeasible.stage()]
}

// Place places req on s. The snapshot and the request are only read;
// the returned Decision keeps both (it explains nodes lazily), so neither
// may change while the decision is used. Errors are for requests that
// cannot be evaluated at all (invalid, unknown client site); a request
// that does not fit is a Decision with Feasible false.
func (e *Engine) Place(s *Snapshot, req *Request) (*Decision, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	var cc *classCache
	if !e.legacy && !e.opts.Exhaustive {
		cc = newClassCache(s, req)
	}
	d := &Decision{
		Kind:   req.Kind,
		Key:    req.Key,
		Nodes:  s.Len(),
		s:      s,
		req:    req,
		opts:   &e.opts,
		legacy: e.legacy,
		chosen: map[int32]int{},
	}
	ix := s.ix
	var excl []int32
	for _, x := range req.Exclude {
		if i, ok := s.lookup(x); ok && ix.nodes[i].Alive && !slices.Contains(excl, i) {
			excl = append(excl, i)
		}
	}
	// Client groups.
	type grp struct {
		client string
		names  []string
	}
	var groups []grp
	if req.PerClientSite {
		for _, c := range req.Latency.Clients {
			groups = append(groups, grp{client: c, names: []string{c}})
		}
	} else {
		groups = []grp{{names: req.Latency.Clients}}
	}
	for g, gr := range groups {
		c, err := e.newCtx(s, req, excl, gr.names, cc)
		if err != nil {
			return nil, err
		}
		c.group, c.client = g, gr.client
		d.ctxs = append(d.ctxs, c)
	}
	// Passes: each tier in preference order, or all tiers at once.
	var passes [][]string
	if len(req.Tiers) == 0 {
		passes = [][]string{tierOrder}
	} else {
		for _, t := range req.Tiers {
			passes = append(passes, []string{t})
		}
	}
	d.reached = make([]map[string]bool, len(d.ctxs))
	for g := range d.ctxs {
		d.reached[g] = map[string]bool{}
	}
	if e.opts.Exhaustive {
		d.reasons = make([]Reason, len(ix.nodes))
	} else {
		d.touched = map[*cell]bool{}
		d.touchedR = map[*regionIx]bool{}
	}
	d.scratch = scratchPool.Get().(*scratch)
	defer func() {
		d.scratch.reset()
		scratchPool.Put(d.scratch)
		d.scratch = nil
	}()
	if !e.legacy && !e.opts.Exhaustive && len(d.ctxs) == 1 {
		// One client group: a node is evaluated at most once, so only
		// the feasible need recording one by one; the rest are counted.
		d.bulk = new([13]int)
		switch {
		case req.Kind != Inference:
		case req.Spread == SpreadSite:
			d.keyFeas = make([]int32, s.ix.nSites)
		case req.Spread == SpreadRegion:
			d.keyFeas = make([]int32, s.ix.nRegions)
		}
	}
	need := req.replicas()
	if req.Kind == Training {
		d.Wanted = need
		d.domainFit = map[string]bool{}
		d.domainFeasN = map[string]int{}
		e.placeGang(d, passes, need)
	} else {
		for _, c := range d.ctxs {
			n := req.ReplicasFor(c.client)
			d.Wanted += n
			e.placeInference(d, c, passes, n)
		}
	}
	d.Feasible = len(d.Placements) == d.Wanted
	for _, p := range d.Placements {
		if !slices.Contains(d.Tiers, p.Tier) {
			d.Tiers = append(d.Tiers, p.Tier)
		}
	}
	d.account()
	d.Metrics.NodesEvaluated = d.Evaluated
	d.Metrics.Classes = len(s.ix.cls.attrs)
	if cc != nil {
		d.Metrics.ClassEvals = cc.evals
		cc.frozen = true
	}
	d.Metrics.Duration = time.Since(start)
	return d, nil
}

func (e *Engine) newCtx(s *Snapshot, req *Request, excl []int32, clients []string, cc *classCache) (*evalCtx, error) {
	ix := s.ix
	c := &evalCtx{s: s, req: req, opts: &e.opts, res: req.member(), excl: excl, cc: cc}
	c.gang = req.Kind == Training && req.Gang.SameFabric
	for _, name := range clients {
		cc, ok := ix.clients[name]
		if ix.unreachable[name] {
			return nil, fmt.Errorf("%w: %q has no RTT while it is cut off", ErrClientUnreachable, name)
		}
		if !ok && ix.sites[name] {
			return nil, fmt.Errorf("%w %q: its nodes have published no coordinate yet (they do within seconds of starting); try again", ErrClientNotMeasured, name)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownClient, name)
		}
		if len(cc.Vec) != ix.dim {
			return nil, fmt.Errorf("%w: %q has a coordinate of other dimensions", ErrUnknownClient, name)
		}
		c.clientN = append(c.clientN, name)
		c.clientC = append(c.clientC, cc)
		site, ok := ix.siteIDs[name]
		if !ok {
			site = -1
		}
		c.clientS = append(c.clientS, site)
	}
	c.slo = req.Latency.P99.Seconds()
	for _, r := range req.Data {
		c.refs = append(c.refs, dataRef{h: ix.holders[r.key()], bytes: float64(r.Bytes)})
	}
	c.lastRTT = -1
	c.modelOK = make([]bool, len(ix.models))
	for m, name := range ix.models {
		c.modelOK[m] = modelMatches(name, c.res.GPUModel)
	}
	c.sigOK = make([]Reason, len(ix.sigs))
	for sg, ms := range ix.sigs {
		switch {
		case c.res.GPUs == 0:
		case len(ms) == 0:
			c.sigOK[sg] = ReasonNoGPU
		default:
			ok := false
			for _, m := range ms {
				ok = ok || c.modelOK[m]
			}
			if !ok {
				c.sigOK[sg] = ReasonGPUModel
			}
		}
	}
	if c.slo > 0 {
		c.filters = append(c.filters, latencyFilter{})
	}
	if c.res.CPU > 0 {
		c.filters = append(c.filters, cpuFilter{})
	}
	if c.res.Memory > 0 {
		c.filters = append(c.filters, memoryFilter{})
	}
	if c.res.GPUs > 0 {
		c.filters = append(c.filters, gpuFilter{})
	}
	if len(req.Constraints) > 0 {
		c.filters = append(c.filters, constraintFilter{})
	}
	o := &e.opts
	if len(c.clientC) > 0 && o.LatencyWeight > 0 {
		c.scorers = append(c.scorers, latencyScorer{w: o.LatencyWeight})
	}
	if req.Kind == Training {
		if o.PackWeight > 0 {
			c.scorers = append(c.scorers, headroomScorer{w: o.PackWeight, pack: true})
		}
	} else if o.HeadroomWeight > 0 {
		c.scorers = append(c.scorers, headroomScorer{w: o.HeadroomWeight})
	}
	if len(req.Data) > 0 && o.DataWeight > 0 && !c.gang {
		c.scorers = append(c.scorers, dataScorer{w: o.DataWeight, scale: o.DataTimeScale.Seconds()})
	}
	for k, a := range req.Affinities {
		if a.Weight > 0 {
			c.scorers = append(c.scorers, affinityScorer{a: a, k: k})
		}
	}
	for _, sc := range c.scorers {
		c.wsum += sc.weight()
	}
	if frac, _ := math.Frexp(c.wsum); frac == 0.5 {
		c.invW = 1 / c.wsum
	}
	return c, nil
}

// better orders candidates: higher total, then higher seeded tie-break,
// then smaller name.
func (d *Decision) better(a, b cand) bool {
	if a.total != b.total {
		return a.total > b.total
	}
	if a.tb != b.tb {
		return a.tb > b.tb
	}
	return d.s.ix.nodes[a.i].Name < d.s.ix.nodes[b.i].Name
}

// spreadConflict reports whether a chosen node (or one of picked) already
// holds node i's site or region under the request's spread.
func (d *Decision) spreadConflict(i int32, picked []cand) bool {
	if d.req.Spread == SpreadNone {
		return false
	}
	key := d.spreadKey(i)
	for _, j := range d.placed {
		if d.spreadKey(j) == key {
			return true
		}
	}
	for _, p := range picked {
		if d.spreadKey(p.i) == key {
			return true
		}
	}
	return false
}

func (d *Decision) spreadKey(i int32) int32 {
	if d.req.Spread == SpreadSite {
		return d.s.ix.nodes[i].siteID
	}
	return d.s.ix.nodes[i].regionID
}

// record notes node i's outcome in a pass.
func (d *Decision) record(i int32, r Reason) {
	d.Evaluated++
	if d.reasons != nil {
		if r.stage() > d.reasons[i].stage() || d.reasons[i] == "" {
			d.reasons[i] = r
		}
		return
	}
	if d.bulk != nil {
		if r == reasonFeasible {
			d.bulkFeas++
			if d.keyFeas != nil {
				d.keyFeas[d.hotSpreadKey(i)]++
			}
			return
		}
		if st := r.stage(); stageReason[st] != "" {
			d.bulk[st]++
			return
		}
	}
	d.scratch.evals = append(d.scratch.evals, eval{i, r})
}

// stageReason is the reason of a stage that has only one.
var stageReason = [...]Reason{
	ReasonNotAlive, ReasonExcluded, ReasonTier, ReasonTierNotReached, "",
	ReasonNoFabric, ReasonLatencySLO, ReasonInsufficientCPU, ReasonInsufficientMemory,
	ReasonInsufficientGPU, ReasonConstraint, ReasonGangDoesNotFit, "",
}

// prunedBy reports whether every node inside b is predicted farther than
// the SLO from some client.
func (c *evalCtx) prunedBy(b *ball) bool {
	if c.slo <= 0 {
		return false
	}
	// A nanosecond of slack: never prune on float rounding.
	for k, cc := range c.clientC {
		if b.lowerBound(cc, c.clientS[k]) > c.slo+1e-9 {
			return true
		}
	}
	return false
}

// countBucket counts the alive, not excluded nodes of a bucket that are
// never looked at one by one: those whose GPUs cannot serve get their
// static reason, the rest tail.
func (c *evalCtx) countBucket(p *passStat, counts []sigCount, match func(n *snode) bool, tail Reason) {
	for _, sc := range counts {
		n := sc.fabric + sc.plain
		if len(c.excl) > 0 {
			for _, x := range c.excl {
				if xn := &c.s.ix.nodes[x]; xn.sig == sc.sig && match(xn) {
					n--
				}
			}
		}
		if r := c.sigOK[sc.sig]; r != "" {
			p.add(r, n)
		} else {
			p.add(tail, n)
		}
	}
}

func (c *evalCtx) exclIn(nodes []int32) int {
	k := 0
	for _, x := range c.excl {
		if slices.Contains(nodes, x) {
			k++
		}
	}
	return k
}

func (c *evalCtx) tieBreak(i int32) uint64 { return tieBreakHash(c.req.Seed, c.s.ix.hotOf(i).idHash) }

// placeInference places up to need replicas for one client group.
func (e *Engine) placeInference(d *Decision, c *evalCtx, passes [][]string, need int) {
	for _, tiers := range passes {
		if need == 0 {
			return
		}
		var p passStat
		var feas []cand
		for _, t := range tiers {
			d.reached[c.group][t] = true
		}
		var picked []cand
		var spreadShort bool
		switch {
		case e.opts.Exhaustive:
			feas = e.naiveInferencePass(d, c, tiers, &p)
			d.Metrics.Scored += len(feas)
			picked, spreadShort = d.pick(feas, need)
		case e.legacy:
			feas = e.inferencePass(d, c, tiers, &p, false)
			d.Metrics.Scored += len(feas)
			picked, spreadShort = d.pick(feas, need)
		default:
			limit := e.opts.MaxCandidates
			if limit == 0 && d.req.Spread == SpreadNone {
				// Selection needs only the best need (plus nodes placed for
				// other client groups): keep just those while scanning.
				d.streamC = need + len(d.placed)
			}
			feas = e.inferencePass(d, c, tiers, &p, limit > 0)
			d.streamC = 0
			all := feas
			if limit > 0 {
				feas = sampleByTieBreak(feas, limit)
				for k := range feas {
					feas[k].total = c.total(feas[k].i)
				}
				d.Metrics.Scored += len(feas)
			} else {
				d.Metrics.Scored += p.counts[stageFeasible]
			}
			picked, spreadShort = d.pickTop(feas, need)
			if len(picked) < need && len(feas) < len(all) {
				// The sample cannot hold every replica (spread, or nodes
				// placed for another client group): score the rest
				// rather than fall back to a worse tier.
				for k := len(feas); k < len(all); k++ {
					all[k].total = c.total(all[k].i)
				}
				d.Metrics.Scored += len(all) - len(feas)
				picked, spreadShort = d.pickTop(all, need)
			}
		}
		p.addTo(&d.Metrics)
		for _, k := range picked {
			d.addPlacement(c, k.i, 0)
		}
		need -= len(picked)
		if need > 0 {
			d.fallback(c, tiers, &p, need, len(picked), spreadShort)
		}
	}
}

// inferencePass walks the index: regions and sites the latency bound
// rules out are counted, not visited.
//
// With deferScore the feasible nodes come back unscored (total 0), for
// the caller to sample before scoring.
func (e *Engine) inferencePass(d *Decision, c *evalCtx, tiers []string, p *passStat, deferScore bool) []cand {
	feas := d.scratch.feas[:0]
	defer func() { d.scratch.feas = feas[:0] }()
	for _, tn := range tiers {
		t := d.s.ix.tiers[tn]
		if t == nil {
			continue
		}
		for _, r := range t.regions {
			if c.prunedBy(&r.ball) {
				c.countBucket(p, r.counts, func(n *snode) bool { return n.Tier == tn && n.Region == r.name }, ReasonLatencySLO)
				continue
			}
			for _, cl := range r.cells {
				if c.prunedBy(&cl.ball) {
					c.countBucket(p, cl.counts, func(n *snode) bool { return n.Tier == tn && n.Region == r.name && n.Site == cl.site }, ReasonLatencySLO)
					continue
				}
				d.touched[cl] = true
				d.touchedR[r] = true
				for _, g := range cl.groups {
					if sr := c.sigOK[g.sig]; sr != "" {
						p.add(sr, len(g.nodes)-c.exclIn(g.nodes))
						continue
					}
					if !e.legacy {
						feas = d.scan(c, g, p, feas, deferScore)
						continue
					}
					for _, i := range g.nodes {
						if len(c.excl) > 0 && c.excluded(i) {
							continue
						}
						rs := c.evalRest(i)
						p.add(rs, 1)
						d.record(i, rs)
						if rs == reasonFeasible {
							feas = append(feas, cand{i, c.total(i), c.tieBreak(i)})
						}
					}
				}
			}
		}
	}
	return feas
}

// naiveInferencePass looks at every node of the snapshot, with no index,
// and sorts the feasible ones.
func (e *Engine) naiveInferencePass(d *Decision, c *evalCtx, tiers []string, p *passStat) []cand {
	var feas []cand
	for k := range d.s.ix.nodes {
		i := int32(k)
		rs := d.baseReason(i)
		if rs == "" && !slices.Contains(tiers, d.s.ix.nodes[i].Tier) {
			continue
		}
		if rs == "" {
			rs = c.evalNode(i)
			p.add(rs, 1)
		}
		d.record(i, rs)
		if rs == reasonFeasible {
			feas = append(feas, cand{i, c.total(i), c.tieBreak(i)})
		}
	}
	slices.SortFunc(feas, func(a, b cand) int {
		if d.better(a, b) {
			return -1
		}
		if d.better(b, a) {
			return 1
		}
		return 0
	})
	return feas
}

// baseReason is the pass-independent first reason of node i: not alive,
// excluded, or a tier the request does not allow; "" otherwise.
func (d *Decision) baseReason(i int32) Reason {
	n := &d.s.ix.nodes[i]
	if !n.Alive {
		return ReasonNotAlive
	}
	if d.ctxs[0].excluded(i) {
		return ReasonExcluded
	}
	if len(d.req.Tiers) > 0 && !slices.Contains(d.req.Tiers, n.Tier) {
		return ReasonTier
	}
	return ""
}

// pick takes up to need of the best candidates not already chosen,
// honouring spread. spreadShort reports that spread, not a lack of
// feasible nodes, left it short.
func (d *Decision) pick(feas []cand, need int) (picked []cand, spreadShort bool) {
	taken := slices.Grow(d.scratch.taken[:0], len(feas))[:len(feas)]
	clear(taken)
	defer func() { d.scratch.taken = taken[:0] }()
	for len(picked) < need {
		best := -1
		blocked := false
		for k, cd := range feas {
			if taken[k] {
				continue
			}
			if len(d.placed) > 0 && slices.Contains(d.placed, cd.i) {
				taken[k] = true
				continue
			}
			if d.spreadConflict(cd.i, picked) {
				blocked = true
				continue
			}
			if best < 0 || d.better(cd, feas[best]) {
				best = k
			}
		}
		if best < 0 {
			return picked, blocked
		}
		taken[best] = true
		picked = append(picked, feas[best])
	}
	return picked, false
}

func (d *Decision) addPlacement(c *evalCtx, i int32, rank int) {
	n := &d.s.ix.nodes[i]
	scores, total := c.scores(i)
	d.chosen[i] = len(d.Placements)
	d.placed = append(d.placed, i)
	d.Placements = append(d.Placements, Placement{
		Node: n.Name, NodeID: n.ID, Tier: n.Tier, Site: n.Site, Region: n.Region,
		Fabric: n.Fabric, Rack: n.Rack, Client: c.client, Rank: rank,
		Resources: c.res, Scores: scores, Total: total,
	})
}

// fallback records why a pass left replicas unplaced.
func (d *Decision) fallback(c *evalCtx, tiers []string, p *passStat, need, placed int, spreadShort bool) {
	tierName := strings.Join(tiers, "+")
	if len(d.req.Tiers) == 0 {
		tierName = "all tiers"
	}
	feasible := p.counts[reasonFeasible.stage()]
	var b strings.Builder
	dominant, dn := Reason(""), 0
	for _, r := range Reasons() {
		if st := r.stage(); st >= 0 && p.counts[st] > dn {
			dominant, dn = r, p.counts[st]
		}
	}
	if c.slo > 0 {
		meet := 0
		for st := ReasonLatencySLO.stage() + 1; st < len(p.counts); st++ {
			meet += p.counts[st]
		}
		fmt.Fprintf(&b, "%s: %d of %d nodes meet p99 %s from %s", tierName, meet, p.considered, d.req.Latency.P99, c.describeClients())
		if meet > feasible {
			fmt.Fprintf(&b, ", %d of them feasible", feasible)
		}
	} else {
		fmt.Fprintf(&b, "%s: %d of %d nodes feasible", tierName, feasible, p.considered)
	}
	if feasible == 0 && dn > 0 && (c.slo == 0 || dominant != ReasonLatencySLO) {
		fmt.Fprintf(&b, " (most rejected: %s ×%d)", dominant, dn)
	}
	if spreadShort {
		fmt.Fprintf(&b, "; spread by %s leaves room for %d", d.req.Spread, placed)
	}
	if feasible > 0 || placed > 0 {
		fmt.Fprintf(&b, "; %d placed here, %d still needed", placed, need)
	}
	fr := dominant
	if spreadShort {
		fr = ReasonSpread
	}
	d.Fallbacks = append(d.Fallbacks, Fallback{Client: c.client, Tier: tierName, Reason: fr, Message: b.String()})
}

func (c *evalCtx) describeClients() string {
	parts := make([]string, len(c.clientN))
	for k, n := range c.clientN {
		if c.s.ix.isSite(n) {
			parts[k] = "site " + n
		} else {
			parts[k] = "region " + n
		}
	}
	return joinNames(parts)
}

func (ix *index) isSite(name string) bool { return ix.sites[name] }

// domainCand is a fabric (or a whole tier, for gangs that need no common
// fabric) that can hold the gang.
type domainCand struct {
	dom     gangDomain
	key     string
	tier    string
	fabric  string
	members []cand
	scores  []Score
	total   float64
	tb      uint64
}

func domainKey(tier, fabric string) string { return tier + "/" + fabric }

// placeGang places a gang, all or nothing, on the best domain of the most
// preferred tier that has one.
func (e *Engine) placeGang(d *Decision, passes [][]string, need int) {
	c := d.ctxs[0]
	for _, tiers := range passes {
		var p passStat
		for _, t := range tiers {
			d.reached[0][t] = true
		}
		var cands []*domainCand
		var outcomes []eval
		if !e.legacy && !e.opts.Exhaustive {
			outcomes = d.scratch.outs[:0]
		}
		for _, tn := range tiers {
			for _, dom := range e.gangDomains(d, c, tn) {
				var feas []cand
				start := len(outcomes)
				fast := !e.legacy && !e.opts.Exhaustive
				if fast {
					feas, outcomes = d.scanDomain(c, dom.nodes, d.scratch.feas[:0], outcomes)
					d.scratch.feas = feas[:0]
				} else {
					for _, i := range dom.nodes {
						if len(c.excl) > 0 && c.excluded(i) {
							continue
						}
						rs := c.evalNode(i)
						outcomes = append(outcomes, eval{i, rs})
						if rs == reasonFeasible {
							feas = append(feas, cand{i, c.total(i), c.tieBreak(i)})
						}
					}
				}
				key := dom.key
				if key == "" {
					key = domainKey(tn, dom.fabric)
				}
				fit := len(feas) >= need
				d.domainFit[key] = fit
				d.domainFeasN[key] = len(feas)
				if fit {
					var dc *domainCand
					if fast {
						dc = e.scoreDomainFast(d, c, tn, key, dom, feas, need)
					} else {
						dc = e.scoreDomain(d, c, tn, dom, feas, need, false)
					}
					dc.dom = dom
					cands = append(cands, dc)
				} else {
					for k := start; k < len(outcomes); k++ {
						if outcomes[k].r == reasonFeasible {
							outcomes[k].r = ReasonGangDoesNotFit
						}
					}
				}
			}
		}
		e.recordGangPass(d, c, tiers, outcomes, &p)
		if !e.legacy && !e.opts.Exhaustive {
			d.scratch.outs = outcomes[:0]
		}
		p.addTo(&d.Metrics)
		sort.Slice(cands, func(a, b int) bool {
			x, y := cands[a], cands[b]
			if x.total != y.total {
				return x.total > y.total
			}
			if x.tb != y.tb {
				return x.tb > y.tb
			}
			return x.key < y.key
		})
		for _, dc := range cands {
			// Reserve every member on a clone: all or nothing.
			clone := d.s.Clone()
			ok := true
			for _, m := range dc.members {
				if _, err := clone.Reserve(d.s.ix.nodes[m.i].ID, c.res); err != nil {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			for rank, m := range dc.members {
				d.addPlacement(c, m.i, rank)
			}
			// Scores with their explanations, for the winner only.
			members := slices.Clone(dc.members)
			full := e.scoreDomain(d, c, dc.tier, dc.dom, members, need, true)
			d.Domain = &Domain{Tier: dc.tier, Fabric: dc.fabric, Scores: full.scores, Total: round3(dc.total)}
			d.after = clone
			return
		}
		d.gangFallback(c, tiers, &p, need)
	}
}

type gangDomain struct {
	fabric string
	nodes  []int32
	key    string    // domainKey, when precomputed
	ix     *domainIx // the fabric's index entry, nil for a whole tier
}

// gangDomains lists a tier's candidate domains: its fabrics, or, for a
// gang that needs no common fabric, the whole tier as one.
func (e *Engine) gangDomains(d *Decision, c *evalCtx, tn string) []gangDomain {
	ix := d.s.ix
	if e.opts.Exhaustive {
		// No index: group every node of the tier by fabric.
		by := map[string][]int32{}
		for k := range ix.nodes {
			n := &ix.nodes[k]
			if n.Tier != tn || !n.Alive {
				continue
			}
			f := ""
			if c.gang {
				f = n.Fabric
			}
			by[f] = append(by[f], int32(k))
		}
		var out []gangDomain
		for _, f := range slices.Sorted(mapsKeys(by)) {
			if c.gang && f == "" {
				continue
			}
			out = append(out, gangDomain{fabric: f, nodes: by[f]})
		}
		return out
	}
	t := ix.tiers[tn]
	if t == nil {
		return nil
	}
	if !c.gang {
		var all []int32
		for _, r := range t.regions {
			for _, cl := range r.cells {
				for _, g := range cl.groups {
					all = append(all, g.nodes...)
				}
			}
		}
		slices.Sort(all)
		return []gangDomain{{nodes: all}}
	}
	out := make([]gangDomain, len(t.domains))
	for k, dm := range t.domains {
		out[k] = gangDomain{fabric: dm.fabric, nodes: dm.nodes, key: dm.key, ix: dm}
	}
	return out
}

func mapsKeys[M ~map[K]V, K comparable, V any](m M) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// recordGangPass records every node's outcome in a gang pass and counts
// them for the fallback message.
func (e *Engine) recordGangPass(d *Decision, c *evalCtx, tiers []string, outcomes []eval, p *passStat) {
	ix := d.s.ix
	for _, o := range outcomes {
		p.add(o.r, 1)
		d.record(o.i, o.r)
	}
	if e.opts.Exhaustive {
		// Everything else the naive pass looked at: dead, excluded, other
		// tiers, and nodes on no fabric.
		for k := range ix.nodes {
			i := int32(k)
			n := &ix.nodes[i]
			rs := d.baseReason(i)
			if rs == "" && !slices.Contains(tiers, n.Tier) {
				continue
			}
			if rs == "" {
				if !c.gang || n.Fabric != "" {
					continue // a domain member, recorded above
				}
				rs = c.evalNode(i)
				p.add(rs, 1)
			}
			d.record(i, rs)
		}
		return
	}
	for _, tn := range tiers {
		if t := ix.tiers[tn]; t != nil && c.gang {
			// Nodes on no fabric.
			for _, sc := range t.counts {
				n := sc.plain
				for _, x := range c.excl {
					if xn := &ix.nodes[x]; xn.Tier == tn && xn.sig == sc.sig && xn.Fabric == "" {
						n--
					}
				}
				if r := c.sigOK[sc.sig]; r != "" {
					p.add(r, n)
				} else {
					p.add(ReasonNoFabric, n)
				}
			}
		}
	}
}

// domainOf is the gang domain key of node i.
func (d *Decision) domainOf(i int32) string {
	n := &d.s.ix.nodes[i]
	if d.ctxs[0].gang {
		return domainKey(n.Tier, n.Fabric)
	}
	return domainKey(n.Tier, "")
}

// scoreDomain picks a domain's members and scores it: data gravity (time
// to bring the data onto the fabric; data anywhere on it costs nothing),
// packing (how full the fabric is after the gang: fullest first), and the
// members' own scores.
func (e *Engine) scoreDomain(d *Decision, c *evalCtx, tier string, dom gangDomain, feas []cand, need int, details bool) *domainCand {
	ix := d.s.ix
	// Members: keep the gang on as few racks as possible, then best score.
	rackN := map[string]int{}
	for _, f := range feas {
		if r := ix.nodes[f.i].Rack; r != "" {
			rackN[r]++
		}
	}
	type keyed struct {
		cand
		racked int
		rack   string
	}
	ks := make([]keyed, len(feas))
	for k, f := range feas {
		r := ix.nodes[f.i].Rack
		ks[k] = keyed{f, rackN[r], r}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if a.racked != b.racked {
			return b.racked - a.racked
		}
		if a.rack != b.rack {
			return strings.Compare(a.rack, b.rack)
		}
		if d.better(a.cand, b.cand) {
			return -1
		}
		if d.better(b.cand, a.cand) {
			return 1
		}
		return 0
	})
	for k := range feas {
		feas[k] = ks[k].cand
	}
	dc := &domainCand{key: domainKey(tier, dom.fabric), tier: tier, fabric: dom.fabric, members: slices.Clone(feas[:need])}
	dc.tb = tieBreak(c.req.Seed, dc.key)
	o := e.opts
	wsum, total := 0.0, 0.0
	add := func(name string, w, v float64, detail func() string) {
		if details {
			dc.scores = append(dc.scores, Score{Name: name, Value: round3(v), Weight: w, Detail: detail()})
		}
		wsum += w
		total += w * v
	}
	if len(c.req.Data) > 0 && o.DataWeight > 0 && c.gang {
		secs, bytes := d.fabricMove(dom)
		add("data", o.DataWeight, o.DataTimeScale.Seconds()/(o.DataTimeScale.Seconds()+secs),
			func() string {
				return fmt.Sprintf("%s to move onto the fabric, %s", policy.FormatBytes(bytes), fmtSeconds(secs))
			})
	}
	if o.PackWeight > 0 {
		used, all := 0.0, 0.0
		for _, i := range dom.nodes {
			n := &ix.nodes[i]
			f := d.s.freeOf(i)
			if c.res.GPUs > 0 {
				all += float64(popcount(n.healthy))
				used += float64(popcount(n.healthy) - popcount(n.healthy&f.gpus))
			} else {
				all += float64(n.CPU)
				used += float64(n.CPU - f.cpu)
			}
		}
		add := add
		if c.res.GPUs > 0 {
			used += float64(need * c.res.GPUs)
		} else {
			used += float64(int64(need) * c.res.CPU)
		}
		full := 0.0
		if all > 0 {
			full = clamp01(used / all)
		}
		add("fabric_fill", o.PackWeight, full, func() string {
			return fmt.Sprintf("%.0f%% of the domain in use after the gang", 100*full)
		})
	}
	mean := 0.0
	for _, m := range dc.members {
		mean += m.total
	}
	mean /= float64(len(dc.members))
	add("members", 1, mean, func() string {
		return fmt.Sprintf("mean member score over %d members", len(dc.members))
	})
	if wsum > 0 {
		dc.total = total / wsum
	}
	if math.IsNaN(dc.total) {
		dc.total = 0
	}
	return dc
}

// fabricMove is the time and bytes to bring the request's data onto a
// fabric.
func (d *Decision) fabricMove(dom gangDomain) (float64, int64) {
	ix := d.s.ix
	if len(dom.nodes) == 0 {
		return 0, 0
	}
	n0 := &ix.nodes[dom.nodes[0]]
	secs, bytes := 0.0, int64(0)
	for _, r := range d.req.Data {
		h := ix.holders[r.key()]
		if h != nil {
			if _, ok := h.fabrics[dom.fabric]; ok {
				continue
			}
		}
		secs += float64(r.Bytes) / bandwidthTo(h, &ix.bw, "", n0.Site, n0.Region)
		bytes += r.Bytes
	}
	return secs, bytes
}

func popcount(x uint64) int { return bits.OnesCount64(x) }

func (d *Decision) gangFallback(c *evalCtx, tiers []string, p *passStat, need int) {
	tierName := strings.Join(tiers, "+")
	if len(d.req.Tiers) == 0 {
		tierName = "all tiers"
	}
	best, bestKey := 0, ""
	for key, k := range d.domainFeasN {
		tn, _, _ := strings.Cut(key, "/")
		if !slices.Contains(tiers, tn) {
			continue
		}
		if k > best || (k == best && (bestKey == "" || key < bestKey)) {
			best, bestKey = k, key
		}
	}
	what := "fabric"
	if !c.gang {
		what = "tier"
	}
	msg := fmt.Sprintf("%s: no %s holds %d nodes × %d GPUs", tierName, what, need, c.res.GPUs)
	if bestKey != "" && best > 0 {
		_, name, _ := strings.Cut(bestKey, "/")
		if !c.gang {
			name = tierName
		}
		msg += fmt.Sprintf("; best %s %s has %d that fit", what, name, best)
	}
	dominant, dn := Reason(""), 0
	for _, r := range Reasons() {
		if st := r.stage(); st >= 0 && r != ReasonGangDoesNotFit && p.counts[st] > dn {
			dominant, dn = r, p.counts[st]
		}
	}
	if dn > 0 {
		msg += fmt.Sprintf(" (most rejected: %s ×%d)", dominant, dn)
	}
	d.Fallbacks = append(d.Fallbacks, Fallback{Tier: tierName, Reason: ReasonGangDoesNotFit, Message: msg})
}
