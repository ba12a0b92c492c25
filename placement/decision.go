package placement

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Score is one scorer's part of a node's score.
type Score struct {
	// Name is the scorer ("latency", "headroom", "binpack", "data",
	// "affinity `expr`", and for gang domains "fabric_fill", "members").
	Name string `json:"name"`
	// Value is the normalised score in [0, 1].
	Value float64 `json:"value"`
	// Weight is the scorer's weight.
	Weight float64 `json:"weight"`
	// Detail is the raw measure behind the value ("RTT 3.1ms from site a").
	Detail string `json:"detail,omitempty"`
}

// Placement is one chosen node.
type Placement struct {
	Node   string `json:"node"`
	NodeID string `json:"node_id"`
	Tier   string `json:"tier"`
	Site   string `json:"site"`
	Region string `json:"region"`
	Fabric string `json:"fabric,omitempty"`
	Rack   string `json:"rack,omitempty"`
	// Client is the client site this replica serves (PerClientSite).
	Client string `json:"client,omitempty"`
	// Rank is the member's rank in a gang (0 is the leader); 0 for
	// inference.
	Rank int `json:"rank"`
	// Resources is what the placement takes on the node.
	Resources Resources `json:"resources"`
	// Scores is the breakdown of Total.
	Scores []Score `json:"scores"`
	// Total is the weighted mean of Scores, in [0, 1].
	Total float64 `json:"total"`
}

// Fallback says why a tier could not hold everything and the engine moved
// on to the next one.
type Fallback struct {
	// Client is the client site of a PerClientSite group, else "".
	Client string `json:"client,omitempty"`
	// Tier is the tier that fell short.
	Tier string `json:"tier"`
	// Reason is the main reason it fell short.
	Reason Reason `json:"reason"`
	// Message says it for people: "edge: 0 of 4 nodes meet p99 20ms from
	// site edge-b".
	Message string `json:"message"`
}

// Domain is the fabric a gang was placed on and why.
type Domain struct {
	Tier   string  `json:"tier"`
	Fabric string  `json:"fabric,omitempty"`
	Scores []Score `json:"scores"`
	Total  float64 `json:"total"`
}

// Metrics is what one decision cost, after Nomad's AllocMetric: how many
// nodes the filters looked at, what they filtered, how much the node
// classes saved and how long it took. Only Duration varies between two
// runs of the same decision.
type Metrics struct {
	// NodesEvaluated is Decision.Evaluated: nodes the filters looked at
	// one by one, once per client group and pass.
	NodesEvaluated int `json:"nodes_evaluated"`
	// Filtered counts, per Reason, the nodes the passes' filters rejected,
	// one by one or in bulk by the index (a node counts once per pass
	// that considered it). Reasons decided outside the passes (not alive,
	// excluded, tier) are in Decision.Rejected only.
	Filtered map[Reason]int `json:"filtered,omitempty"`
	// Feasible counts the nodes that passed every filter, per pass.
	Feasible int `json:"feasible"`
	// Scored counts the feasible nodes that were scored: fewer than
	// Feasible under Options.MaxCandidates.
	Scored int `json:"scored"`
	// Classes is the number of node classes in the snapshot.
	Classes int `json:"classes"`
	// ClassEvals counts the constraint and affinity evaluations made once
	// for a whole class; nodes of a class already answered cost none.
	ClassEvals int `json:"class_evals"`
	// Duration is the wall-clock time Place took.
	Duration time.Duration `json:"duration_ns"`
}

// Rejection is why one node was not chosen.
type Rejection struct {
	Node   string `json:"node"`
	Reason Reason `json:"reason"`
	Detail string `json:"detail"`
}

// Decision is the engine's answer: what was placed where and why, and why
// every other node was not used. Its methods only read it; it is safe for
// concurrent use.
type Decision struct {
	Kind Kind   `json:"kind"`
	Key  string `json:"key,omitempty"`
	// Feasible is true when every wanted placement was made. A training
	// gang is all or nothing; inference may be partly placed.
	Feasible bool `json:"feasible"`
	// Wanted is the number of placements asked for.
	Wanted int `json:"wanted"`
	// Tiers lists the tiers the placements use, in preference order.
	Tiers []string `json:"tiers,omitempty"`
	// Placements are the chosen nodes in the order they were made: by
	// client group, then tier preference, then score (gang members by
	// rank).
	Placements []Placement `json:"placements"`
	// Domain is the gang's fabric (Training only).
	Domain *Domain `json:"domain,omitempty"`
	// Fallbacks say why preferred tiers were passed over, in order.
	Fallbacks []Fallback `json:"fallbacks,omitempty"`
	// Nodes is the number of nodes in the snapshot.
	Nodes int `json:"nodes"`
	// Evaluated counts the nodes the filters looked at one by one (a node
	// looked at for two client groups counts twice); the index ruled the
	// others out in bulk.
	Evaluated int `json:"evaluated"`
	// Rejected counts the other nodes by the Reason they were not chosen.
	// The counts and len(Placements) add up to Nodes.
	Rejected map[Reason]int `json:"rejected"`
	// Metrics says what the decision cost. It is for logs, benchmarks and
	// tests, not part of the decision's JSON (its wire form in package api
	// has no such field yet).
	Metrics Metrics `json:"-"`

	s           *Snapshot
	req         *Request
	opts        *Options
	ctxs        []*evalCtx
	reached     []map[string]bool // per group: tiers a pass looked at
	chosen      map[int32]int     // node → index in Placements
	placed      []int32           // chosen nodes, in placement order
	scratch     *scratch          // while placing
	reasons     []Reason          // Exhaustive: every node's reason
	bulk        *[13]int          // non-nil: outcomes counted, not recorded
	bulkFeas    int               // with bulk: feasible outcomes
	keyFeas     []int32           // with bulk and spread: feasible outcomes per spread key
	legacy      bool
	streamC     int // > 0: a pass keeps only its best streamC candidates
	touched     map[*cell]bool
	touchedR    map[*regionIx]bool
	domainFit   map[string]bool
	domainFeasN map[string]int
	after       *Snapshot
}

// finalize turns "feasible but not chosen" into a selection reason.
func (d *Decision) finalize(i int32, r Reason) Reason {
	if r != reasonFeasible {
		return r
	}
	if d.req.Kind == Inference && d.spreadConflict(i, nil) {
		return ReasonSpread
	}
	return ReasonNotSelected
}

func (d *Decision) requested(tier string) bool {
	return len(d.req.Tiers) == 0 || slices.Contains(d.req.Tiers, tier)
}

func (d *Decision) reachedAny(tier string) bool {
	for _, r := range d.reached {
		if r[tier] {
			return true
		}
	}
	return false
}

// account fills Rejected: per node where reasons were kept for every
// node; otherwise from the nodes no pass looked at (counted by tier,
// region and cell from the index) and the evaluations of those it did.
func (d *Decision) account() {
	if d.reasons != nil {
		d.accountEachNode()
		return
	}
	counts := map[Reason]int{}
	d.accountUnvisited(counts)
	evals := d.mergedEvals()
	if d.legacy {
		for _, e := range evals {
			if _, ok := d.chosen[e.i]; ok {
				continue
			}
			counts[d.finalize(e.i, e.r)]++
		}
		d.setCounts(counts)
		return
	}
	if d.bulk != nil {
		d.accountBulk(counts)
	}
	d.accountEvals(counts, evals)
	d.setCounts(counts)
}

// accountEachNode fills Rejected from the reason kept for every node.
func (d *Decision) accountEachNode() {
	ix := d.s.ix
	counts := map[Reason]int{}
	for k := range ix.nodes {
		i := int32(k)
		if _, ok := d.chosen[i]; ok {
			d.reasons[i] = ""
			continue
		}
		r := d.reasons[i]
		if r == "" {
			if r = d.baseReason(i); r == "" {
				r = ReasonTierNotReached
			}
		}
		r = d.finalize(i, r)
		d.reasons[i] = r
		counts[r]++
	}
	d.setCounts(counts)
}

// accountUnvisited counts the nodes no pass looked at: dead and excluded
// ones, tiers not asked for or not reached, and regions and cells the
// passes skipped whole, by the index's per-signature counts.
func (d *Decision) accountUnvisited(counts map[Reason]int) {
	ix := d.s.ix
	c0 := d.ctxs[0]
	counts[ReasonNotAlive] = len(ix.dead)
	counts[ReasonExcluded] = len(c0.excl)
	exclWhere := func(f func(n *snode) bool) int {
		k := 0
		for _, x := range c0.excl {
			if f(&ix.nodes[x]) {
				k++
			}
		}
		return k
	}
	static := func(scs []sigCount, fabricToo bool, f func(n *snode) bool, tail Reason) {
		for _, sc := range scs {
			n := sc.plain
			if fabricToo {
				n += sc.fabric
			}
			if len(c0.excl) > 0 {
				n -= exclWhere(func(x *snode) bool {
					return x.sig == sc.sig && (fabricToo || x.Fabric == "") && f(x)
				})
			}
			if r := c0.sigOK[sc.sig]; r != "" {
				counts[r] += n
			} else {
				counts[tail] += n
			}
		}
	}
	for _, tn := range tierOrder {
		t := ix.tiers[tn]
		if t == nil {
			continue
		}
		inTier := func(n *snode) bool { return n.Tier == tn }
		switch {
		case !d.requested(tn):
			counts[ReasonTier] += t.alive - exclWhere(inTier)
		case !d.reachedAny(tn):
			counts[ReasonTierNotReached] += t.alive - exclWhere(inTier)
		case d.req.Kind == Training:
			if c0.gang {
				static(t.counts, false, inTier, ReasonNoFabric)
			}
		default:
			for _, r := range t.regions {
				inRegion := func(n *snode) bool { return n.Tier == tn && n.Region == r.name }
				if !d.touchedR[r] {
					static(r.counts, true, inRegion, ReasonLatencySLO)
					continue
				}
				for _, cl := range r.cells {
					inCell := func(n *snode) bool { return n.Tier == tn && n.Region == r.name && n.Site == cl.site }
					if !d.touched[cl] {
						static(cl.counts, true, inCell, ReasonLatencySLO)
						continue
					}
					for _, g := range cl.groups {
						if sr := c0.sigOK[g.sig]; sr != "" {
							counts[sr] += len(g.nodes) - c0.exclIn(g.nodes)
						}
					}
				}
			}
		}
	}
}

// mergedEvals returns the passes' evaluations, one per node: a node
// looked at for several client groups keeps the furthest it came.
func (d *Decision) mergedEvals() []eval {
	evals := d.scratch.evals
	if len(d.ctxs) <= 1 {
		return evals
	}
	evals = slices.Clone(evals)
	slices.SortStableFunc(evals, func(a, b eval) int { return int(a.i) - int(b.i) })
	out := evals[:0]
	for _, e := range evals {
		if n := len(out); n > 0 && out[n-1].i == e.i {
			if e.r.stage() > out[n-1].r.stage() {
				out[n-1].r = e.r
			}
			continue
		}
		out = append(out, e)
	}
	return out
}

// accountBulk counts what the one client group's pass tallied in bulk:
// every node was evaluated at most once and every placed node was
// feasible where it was placed.
func (d *Decision) accountBulk(counts map[Reason]int) {
	for st, n := range d.bulk {
		counts[stageReason[st]] += n
	}
	spread := 0
	if d.keyFeas != nil {
		for _, i := range d.placed {
			k := d.hotSpreadKey(i)
			spread += int(d.keyFeas[k]) - 1
			d.keyFeas[k] = 1 // the other placed nodes on k are counted once
		}
	}
	counts[ReasonSpread] += spread
	counts[ReasonNotSelected] += d.bulkFeas - len(d.placed) - spread
}

// accountEvals counts the evaluated nodes not placed: by the stage that
// turned them down, or, if feasible, as spread conflicts or not selected.
func (d *Decision) accountEvals(counts map[Reason]int, evals []eval) {
	chosen := make([]uint64, (len(d.s.ix.nodes)+63)/64)
	for _, i := range d.placed {
		chosen[i/64] |= 1 << (i % 64)
	}
	var byStage [13]int
	spread, notSel := 0, 0
	for _, e := range evals {
		if chosen[e.i/64]&(1<<(e.i%64)) != 0 {
			continue
		}
		switch st := e.r.stage(); {
		case e.r != reasonFeasible && stageReason[st] != "":
			byStage[st]++
		case e.r != reasonFeasible:
			counts[e.r]++
		case d.req.Kind == Inference && d.spreadConflict(e.i, nil):
			spread++
		default:
			notSel++
		}
	}
	for st, n := range byStage {
		counts[stageReason[st]] += n
	}
	counts[ReasonSpread] += spread
	counts[ReasonNotSelected] += notSel
}

func (d *Decision) setCounts(counts map[Reason]int) {
	d.Rejected = map[Reason]int{}
	for r, n := range counts {
		if n != 0 {
			d.Rejected[r] = n
		}
	}
}

// reasonOf computes node i's reason lazily and the client group it comes
// from (-1 when it does not depend on one). Chosen nodes give "".
func (d *Decision) reasonOf(i int32) (Reason, int) {
	if _, ok := d.chosen[i]; ok {
		return "", -1
	}
	lazy, g := d.lazyReason(i)
	if d.reasons != nil {
		// Exhaustive: the reason recorded while placing is authoritative;
		// the lazy one only names the client group for the explanation.
		return d.reasons[i], g
	}
	return lazy, g
}

// lazyReason recomputes node i's reason from the decision's passes.
func (d *Decision) lazyReason(i int32) (Reason, int) {
	if r := d.baseReason(i); r != "" {
		return r, -1
	}
	best, bg := ReasonTierNotReached, -1
	for g, c := range d.ctxs {
		if !d.reached[g][d.s.ix.nodes[i].Tier] {
			continue
		}
		if r := d.groupReason(c.fork(), i); r.stage() > best.stage() {
			best, bg = r, g
		}
	}
	return d.finalize(i, best), bg
}

// groupReason is node i's outcome for one client group, in a tier that
// group reached.
func (d *Decision) groupReason(c *evalCtx, i int32) Reason {
	r := c.evalNode(i)
	if r == reasonFeasible && d.req.Kind == Training && !d.domainFit[d.domainOf(i)] {
		return ReasonGangDoesNotFit
	}
	return r
}

// Rejection returns why the named node (name or ID) was not chosen; ok is
// false for a chosen node or a name the snapshot lacks.
func (d *Decision) Rejection(node string) (Rejection, bool) {
	i, ok := d.s.lookup(node)
	if !ok {
		return Rejection{}, false
	}
	r, g := d.reasonOf(i)
	if r == "" {
		return Rejection{}, false
	}
	return Rejection{Node: d.s.ix.nodes[i].Name, Reason: r, Detail: d.detail(i, r, g)}, true
}

// Rejections returns every node that was not chosen with its reason, in
// the order the nodes were added. It costs a pass over every node; the
// counts are in Rejected already.
func (d *Decision) Rejections() []Rejection {
	out := make([]Rejection, 0, len(d.s.ix.nodes)-len(d.Placements))
	for k := range d.s.ix.nodes {
		if r, ok := d.Rejection(d.s.ix.nodes[k].ID); ok {
			out = append(out, r)
		}
	}
	return out
}

// detail says why, with numbers.
func (d *Decision) detail(i int32, r Reason, g int) string {
	n := &d.s.ix.nodes[i]
	c := d.ctxs[0].fork()
	if g >= 0 {
		c = d.ctxs[g].fork()
	}
	f := d.s.freeOf(i)
	var s string
	switch r {
	case ReasonNotAlive:
		s = "the mesh does not see the node alive"
	case ReasonExcluded:
		s = "the request excludes it"
	case ReasonTier:
		s = fmt.Sprintf("tier %s is not among the request's tiers (%s)", n.Tier, joinNames(d.req.Tiers))
	case ReasonTierNotReached:
		s = fmt.Sprintf("tier %s was not needed: more preferred tiers held every placement", n.Tier)
	case ReasonNoGPU:
		s = fmt.Sprintf("needs %d GPUs, the node has none", c.res.GPUs)
	case ReasonGPUModel:
		var ms []string
		for _, g := range n.GPUs {
			if !slices.Contains(ms, g.Model) {
				ms = append(ms, g.Model)
			}
		}
		s = fmt.Sprintf("no GPU matches %q (has %s)", c.res.GPUModel, joinNames(ms))
	case ReasonNoFabric:
		s = "on no RDMA fabric; the gang needs all members on one"
	case ReasonGangDoesNotFit:
		s = fmt.Sprintf("feasible, but %s has only %d feasible nodes; the gang needs %d", d.domainName(i), d.domainFeasN[d.domainOf(i)], d.Wanted)
	case ReasonSpread:
		s = d.spreadDetail(i)
	case ReasonNotSelected:
		s = d.notSelectedDetail(c, i)
	default:
		for _, fl := range c.filters {
			if fl.reason() == r {
				s = fl.describe(c, i, f)
			}
		}
	}
	if c.client != "" && g >= 0 {
		s = "for client site " + c.client + ": " + s
	}
	return s
}

func (d *Decision) domainName(i int32) string {
	n := &d.s.ix.nodes[i]
	if d.ctxs[0].gang {
		return "fabric " + n.Fabric
	}
	return "tier " + n.Tier
}

func (d *Decision) spreadDetail(i int32) string {
	n := &d.s.ix.nodes[i]
	for _, p := range d.Placements {
		if d.req.Spread == SpreadSite && p.Site == n.Site {
			return fmt.Sprintf("feasible, but site %s already holds a replica on %s (spread: site)", n.Site, p.Node)
		}
		if d.req.Spread == SpreadRegion && p.Region == n.Region {
			return fmt.Sprintf("feasible, but region %s already holds a replica on %s (spread: region)", n.Region, p.Node)
		}
	}
	return "feasible, but spread rules it out"
}

func (d *Decision) notSelectedDetail(c *evalCtx, i int32) string {
	total := round3(c.total(i))
	if d.req.Kind == Training {
		n := &d.s.ix.nodes[i]
		if d.Domain != nil && d.domainOf(i) == domainKey(d.Domain.Tier, d.Domain.Fabric) {
			return fmt.Sprintf("feasible (score %.3f), but not among the %d members chosen on %s", total, len(d.Placements), d.domainName(i))
		}
		if d.Domain != nil {
			return fmt.Sprintf("feasible, but the gang went to %s (domain score %.3f)", d.domainName(d.chosenIdx(0)), d.Domain.Total)
		}
		return fmt.Sprintf("feasible on %s, not chosen", n.Fabric)
	}
	low := -1.0
	for _, p := range d.Placements {
		if p.Client == c.client && (low < 0 || p.Total < low) {
			low = p.Total
		}
	}
	if low < 0 {
		return fmt.Sprintf("feasible (score %.3f), not chosen", total)
	}
	return fmt.Sprintf("feasible, but scored %.3f; the chosen scored %.3f or more", total, low)
}

func (d *Decision) chosenIdx(k int) int32 {
	for i, p := range d.chosen {
		if p == k {
			return i
		}
	}
	return 0
}

// Explain answers "why (not) node X" in one paragraph.
func (d *Decision) Explain(node string) string {
	i, ok := d.s.lookup(node)
	if !ok {
		return fmt.Sprintf("node %s: not in the snapshot\n", node)
	}
	n := &d.s.ix.nodes[i]
	head := fmt.Sprintf("node %s (%s, site %s, region %s", n.Name, n.Tier, n.Site, n.Region)
	if n.Fabric != "" {
		head += ", fabric " + n.Fabric
	}
	head += ")"
	if k, ok := d.chosen[i]; ok {
		p := d.Placements[k]
		var b strings.Builder
		fmt.Fprintf(&b, "%s: chosen", head)
		if p.Client != "" {
			fmt.Fprintf(&b, " for client site %s", p.Client)
		}
		if d.Kind == Training {
			fmt.Fprintf(&b, " as gang rank %d", p.Rank)
		}
		fmt.Fprintf(&b, ", score %.3f\n", p.Total)
		writeScores(&b, "  ", p.Scores)
		return b.String()
	}
	r, _ := d.Rejection(node)
	return fmt.Sprintf("%s: not chosen: %s: %s\n", head, r.Reason, r.Detail)
}

func writeScores(b *strings.Builder, indent string, scores []Score) {
	for _, s := range scores {
		fmt.Fprintf(b, "%s%-11s %.3f × %g", indent, s.Name, s.Value, s.Weight)
		if s.Detail != "" {
			fmt.Fprintf(b, "  (%s)", s.Detail)
		}
		b.WriteByte('\n')
	}
}

// String renders the decision for people: what was placed where, the
// fallbacks, and the rejected nodes counted by reason.
func (d *Decision) String() string {
	var b strings.Builder
	name := d.Key
	if name == "" {
		name = "(unnamed)"
	}
	state := "feasible"
	if !d.Feasible {
		state = "NOT feasible"
	}
	fmt.Fprintf(&b, "%s %s: %s, %d of %d placed", d.Kind, name, state, len(d.Placements), d.Wanted)
	if len(d.Tiers) > 0 {
		fmt.Fprintf(&b, " on %s", joinNames(d.Tiers))
	}
	b.WriteByte('\n')
	if d.Domain != nil {
		fmt.Fprintf(&b, "domain: %s fabric %s, score %.3f\n", d.Domain.Tier, d.Domain.Fabric, d.Domain.Total)
		writeScores(&b, "  ", d.Domain.Scores)
	}
	for k, p := range d.Placements {
		fmt.Fprintf(&b, "%d. %s (%s, site %s", k+1, p.Node, p.Tier, p.Site)
		if p.Fabric != "" {
			fmt.Fprintf(&b, ", fabric %s", p.Fabric)
		}
		b.WriteByte(')')
		if p.Client != "" {
			fmt.Fprintf(&b, " for client site %s", p.Client)
		}
		if d.Kind == Training {
			fmt.Fprintf(&b, " rank %d", p.Rank)
		}
		fmt.Fprintf(&b, ", score %.3f\n", p.Total)
		writeScores(&b, "   ", p.Scores)
	}
	if len(d.Fallbacks) > 0 {
		b.WriteString("fallbacks:\n")
		for _, f := range d.Fallbacks {
			fmt.Fprintf(&b, "  %s\n", f.Message)
		}
	}
	total := 0
	for _, n := range d.Rejected {
		total += n
	}
	fmt.Fprintf(&b, "rejected: %d of %d nodes (%d evaluated one by one)\n", total, d.Nodes, d.Evaluated)
	for _, r := range Reasons() {
		if n := d.Rejected[r]; n > 0 {
			fmt.Fprintf(&b, "  %-20s %d\n", r, n)
		}
	}
	return b.String()
}

// Apply returns a clone of the decision's snapshot with every placement
// reserved, so the next request can be placed around this one. It is all
// or nothing: on a *Refusal nothing is returned.
func (d *Decision) Apply() (*Snapshot, error) {
	if d.after != nil {
		return d.after.Clone(), nil
	}
	c := d.s.Clone()
	for _, p := range d.Placements {
		if _, err := c.Reserve(p.NodeID, p.Resources); err != nil {
			return nil, fmt.Errorf("placement: applying %s: %w", p.Node, err)
		}
	}
	return c, nil
}
