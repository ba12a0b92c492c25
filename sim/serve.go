package sim

import (
	"cmp"
	"container/heap"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/placement"
)

// Serving strategies, in the order a serving report lists them.
const (
	// ServeFixed keeps a fixed replica count per client site, sized for
	// the expected daily peak, placed once by strata's engine over the
	// edge, on-prem and cloud tiers; failed replicas are placed again.
	ServeFixed = "fixed"
	// ServeAutoscale scales replicas per client site with the load, on
	// the edge tier only.
	ServeAutoscale = "autoscale"
	// ServeBurst is ServeAutoscale with burst: what the edge cannot hold
	// goes to the on-prem and cloud tiers, within the burst latency, and
	// comes back to the edge when it has held room for ScaleDownAfter.
	ServeBurst = "autoscale+burst"
	// ServePrestage is ServeBurst with pre-staging: every client site's
	// N−1 plan is kept and its model pulled to the standby nodes ahead of
	// time, so a failed replica restarts there without a WAN transfer.
	ServePrestage = "autoscale+burst+prestage"
)

// ServeStrategies lists every serving strategy.
var ServeStrategies = []string{ServeFixed, ServeAutoscale, ServeBurst, ServePrestage}

// ServeOptions says how to replay a load trace. Zero fields take the
// defaults.
type ServeOptions struct {
	// Strategies to compare; default all, in the order of
	// ServeStrategies.
	Strategies []string
	// Engine configures strata's engine; zero means its defaults.
	Engine *placement.Options
	// Parallel is the number of strategies replayed at once; default
	// GOMAXPROCS.
	Parallel int
	// Seed drives the engine's tie-breaks.
	Seed uint64
	// Replica is what one replica needs. Default one GPU, a core and
	// 4 GiB.
	Replica placement.Resources
	// TargetUtilization is the autoscaler's target: requests/s per
	// replica as a share of a replica's capacity. Fixed counts are sized
	// with it too. Default 0.6.
	TargetUtilization float64
	// MinReplicas and MaxFactor bound the autoscaler per client site:
	// min, and max as a multiple of the fixed count. Defaults 1 and 3.
	MinReplicas int
	MaxFactor   float64
	// ScaleDownAfter is the autoscaler's hysteresis: replicas are removed
	// only after the load has wanted fewer for this long, and burst
	// replicas come back to the edge after it has held room this long.
	// Default 15m.
	ScaleDownAfter time.Duration
	// BurstMaxExtraLatency bounds a burst replica's round trip from its
	// clients (whose own site is about a millisecond away). Default 30ms.
	BurstMaxExtraLatency time.Duration
	// PrestageBudget is the model bytes pre-staging may put on one node.
	// Default 32 GB.
	PrestageBudget int64
	// PlanEvery is how often a client site's N−1 plan is recomputed when
	// nothing forces it sooner. Default 1h.
	PlanEvery time.Duration
	// SiteLink is the WAN bandwidth into a site, bytes/s: a model pulled
	// from outside the site takes bytes / SiteLink. Default 125 MB/s
	// (1 Gb/s).
	SiteLink float64
	// LAN is the bandwidth inside a site, bytes/s: a model another node
	// of the site holds is copied at it. Default 1.25 GB/s (10 GbE).
	LAN float64
	// LoadPerGB is the time to load a model into a replica, per GB.
	// Default 2s.
	LoadPerGB time.Duration
	// Detect is the time from a failure until the controller acts on it.
	// Default 10s.
	Detect time.Duration
	// Progress, when set, is called as each strategy ends.
	Progress func(ServeResult)
}

func (o *ServeOptions) ensureDefaults() {
	if len(o.Strategies) == 0 {
		o.Strategies = ServeStrategies
	}
	if o.Replica == (placement.Resources{}) {
		o.Replica = placement.Resources{CPU: 1000, Memory: 4 * gib, GPUs: 1}
	}
	if o.TargetUtilization == 0 {
		o.TargetUtilization = 0.6
	}
	if o.MinReplicas == 0 {
		o.MinReplicas = 1
	}
	if o.MaxFactor == 0 {
		o.MaxFactor = 3
	}
	if o.ScaleDownAfter == 0 {
		o.ScaleDownAfter = 15 * time.Minute
	}
	if o.BurstMaxExtraLatency == 0 {
		o.BurstMaxExtraLatency = 30 * time.Millisecond
	}
	if o.PrestageBudget == 0 {
		o.PrestageBudget = 32e9
	}
	if o.PlanEvery == 0 {
		o.PlanEvery = time.Hour
	}
	if o.SiteLink == 0 {
		o.SiteLink = 125e6
	}
	if o.LAN == 0 {
		o.LAN = 1.25e9
	}
	if o.LoadPerGB == 0 {
		o.LoadPerGB = 2 * time.Second
	}
	if o.Detect == 0 {
		o.Detect = 10 * time.Second
	}
}

// ServeResult is how one serving strategy did over a load trace.
type ServeResult struct {
	Strategy string `json:"strategy"`
	// SLOAttainment is the share of requests served within their
	// service's p99 (round trip plus queueing at the replica); requests of
	// a client site with no ready replica, or with its replicas
	// overloaded, miss.
	SLOAttainment float64 `json:"slo_attainment"`
	// ReplicaHours counts replicas held (loading or serving) over time;
	// BurstReplicaHours the part on the on-prem and cloud tiers.
	ReplicaHours      float64 `json:"replica_hours"`
	BurstReplicaHours float64 `json:"burst_replica_hours"`
	// ShortReplicaHours counts replicas wanted (by the autoscaler, or the
	// fixed count) for which no node was found, over time.
	ShortReplicaHours float64 `json:"short_replica_hours"`
	// PeakReplicas is the most replicas held at once.
	PeakReplicas int `json:"peak_replicas"`
	// MovedBytes is model bytes pulled into a site that held no copy, to
	// start a replica; PrestagedBytes those pulled ahead of time to
	// standby nodes.
	MovedBytes     int64 `json:"moved_bytes"`
	PrestagedBytes int64 `json:"prestaged_bytes"`
	// Failures counts the failures that took down a replica; Disrupted
	// those after which some client site was served within its SLO less
	// than before (see the package doc); Unrecovered those still
	// disrupted at the end.
	Failures    int `json:"failures"`
	Disrupted   int `json:"disrupted"`
	Unrecovered int `json:"unrecovered"`
	// Recoveries are the disrupted failures' times to recover, in
	// failure order; an unrecovered one counts the time to the end.
	// RecoveryP50 and RecoveryP99 are their median and 99th percentile.
	Recoveries  []time.Duration `json:"recoveries_ns"`
	RecoveryP50 time.Duration   `json:"recovery_p50_ns"`
	RecoveryP99 time.Duration   `json:"recovery_p99_ns"`
	// Restores is the time from each failure until every replica it took
	// down was serving again somewhere (ready); RestoreP50 its median.
	RestoreP50 time.Duration `json:"restore_p50_ns"`
	RestoreP99 time.Duration `json:"restore_p99_ns"`
	// Lost counts the replicas failures took down; StandbyStarts the
	// replacements that started on a pre-staged standby node.
	Lost          int `json:"lost"`
	StandbyStarts int `json:"standby_starts"`
	// Decisions counts placement decisions (engine calls).
	Decisions int `json:"decisions"`
	// Replicas and BurstReplicas are the replicas held at each step's
	// start; Attainment each step's SLO attainment.
	Replicas      []int     `json:"replicas"`
	BurstReplicas []int     `json:"burst_replicas"`
	Attainment    []float64 `json:"attainment"`
	// Elapsed is the wall-clock time of the replay.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// ServeReport compares serving strategies over one load trace.
type ServeReport struct {
	Nodes        int           `json:"nodes"`
	Sites        int           `json:"sites"`
	Regions      int           `json:"regions"`
	Shape        string        `json:"shape"`
	Step         time.Duration `json:"step_ns"`
	Steps        int           `json:"steps"`
	Services     int           `json:"services"`
	ClientSites  int           `json:"client_sites"`
	NodeFailures int           `json:"node_failures"`
	SiteFailures int           `json:"site_failures"`
	// Demand is the requests/s of every client site together, per step.
	Demand []float64 `json:"demand_rps"`
	// EstimatedRTT: see Report.
	EstimatedRTT bool          `json:"estimated_rtt,omitempty"`
	Results      []ServeResult `json:"results"`
}

// Serve replays a load trace over t once per strategy. Every strategy
// starts from the same estate with its first step's replicas running and
// sees the same load and failures.
func Serve(t *Topology, lt *LoadTrace, o ServeOptions) (*ServeReport, error) {
	o.ensureDefaults()
	for _, s := range o.Strategies {
		if !slices.Contains(ServeStrategies, s) {
			return nil, fmt.Errorf("sim: serving strategy %q: want one of %s", s, strings.Join(ServeStrategies, ", "))
		}
	}
	if o.TargetUtilization <= 0 || o.TargetUtilization >= 1 {
		return nil, fmt.Errorf("sim: target utilisation %v must lie in (0, 1)", o.TargetUtilization)
	}
	ix := newTopoIndex(t)
	for k, p := range lt.Pairs {
		if _, ok := ix.siteIdx[p.Site]; !ok {
			return nil, fmt.Errorf("sim: load pair %d: no site %q", k, p.Site)
		}
		if p.Service < 0 || p.Service >= len(lt.Services) || len(p.Rate) < lt.Steps {
			return nil, fmt.Errorf("sim: load pair %d: bad service or too few rates", k)
		}
	}
	for _, f := range lt.Failures {
		if _, ok := ix.siteIdx[f.Site]; f.Kind == EventSiteDown && !ok {
			return nil, fmt.Errorf("sim: site failure: no site %q", f.Site)
		}
		if f.Kind == EventNodeDown && (f.Pair < 0 || f.Pair >= len(lt.Pairs)) {
			return nil, fmt.Errorf("sim: node failure: no pair %d", f.Pair)
		}
	}
	eo := placement.DefaultOptions()
	if o.Engine != nil {
		eo = *o.Engine
	}
	eng, err := placement.New(eo)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	rep := &ServeReport{Nodes: len(t.Nodes), Sites: len(t.Sites), Regions: len(t.Regions), Shape: lt.Shape,
		Step: lt.Step, Steps: lt.Steps, Services: len(lt.Services), ClientSites: len(lt.Pairs), EstimatedRTT: t.pos == nil}
	for _, f := range lt.Failures {
		if f.Kind == EventSiteDown {
			rep.SiteFailures++
		} else {
			rep.NodeFailures++
		}
	}
	rep.Demand = make([]float64, lt.Steps)
	for _, p := range lt.Pairs {
		for k := range lt.Steps {
			rep.Demand[k] += p.Rate[k]
		}
	}
	results, err := replayEach(o.Strategies, o.Parallel, func(name string) (ServeResult, error) {
		return newServeRunner(t, ix, eng, lt, &o, name).run()
	}, o.Progress)
	if err != nil {
		return nil, err
	}
	rep.Results = results
	return rep, nil
}

// replica is one replica of one client site's share of a service.
type replica struct {
	pair    int32
	node    int32
	gpus    []int
	seq     int
	readyAt time.Duration
	ready   bool
	gone    bool
	burst   bool          // on the on-prem or cloud tier
	rtt     time.Duration // true RTT from the client site
	retire  *replica      // a burst replica this one sends back to the edge
	failure *failRec      // the failure this one replaces a replica of
}

// pairState is the replay's state of one (service, client site) pair.
type pairState struct {
	svc       *LoadService
	site      int32
	client    string
	reps      []*replica
	lam       float64 // requests/s now
	f         float64 // share of the requests served within the SLO now
	fixed     int
	max       int
	budget    time.Duration // the RTT at which a replica at target meets the SLO
	lowSince  time.Duration // the load has wanted fewer replicas since; -1 not
	roomSince time.Duration // the edge has had room for a burst replica since; -1 not
	standby   []int32
	planAt    time.Duration
	planFor   int        // replicas in the cut site when planned; 0 not planned
	recs      []*failRec // failures this pair has not recovered from
}

// failRec tracks one failure's recovery.
type failRec struct {
	at        time.Duration
	targets   map[int32]float64 // pair → share to get back to
	recovered time.Duration     // -1 while not
	waiting   int               // replacements placed, not yet ready
	short     bool              // some replica taken down found no place
	restored  time.Duration     // -1 while not
}

// readied counts one of f's replacements ready (or given up on).
func (f *failRec) readied(now time.Duration) {
	if f.waiting--; f.waiting == 0 && !f.short {
		f.restored = now
	}
}

type readyHeap []*replica

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(a, b int) bool {
	return h[a].readyAt < h[b].readyAt || h[a].readyAt == h[b].readyAt && h[a].seq < h[b].seq
}
func (h readyHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *readyHeap) Push(x any)   { *h = append(*h, x.(*replica)) }
func (h *readyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// serveRunner replays a load trace for one strategy.
type serveRunner struct {
	ix                         *topoIndex
	eng                        *placement.Engine
	lt                         *LoadTrace
	o                          *ServeOptions
	strategy                   string
	autoscale, burst, prestage bool

	snap    *placement.Snapshot
	alive   []bool
	pairs   []pairState
	holders []map[int32]bool // per service: nodes holding its model
	staged  []int64          // per node: bytes pre-staged
	pending readyHeap
	seq     int
	now     time.Duration
	served  float64 // Σ lam·f
	demand  float64 // Σ lam
	nrep    int
	nburst  int
	recs    []*failRec

	attained, asked float64 // request·seconds
	replicaSec      float64
	burstSec        float64
	shortSec        float64
	short           int
	res             ServeResult
}

func newServeRunner(t *Topology, ix *topoIndex, eng *placement.Engine, lt *LoadTrace, o *ServeOptions, name string) *serveRunner {
	r := &serveRunner{ix: ix, eng: eng, lt: lt, o: o, strategy: name,
		autoscale: name != ServeFixed, burst: name == ServeBurst || name == ServePrestage, prestage: name == ServePrestage,
		snap: t.Snapshot.Clone(), alive: make([]bool, len(t.Nodes)), staged: make([]int64, len(t.Nodes)),
		res: ServeResult{Strategy: name}}
	for i := range t.Nodes {
		r.alive[i] = t.Nodes[i].Alive
	}
	r.holders = make([]map[int32]bool, len(lt.Services))
	for k := range r.holders {
		r.holders[k] = map[int32]bool{}
	}
	q := time.Duration(float64(time.Second) / (1 - o.TargetUtilization))
	for _, p := range lt.Pairs {
		svc := &lt.Services[p.Service]
		fixed := max(o.MinReplicas, int(math.Ceil(p.Peak/(o.TargetUtilization*svc.Capacity))))
		queue := time.Duration(svc.ServiceTime.Seconds() * float64(q))
		r.pairs = append(r.pairs, pairState{svc: svc, site: ix.siteIdx[p.Site], client: p.Site, fixed: fixed,
			max: max(o.MinReplicas, int(math.Ceil(o.MaxFactor*float64(fixed)))), budget: svc.P99 - queue,
			lowSince: -1, roomSince: -1})
	}
	return r
}

func (r *serveRunner) run() (ServeResult, error) {
	start := time.Now()
	step := r.lt.Step
	fails := r.lt.Failures
	for k := range r.lt.Steps {
		r.now = time.Duration(k) * step
		r.tick(k)
		end := time.Duration(k+1) * step
		stepAttained, stepAsked := r.attained, r.asked
		for {
			next := end
			if len(r.pending) > 0 && r.pending[0].readyAt < next {
				next = r.pending[0].readyAt
			}
			if len(fails) > 0 && fails[0].At < next {
				next = fails[0].At
			}
			r.integrate(next)
			if next == end {
				break
			}
			for len(r.pending) > 0 && r.pending[0].readyAt <= r.now {
				r.becomeReady(heap.Pop(&r.pending).(*replica))
			}
			for len(fails) > 0 && fails[0].At <= r.now {
				if err := r.fail(fails[0]); err != nil {
					return r.res, err
				}
				fails = fails[1:]
			}
		}
		a := 1.0
		if d := r.asked - stepAsked; d > 0 {
			a = (r.attained - stepAttained) / d
		}
		r.res.Attainment = append(r.res.Attainment, a)
	}
	r.finish()
	r.res.Elapsed = time.Since(start)
	return r.res, nil
}

// integrate advances the clock to t, accumulating the measures.
func (r *serveRunner) integrate(t time.Duration) {
	dt := (t - r.now).Seconds()
	if dt > 0 {
		r.attained += r.served * dt
		r.asked += r.demand * dt
		r.replicaSec += float64(r.nrep) * dt
		r.burstSec += float64(r.nburst) * dt
		r.shortSec += float64(r.short) * dt
	}
	r.now = t
}

// tick starts step k: the load changes, the autoscaler acts, burst
// replicas come back to the edge, N−1 plans are refreshed.
func (r *serveRunner) tick(k int) {
	r.short = 0
	for p := range r.pairs {
		ps := &r.pairs[p]
		rate := r.lt.Pairs[p].Rate[k]
		r.demand += rate - ps.lam
		r.served -= ps.lam * ps.f // refresh adds it back at the new rate
		ps.lam, ps.f = rate, 0
		want := ps.fixed
		if r.autoscale {
			seen := r.lt.Pairs[p].Rate[max(0, k-1)] // what the last step measured
			want = min(ps.max, max(r.o.MinReplicas, int(math.Ceil(seen/(r.o.TargetUtilization*ps.svc.Capacity)))))
		}
		have := r.live(int32(p))
		switch {
		case k == 0 || want > have:
			ps.lowSince = -1
			got := r.add(int32(p), want-have, k == 0, nil)
			r.short += want - have - got
		case want < have:
			if ps.lowSince < 0 {
				ps.lowSince = r.now
			}
			if r.now-ps.lowSince >= r.o.ScaleDownAfter {
				r.remove(int32(p), have-want)
				ps.lowSince = -1
			}
		default:
			ps.lowSince = -1
		}
		if r.burst && k > 0 && want <= have {
			r.comeBack(int32(p))
		}
		if r.prestage {
			r.plan(int32(p))
		}
		r.refresh(int32(p))
	}
	r.res.Replicas = append(r.res.Replicas, r.nrep)
	r.res.BurstReplicas = append(r.res.BurstReplicas, r.nburst)
	r.res.PeakReplicas = max(r.res.PeakReplicas, r.nrep)
}

// live counts a pair's replicas that are not on their way out.
func (r *serveRunner) live(p int32) int {
	n := 0
	for _, x := range r.pairs[p].reps {
		if !r.retiring(x) {
			n++
		}
	}
	return n
}

// retiring says whether x is a burst replica an edge replica is about to
// replace.
func (r *serveRunner) retiring(x *replica) bool {
	for _, y := range r.pairs[x.pair].reps {
		if y.retire == x {
			return true
		}
	}
	return false
}

// tiersFor is where the strategy places replicas: one engine call per
// tier list, in order, each for what the ones before could not place.
func (r *serveRunner) tiersFor() [][]string {
	switch {
	case r.strategy == ServeFixed:
		return [][]string{{placement.TierEdge, placement.TierOnprem, placement.TierCloud}}
	case r.burst:
		return [][]string{{placement.TierEdge}, {placement.TierOnprem, placement.TierCloud}}
	}
	return [][]string{{placement.TierEdge}}
}

// find asks the engine for up to n nodes for pair p on tiers, none of
// exclude.
func (r *serveRunner) find(p int32, n int, tiers []string, exclude []string) []int32 {
	ps := &r.pairs[p]
	bound := ps.budget
	if tiers[0] != placement.TierEdge {
		bound = min(bound, r.o.BurstMaxExtraLatency)
	}
	if n <= 0 || bound <= 0 {
		return nil
	}
	r.res.Decisions++
	req := &placement.Request{
		Kind: placement.Inference, Key: "InferenceService/" + ps.svc.Name + "@" + ps.client,
		Replicas: n, Resources: r.o.Replica,
		Latency: placement.Latency{P99: bound, Clients: []string{ps.client}},
		Tiers:   tiers, Seed: r.o.Seed ^ uint64(p)<<24 ^ uint64(r.res.Decisions),
		Exclude: exclude,
	}
	d, err := r.eng.Place(r.snap, req)
	if err != nil {
		return nil
	}
	var out []int32
	for _, pl := range d.Placements {
		out = append(out, r.ix.byName[pl.Node])
	}
	return out
}

// names lists the nodes of a pair's replicas, plus more.
func (r *serveRunner) names(p int32, more ...int32) []string {
	var out []string
	for _, x := range r.pairs[p].reps {
		out = append(out, r.ix.t.Nodes[x.node].Name)
	}
	for _, i := range more {
		out = append(out, r.ix.t.Nodes[i].Name)
	}
	return out
}

// add places n replicas of pair p and says how many it placed. Initial
// replicas (the replay's first step) are running already; a replacement
// for a failure (f set) starts after the controller notices it, on a
// standby node when the strategy pre-stages.
func (r *serveRunner) add(p int32, n int, initial bool, f *failRec) int {
	got := 0
	if f != nil && r.prestage {
		for _, i := range r.pairs[p].standby {
			if got == n {
				break
			}
			if r.alive[i] && !r.serves(p, i) && r.start(p, i, initial, f) {
				got++
			}
		}
		r.res.StandbyStarts += got
		// A standby without room: another node of its site copies the
		// model over the LAN.
		for _, s := range r.pairs[p].standby {
			for _, j := range r.ix.t.Sites[r.ix.siteOf[s]].Nodes {
				if got == n {
					break
				}
				if i := int32(j); r.alive[i] && !r.serves(p, i) && r.start(p, i, initial, f) {
					got++
				}
			}
		}
	}
	for _, tiers := range r.tiersFor() {
		if got == n {
			break
		}
		for _, i := range r.find(p, n-got, tiers, r.names(p)) {
			if r.start(p, i, initial, f) {
				got++
			}
		}
	}
	return got
}

// serves says whether node i holds a replica of pair p.
func (r *serveRunner) serves(p, i int32) bool {
	return slices.ContainsFunc(r.pairs[p].reps, func(x *replica) bool { return x.node == i })
}

// start reserves a replica of pair p on node i and schedules it ready
// once its model is there and loaded.
func (r *serveRunner) start(p, i int32, initial bool, f *failRec) bool {
	ps := &r.pairs[p]
	name := r.ix.t.Nodes[i].Name
	gpus, err := r.snap.Reserve(name, r.o.Replica)
	if err != nil {
		return false
	}
	r.seq++
	x := &replica{pair: p, node: i, gpus: gpus, seq: r.seq, failure: f,
		burst: r.ix.t.Nodes[i].Tier != placement.TierEdge,
		rtt:   r.ix.t.TrueRTT(int(r.ix.siteRep[ps.site]), int(i))}
	ps.reps = append(ps.reps, x)
	r.nrep++
	if x.burst {
		r.nburst++
	}
	svc := r.lt.Pairs[p].Service
	if initial {
		r.holders[svc][i] = true
		x.ready, x.readyAt = true, r.now
		return true
	}
	x.readyAt = r.now + r.fetch(svc, i, false) + r.load(ps.svc)
	if f != nil {
		x.readyAt += r.o.Detect
	}
	heap.Push(&r.pending, x)
	return true
}

// fetch brings service svc's model to node i and says how long it takes:
// nothing when the node holds it, a LAN copy when another alive node of
// its site does, else a WAN pull (counted as moved or pre-staged bytes).
func (r *serveRunner) fetch(svc int, i int32, staging bool) time.Duration {
	h := r.holders[svc]
	if h[i] {
		return 0
	}
	bytes := r.lt.Services[svc].ModelBytes
	h[i] = true
	site := r.ix.siteOf[i]
	for j := range h {
		if j != i && r.alive[j] && r.ix.siteOf[j] == site {
			return time.Duration(float64(bytes) / r.o.LAN * float64(time.Second))
		}
	}
	if staging {
		r.res.PrestagedBytes += bytes
	} else {
		r.res.MovedBytes += bytes
	}
	return time.Duration(float64(bytes) / r.o.SiteLink * float64(time.Second))
}

func (r *serveRunner) load(svc *LoadService) time.Duration {
	return time.Duration(float64(svc.ModelBytes) / 1e9 * float64(r.o.LoadPerGB))
}

// becomeReady marks x ready, retires the burst replica it replaces and
// counts a failure's replica restored.
func (r *serveRunner) becomeReady(x *replica) {
	if x.gone {
		return
	}
	x.ready = true
	if x.retire != nil && !x.retire.gone {
		r.drop(x.retire, true)
	}
	x.retire = nil
	if f := x.failure; f != nil {
		x.failure = nil
		f.readied(r.now)
	}
	r.refresh(x.pair)
}

// remove takes n replicas of pair p away: loading ones first, then burst
// ones, then the farthest, then the newest.
func (r *serveRunner) remove(p int32, n int) {
	reps := slices.Clone(r.pairs[p].reps)
	slices.SortStableFunc(reps, func(a, b *replica) int {
		return cmp.Or(cmp.Compare(btoi(a.ready), btoi(b.ready)), cmp.Compare(btoi(!a.burst), btoi(!b.burst)),
			cmp.Compare(b.rtt, a.rtt), cmp.Compare(b.seq, a.seq))
	})
	for _, x := range reps[:min(n, len(reps))] {
		r.drop(x, true)
	}
}

// drop takes replica x away, giving its resources back when its node is
// alive.
func (r *serveRunner) drop(x *replica, release bool) {
	ps := &r.pairs[x.pair]
	x.gone = true
	ps.reps = slices.DeleteFunc(ps.reps, func(y *replica) bool { return y == x })
	for _, y := range ps.reps {
		if y.retire == x {
			y.retire = nil
		}
	}
	r.nrep--
	if x.burst {
		r.nburst--
	}
	if release && r.alive[x.node] {
		// The snapshot took this reservation, so giving it back cannot fail.
		_ = r.snap.Release(r.ix.t.Nodes[x.node].Name, r.o.Replica.CPU, r.o.Replica.Memory, x.gpus)
	}
	if f := x.failure; f != nil && !x.ready {
		// A replacement dropped before it served (the load no longer
		// wants it): the others restore its failure.
		x.failure = nil
		f.readied(r.now)
	}
}

// comeBack sends one burst replica of pair p back to the edge once the
// edge has held room for ScaleDownAfter.
func (r *serveRunner) comeBack(p int32) {
	ps := &r.pairs[p]
	var worst *replica
	for _, x := range ps.reps {
		if x.burst && x.ready && !r.retiring(x) && (worst == nil || x.rtt > worst.rtt) {
			worst = x
		}
	}
	if worst == nil {
		ps.roomSince = -1
		return
	}
	at := r.find(p, 1, []string{placement.TierEdge}, r.names(p))
	if len(at) == 0 {
		ps.roomSince = -1
		return
	}
	if ps.roomSince < 0 {
		ps.roomSince = r.now
	}
	if r.now-ps.roomSince < r.o.ScaleDownAfter {
		return
	}
	ps.roomSince = -1
	if r.start(p, at[0], false, nil) {
		ps.reps[len(ps.reps)-1].retire = worst
	}
}

// plan refreshes pair p's N−1 plan when it is stale: where its replicas
// would go if the site holding most of them were cut (which covers a
// single node's failure too), with the model pulled there ahead of time
// within each node's budget.
func (r *serveRunner) plan(p int32) {
	ps := &r.pairs[p]
	count := map[int32]int{}
	var worst int32 = -1
	for _, x := range ps.reps {
		s := r.ix.siteOf[x.node]
		count[s]++
		if worst < 0 || count[s] > count[worst] || count[s] == count[worst] && s < worst {
			worst = s
		}
	}
	if worst < 0 {
		return
	}
	valid := ps.planFor >= count[worst] && r.now-ps.planAt < r.o.PlanEvery
	for _, i := range ps.standby {
		if !r.alive[i] || r.serves(p, i) {
			valid = false
		}
	}
	if valid {
		return
	}
	ps.planFor, ps.planAt = count[worst], r.now
	var cut []int32
	for _, i := range r.ix.t.Sites[worst].Nodes {
		cut = append(cut, int32(i))
	}
	// Standbys that still fit stay (their copy is there already); the
	// engine finds the rest.
	keep := ps.standby[:0]
	for _, i := range ps.standby {
		if len(keep) < count[worst] && r.alive[i] && !r.serves(p, i) && r.ix.siteOf[i] != worst && r.fits(i) {
			keep = append(keep, i)
		}
	}
	ps.standby = keep
	excl := r.names(p, slices.Concat(cut, keep)...)
	for _, tiers := range r.tiersFor() {
		need := count[worst] - len(ps.standby)
		for _, i := range r.find(p, need, tiers, excl) {
			ps.standby = append(ps.standby, i)
			excl = append(excl, r.ix.t.Nodes[i].Name)
		}
	}
	svc := r.lt.Pairs[p].Service
	bytes := ps.svc.ModelBytes
	for _, i := range ps.standby {
		if r.holders[svc][i] || r.staged[i]+bytes > r.o.PrestageBudget {
			continue
		}
		r.staged[i] += bytes
		r.fetch(svc, i, true)
	}
}

// fits says whether node i has room for one more replica now.
func (r *serveRunner) fits(i int32) bool {
	n, ok := r.snap.Node(r.ix.t.Nodes[i].Name)
	if !ok || !n.Alive || n.FreeCPU < r.o.Replica.CPU || n.FreeMemory < r.o.Replica.Memory {
		return false
	}
	free := 0
	for _, g := range n.GPUs {
		if g.Healthy && g.Free {
			free++
		}
	}
	return free >= r.o.Replica.GPUs
}

// refresh recomputes the share of pair p's requests served within the
// SLO and what that recovers.
func (r *serveRunner) refresh(p int32) {
	ps := &r.pairs[p]
	f := r.servedShare(ps)
	r.served += ps.lam * (f - ps.f)
	ps.f = f
	if len(ps.recs) == 0 {
		return
	}
	keep := ps.recs[:0]
	for _, rec := range ps.recs {
		if f+1e-9 < rec.targets[p] {
			keep = append(keep, rec)
			continue
		}
		delete(rec.targets, p)
		if len(rec.targets) == 0 {
			rec.recovered = r.now
		}
	}
	ps.recs = keep
}

// servedShare is the share of a pair's requests served within its SLO:
// the load is spread evenly over its ready replicas; a request's latency
// is the replica's round trip plus ServiceTime/(1−ρ) at utilisation ρ
// (M/M/1's growth of time in system); ρ ≥ 1 misses every request.
func (r *serveRunner) servedShare(ps *pairState) float64 {
	if ps.lam <= 0 {
		return 1
	}
	n := 0
	for _, x := range ps.reps {
		if x.ready {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	rho := ps.lam / (float64(n) * ps.svc.Capacity)
	if rho >= 1 {
		return 0
	}
	q := time.Duration(float64(ps.svc.ServiceTime) / (1 - rho))
	ok := 0
	for _, x := range ps.reps {
		if x.ready && x.rtt+q <= ps.svc.P99 {
			ok++
		}
	}
	return float64(ok) / float64(n)
}

// fail takes a site or a node down, places again what ran there and
// starts tracking the recovery.
func (r *serveRunner) fail(f LoadFailure) error {
	var dead []int32
	switch f.Kind {
	case EventSiteDown:
		for _, i := range r.ix.t.Sites[r.ix.siteIdx[f.Site]].Nodes {
			if r.alive[i] {
				dead = append(dead, int32(i))
			}
		}
	case EventNodeDown:
		var oldest *replica
		for _, x := range r.pairs[f.Pair].reps {
			if oldest == nil || x.seq < oldest.seq {
				oldest = x
			}
		}
		if oldest != nil {
			dead = append(dead, oldest.node)
		}
	}
	if len(dead) == 0 {
		return nil
	}
	rec := &failRec{at: r.now, targets: map[int32]float64{}, recovered: -1, restored: -1}
	lost := map[int32]int{}
	var lostOrder []int32
	for p := range r.pairs {
		for _, x := range r.pairs[p].reps {
			if slices.Contains(dead, x.node) {
				if lost[int32(p)] == 0 {
					lostOrder = append(lostOrder, int32(p))
				}
				lost[int32(p)]++
			}
		}
	}
	before := map[int32]float64{}
	for _, p := range lostOrder {
		before[p] = r.pairs[p].f
	}
	nodes := r.snap.Nodes()
	for _, i := range dead {
		r.alive[i] = false
		nodes[i].Alive = false
		for _, h := range r.holders {
			delete(h, i)
		}
	}
	var b placement.Builder
	b.Add(nodes...)
	snap, err := b.Build()
	if err != nil {
		return fmt.Errorf("rebuilding the snapshot: %w", err)
	}
	r.snap = snap.Clone()
	for _, p := range lostOrder {
		for _, x := range slices.Clone(r.pairs[p].reps) {
			if !r.alive[x.node] {
				r.drop(x, false)
			}
		}
	}
	if len(lostOrder) == 0 {
		return nil
	}
	r.res.Failures++
	r.recs = append(r.recs, rec)
	for _, p := range lostOrder {
		r.res.Lost += lost[p]
		got := r.add(p, lost[p], false, rec)
		rec.waiting += got
		rec.short = rec.short || got < lost[p]
		r.refresh(p)
		ps := &r.pairs[p]
		if target := min(before[p], 0.95); target > 0 && ps.f+1e-9 < target {
			rec.targets[p] = target
			ps.recs = append(ps.recs, rec)
		}
	}
	if len(rec.targets) == 0 {
		rec.recovered = r.now
	}
	return nil
}

// finish computes the end-of-replay measures.
func (r *serveRunner) finish() {
	if r.asked > 0 {
		r.res.SLOAttainment = r.attained / r.asked
	}
	r.res.ReplicaHours = r.replicaSec / 3600
	r.res.BurstReplicaHours = r.burstSec / 3600
	r.res.ShortReplicaHours = r.shortSec / 3600
	var restores []time.Duration
	for _, f := range r.recs {
		end := r.now
		if f.restored >= 0 {
			end = f.restored
		}
		restores = append(restores, end-f.at)
		if f.recovered == f.at {
			continue // no client was served worse
		}
		r.res.Disrupted++
		end = r.now
		if f.recovered >= 0 {
			end = f.recovered
		} else {
			r.res.Unrecovered++
		}
		r.res.Recoveries = append(r.res.Recoveries, end-f.at)
	}
	r.res.RecoveryP50, r.res.RecoveryP99 = percentiles(r.res.Recoveries)
	r.res.RestoreP50, r.res.RestoreP99 = percentiles(restores)
}

// percentiles returns the median and the 99th percentile (nearest rank).
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration { return s[max(0, int(math.Ceil(q*float64(len(s))))-1)] }
	return rank(0.5), rank(0.99)
}

// WriteTable writes the serving report as a table for people: one row per
// strategy.
func (rep *ServeReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%d nodes, %d sites, %d regions; %s load, %d services from %d client sites, %s in %d steps of %s; %d node and %d site failures\n\n",
		rep.Nodes, rep.Sites, rep.Regions, rep.Shape, rep.Services, rep.ClientSites, time.Duration(rep.Steps)*rep.Step, rep.Steps, rep.Step, rep.NodeFailures, rep.SiteFailures)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STRATEGY\tSLO MET\tREPLICA-H\tBURST-H\tSHORT-H\tPEAK\tMOVED\tPRESTAGED\tDISRUPTED\tRECOVER P50\tP99\tRESTORE P50\tP99\tTIME\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.0f\t%.0f\t%.0f\t%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Strategy, 100*r.SLOAttainment,
			r.ReplicaHours, r.BurstReplicaHours, r.ShortReplicaHours, r.PeakReplicas, formatBytes(r.MovedBytes), formatBytes(r.PrestagedBytes),
			r.Disrupted, r.Failures, fmtRecovery(r.RecoveryP50, r.Disrupted), fmtRecovery(r.RecoveryP99, r.Disrupted),
			fmtRecovery(r.RestoreP50, r.Failures), fmtRecovery(r.RestoreP99, r.Failures), r.Elapsed.Round(100*time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rtt := "true RTT"
	if rep.EstimatedRTT {
		rtt = "the RTT the coordinates estimate"
	}
	_, err := fmt.Fprint(w, `
SLO MET      requests served within their p99 (`+rtt+` + queueing; overload and no ready replica miss)
REPLICA-H    replica-hours held (loading or serving); BURST-H on on-prem and cloud; SHORT-H wanted but no node found
MOVED        model bytes pulled into a site to start replicas; PRESTAGED pulled ahead of time to standby nodes
DISRUPTED    failures after which some client site was served within its SLO less than before, of failures that hit a replica
RECOVER      time from such a failure until those client sites are served as before (up to 95%); unrecovered count to the end
RESTORE      time from a failure until every replica it took down is serving again elsewhere
`)
	return err
}

func fmtRecovery(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}
