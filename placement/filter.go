package placement

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/policy"
)

// evalCtx is what the filters and scorers of one pass see: the snapshot,
// the request and one client group.
type evalCtx struct {
	s       *Snapshot
	req     *Request
	opts    *Options
	res     Resources // per replica or gang member
	sigOK   []Reason  // per GPU signature: "" when it can serve res
	modelOK []bool    // per GPU model: matches res.GPUModel
	gang    bool      // a same-fabric gang: nodes need a fabric
	excl    []int32   // alive excluded nodes

	group   int
	client  string   // the client site of a PerClientSite group, else ""
	clientN []string // client names
	clientC []*coordinate.Coordinate
	clientS []int32 // per client: its site's dense ID, or -1 for a region
	slo     float64 // seconds; 0 for no SLO

	filters []filter
	scorers []scorer
	wsum    float64
	invW    float64     // 1/wsum when that is exact (wsum a power of two), else 0
	cc      *classCache // answers per node class; nil: per node

	refs []dataRef
	// Caches for the node being scored: the scorers run right after the
	// filters on the same node, and consecutive nodes share a site.
	lastRTT  int32 // node whose worst RTT is in rtt, -1 for none
	rtt      float64
	rttFrom  string
	bwSite   string
	bwFabric string
	bwValid  bool
}

// fork returns a copy with its own caches, so that a Decision's methods
// can evaluate nodes concurrently.
func (c *evalCtx) fork() *evalCtx {
	cp := *c
	cp.refs = append([]dataRef(nil), c.refs...)
	cp.lastRTT, cp.bwValid = -1, false
	return &cp
}

// dataRef is a request's data with its holders resolved.
type dataRef struct {
	h     *holding
	bytes float64
	bw    float64 // cached bandwidth to bwSite/bwFabric
}

// filter is one feasibility check of the pipeline, after the static
// checks the index answers (liveness, exclusion, tier, GPU model, fabric).
type filter interface {
	reason() Reason
	// feasible reports whether node i passes, given its free resources.
	feasible(c *evalCtx, i int32, f freeState) bool
	// describe says why node i fails, for explanations.
	describe(c *evalCtx, i int32, f freeState) string
}

// scorer rates a feasible node in [0, 1].
type scorer interface {
	name() string
	weight() float64
	score(c *evalCtx, i int32, f freeState) float64
	// describe gives the raw measure behind the score, for explanations.
	describe(c *evalCtx, i int32, f freeState) string
}

var (
	_ filter = latencyFilter{}
	_ filter = cpuFilter{}
	_ filter = memoryFilter{}
	_ filter = gpuFilter{}
	_ filter = constraintFilter{}
	_ scorer = latencyScorer{}
	_ scorer = headroomScorer{}
	_ scorer = dataScorer{}
	_ scorer = affinityScorer{}
)

func (c *evalCtx) excluded(i int32) bool {
	for _, x := range c.excl {
		if x == i {
			return true
		}
	}
	return false
}

// staticReason is the first index-answerable check node i fails in this
// pass (GPU signature, fabric), or "".
func (c *evalCtx) staticReason(i int32) Reason {
	n := &c.s.ix.nodes[i]
	if r := c.sigOK[n.sig]; r != "" {
		return r
	}
	if c.gang && n.Fabric == "" {
		return ReasonNoFabric
	}
	return ""
}

// evalRest runs the filters after the static checks and returns the first
// failing reason, or reasonFeasible.
func (c *evalCtx) evalRest(i int32) Reason {
	f := c.s.freeOf(i)
	for _, fl := range c.filters {
		if !fl.feasible(c, i, f) {
			return fl.reason()
		}
	}
	return reasonFeasible
}

// evalNode runs every per-pass check on node i (alive, not excluded, in
// the pass's tier).
func (c *evalCtx) evalNode(i int32) Reason {
	if r := c.staticReason(i); r != "" {
		return r
	}
	return c.evalRest(i)
}

// total is node i's weighted score.
func (c *evalCtx) total(i int32) float64 {
	if c.wsum == 0 {
		return 0
	}
	f := c.s.freeOf(i)
	t := 0.0
	for _, sc := range c.scorers {
		t += sc.weight() * sc.score(c, i, f)
	}
	return t / c.wsum
}

// scores is node i's score breakdown.
func (c *evalCtx) scores(i int32) ([]Score, float64) {
	f := c.s.freeOf(i)
	out := make([]Score, 0, len(c.scorers))
	for _, sc := range c.scorers {
		out = append(out, Score{Name: sc.name(), Value: round3(sc.score(c, i, f)), Weight: sc.weight(), Detail: sc.describe(c, i, f)})
	}
	return out, round3(c.total(i))
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// view builds the CEL view of node i.
func (c *evalCtx) view(i int32, f freeState) *policy.Node {
	n := &c.s.ix.nodes[i]
	v := n.view
	v.FreeCPU, v.FreeMemory = f.cpu, f.mem
	if f.gpus != n.free.gpus {
		v.GPUs = make([]policy.GPU, len(n.view.GPUs))
		copy(v.GPUs, n.view.GPUs)
		for j := range v.GPUs {
			v.GPUs[j].Free = f.gpus&(1<<j) != 0
		}
	}
	if len(c.clientN) > 0 && n.Coord != nil {
		v.RTT = make(map[string]float64, len(c.clientN))
		for k, name := range c.clientN {
			v.RTT[name] = c.clientRTT(k, i) * 1e3
		}
	}
	return &v
}

// worstRTT is the largest predicted RTT from the group's clients to node i
// in seconds, and the client it is from; +Inf without a coordinate.
func (c *evalCtx) worstRTT(i int32) (float64, string) {
	if c.lastRTT == i {
		return c.rtt, c.rttFrom
	}
	n := c.s.ix.nodes[i].Coord
	if n == nil {
		return math.Inf(1), ""
	}
	worst, who := 0.0, ""
	for k := range c.clientC {
		if d := c.clientRTT(k, i); d > worst || who == "" {
			worst, who = d, c.clientN[k]
		}
	}
	c.lastRTT, c.rtt, c.rttFrom = i, worst, who
	return worst, who
}

// clientRTT is the predicted RTT in seconds from client k to node i,
// which has a coordinate (see clientRTT in snapshot.go).
func (c *evalCtx) clientRTT(k int, i int32) float64 {
	return clientRTT(c.clientC[k], c.clientS[k], c.s.ix.nodes[i].Coord, c.s.ix.siteOf[i])
}

// freeGPUs counts node i's free, healthy GPUs that match res.
func (c *evalCtx) freeGPUs(i int32, f freeState) int {
	n := &c.s.ix.nodes[i]
	avail := n.healthy & f.gpus
	k := 0
	for j := range n.GPUs {
		if avail&(1<<j) != 0 && c.modelOK[n.modelIDs[j]] && n.GPUs[j].Memory >= c.res.GPUMemory {
			k++
		}
	}
	return k
}

type latencyFilter struct{}

func (latencyFilter) reason() Reason { return ReasonLatencySLO }
func (latencyFilter) feasible(c *evalCtx, i int32, _ freeState) bool {
	d, _ := c.worstRTT(i)
	return d <= c.slo
}
func (latencyFilter) describe(c *evalCtx, i int32, _ freeState) string {
	if c.s.ix.nodes[i].Coord == nil {
		return "node has no network coordinate yet"
	}
	for k := range c.clientC {
		if d := c.clientRTT(k, i); d > c.slo {
			return fmt.Sprintf("predicted RTT %s from %s exceeds p99 %s", fmtMS(d), c.clientN[k], c.req.Latency.P99)
		}
	}
	return ""
}

type cpuFilter struct{}

func (cpuFilter) reason() Reason { return ReasonInsufficientCPU }
func (cpuFilter) feasible(c *evalCtx, _ int32, f freeState) bool {
	return f.cpu >= c.res.CPU
}
func (cpuFilter) describe(c *evalCtx, _ int32, f freeState) string {
	return fmt.Sprintf("needs %s CPU, %s free", fmtCPU(c.res.CPU), fmtCPU(f.cpu))
}

type memoryFilter struct{}

func (memoryFilter) reason() Reason { return ReasonInsufficientMemory }
func (memoryFilter) feasible(c *evalCtx, _ int32, f freeState) bool {
	return f.mem >= c.res.Memory
}
func (memoryFilter) describe(c *evalCtx, _ int32, f freeState) string {
	return fmt.Sprintf("needs %s memory, %s free", policy.FormatBytes(c.res.Memory), policy.FormatBytes(f.mem))
}

type gpuFilter struct{}

func (gpuFilter) reason() Reason { return ReasonInsufficientGPU }
func (gpuFilter) feasible(c *evalCtx, i int32, f freeState) bool {
	return c.freeGPUs(i, f) >= c.res.GPUs
}
func (gpuFilter) describe(c *evalCtx, i int32, f freeState) string {
	return fmt.Sprintf("needs %d free healthy GPUs%s, %d available", c.res.GPUs, gpuSpec(c.res), c.freeGPUs(i, f))
}

type constraintFilter struct{}

func (constraintFilter) reason() Reason { return ReasonConstraint }
func (constraintFilter) feasible(c *evalCtx, i int32, f freeState) bool {
	if c.cc != nil && c.cc.cons != nil {
		if ok, known := c.cc.consOK(c, i, f); known {
			return ok
		}
	}
	return constraintsHold(c, i, f)
}

// constraintsHold evaluates every constraint on node i.
func constraintsHold(c *evalCtx, i int32, f freeState) bool {
	v := c.view(i, f)
	for _, k := range c.req.Constraints {
		if ok, err := k.Match(v); err != nil || !ok {
			return false
		}
	}
	return true
}
func (constraintFilter) describe(c *evalCtx, i int32, f freeState) string {
	v := c.view(i, f)
	for _, k := range c.req.Constraints {
		ok, err := k.Match(v)
		if err != nil {
			return fmt.Sprintf("constraint `%s` failed: %v", k, err)
		}
		if !ok {
			return fmt.Sprintf("constraint `%s` is false", k)
		}
	}
	return ""
}

// latencyScorer prefers nodes close to the clients: 1 - worst RTT / p99,
// or, without an SLO, 10ms / (10ms + worst RTT).
type latencyScorer struct{ w float64 }

func (s latencyScorer) name() string    { return "latency" }
func (s latencyScorer) weight() float64 { return s.w }
func (s latencyScorer) score(c *evalCtx, i int32, _ freeState) float64 {
	d, _ := c.worstRTT(i)
	if math.IsInf(d, 1) {
		return 0
	}
	if c.slo > 0 {
		return clamp01(1 - d/c.slo)
	}
	return 0.010 / (0.010 + d)
}
func (s latencyScorer) describe(c *evalCtx, i int32, _ freeState) string {
	d, who := c.worstRTT(i)
	if math.IsInf(d, 1) {
		return "no coordinate"
	}
	return fmt.Sprintf("RTT %s from %s", fmtMS(d), who)
}

// headroomScorer scores the fraction of the node left free after the
// placement (mean over CPU, memory and, when requested, GPUs). Inference
// prefers headroom (least allocated, room to burst); training packs
// (pack: 1 - headroom, best fit, less fragmentation).
type headroomScorer struct {
	w    float64
	pack bool
}

func (s headroomScorer) name() string {
	if s.pack {
		return "binpack"
	}
	return "headroom"
}
func (s headroomScorer) weight() float64 { return s.w }
func (s headroomScorer) score(c *evalCtx, i int32, f freeState) float64 {
	h := c.headroom(i, f)
	if s.pack {
		return 1 - h
	}
	return h
}
func (s headroomScorer) describe(c *evalCtx, i int32, f freeState) string {
	return fmt.Sprintf("%.0f%% free after placement", 100*c.headroom(i, f))
}

func (c *evalCtx) headroom(i int32, f freeState) float64 {
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
	if c.res.GPUs > 0 {
		if n := &c.s.ix.nodes[i]; len(n.GPUs) > 0 {
			sum += clamp01(float64(c.freeGPUs(i, f)-c.res.GPUs) / float64(len(n.GPUs)))
			k++
		}
	}
	switch k {
	case 0:
		return 0
	case 2:
		return sum * 0.5 // exact: the same bits as sum / 2
	}
	return sum / float64(k)
}

// dataScorer prefers nodes the request's data reaches soonest:
// scale / (scale + seconds to move it), where data already on the node
// costs nothing and other data comes from its nearest holder (Bandwidth).
type dataScorer struct {
	w     float64
	scale float64 // seconds
}

func (s dataScorer) name() string    { return "data" }
func (s dataScorer) weight() float64 { return s.w }
func (s dataScorer) score(c *evalCtx, i int32, _ freeState) float64 {
	return s.scale / (s.scale + c.moveSeconds(i))
}
func (s dataScorer) describe(c *evalCtx, i int32, _ freeState) string {
	return fmt.Sprintf("%s to move, %s", policy.FormatBytes(c.moveBytes(i)), fmtSeconds(c.moveSeconds(i)))
}

// moveSeconds is the time to bring the request's data to node i.
func (c *evalCtx) moveSeconds(i int32) float64 {
	n := &c.s.ix.nodes[i]
	if !c.bwValid || c.bwSite != n.Site || c.bwFabric != n.Fabric {
		for k := range c.refs {
			c.refs[k].bw = bandwidthTo(c.refs[k].h, &c.s.ix.bw, n.Fabric, n.Site, n.Region)
		}
		c.bwSite, c.bwFabric, c.bwValid = n.Site, n.Fabric, true
	}
	t := 0.0
	for k := range c.refs {
		r := &c.refs[k]
		if r.h.has(i) {
			continue
		}
		t += r.bytes / r.bw
	}
	return t
}

func (c *evalCtx) moveBytes(i int32) int64 {
	var b int64
	for _, d := range c.req.Data {
		h := c.s.ix.holders[d.key()]
		if h.has(i) {
			continue
		}
		b += d.Bytes
	}
	return b
}

// bandwidthTo is the bandwidth from the nearest holder to a place.
func bandwidthTo(h *holding, bw *Bandwidth, fabric, site, region string) float64 {
	if h == nil {
		return bw.CrossRegion
	}
	if fabric != "" {
		if _, ok := h.fabrics[fabric]; ok {
			return bw.SameFabric
		}
	}
	if _, ok := h.sites[site]; ok {
		return bw.SameSite
	}
	if _, ok := h.regions[region]; ok {
		return bw.SameRegion
	}
	return bw.CrossRegion
}

// affinityScorer is one CEL affinity, clamped to [0, 1]; errors score 0.
// k is its index in the request's affinities.
type affinityScorer struct {
	a Affinity
	k int
}

func (s affinityScorer) name() string    { return "affinity `" + s.a.Expr.String() + "`" }
func (s affinityScorer) weight() float64 { return s.a.Weight }
func (s affinityScorer) score(c *evalCtx, i int32, f freeState) float64 {
	if c.cc != nil && c.cc.aff[s.k] != nil {
		if v, known := c.cc.affinity(c, s, i, f); known {
			return v
		}
	}
	return affinityScore(c, s.a, i, f)
}

func affinityScore(c *evalCtx, a Affinity, i int32, f freeState) float64 {
	v, err := a.Expr.Score(c.view(i, f))
	if err != nil || math.IsNaN(v) {
		return 0
	}
	return clamp01(v)
}
func (s affinityScorer) describe(c *evalCtx, i int32, f freeState) string {
	v, err := s.a.Expr.Score(c.view(i, f))
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("= %g", v)
}

// clamp01 bounds x to [0, 1]; NaN stays NaN. (Written out: the min and
// max builtins' NaN and signed-zero handling cost more than the rest of
// a headroom score.)
func clamp01(x float64) float64 {
	if x < 0 {
		return 0
	}
	if x > 1 {
		return 1
	}
	return x
}

func fmtMS(seconds float64) string {
	return fmt.Sprintf("%.1fms", seconds*1e3)
}

func fmtSeconds(s float64) string {
	if s == 0 {
		return "0s"
	}
	return time.Duration(s * 1e9).Round(time.Millisecond).String()
}

func joinNames(names []string) string { return strings.Join(names, ", ") }
