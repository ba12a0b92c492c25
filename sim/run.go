package sim

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
)

// Strategy names, in the order a report lists them.
const (
	// StrategyStrata is strata's placement engine.
	StrategyStrata = "strata"
	// StrategyCloudOnly is strata's engine held to the cloud tier with no
	// latency bound: every workload in the cloud.
	StrategyCloudOnly = "cloud-only"
	// StrategyRandom puts each replica on a random node that fits, and a
	// gang on a random fabric that fits.
	StrategyRandom = "random"
	// StrategyLeastLoaded puts each replica on the node with the most free
	// CPU (share of its total), and a gang on the fabric with the most
	// free GPUs.
	StrategyLeastLoaded = "least-loaded"
	// StrategyNearestSite puts each replica in the site nearest its first
	// client site (by network coordinates) that has room, and a gang on a
	// fabric whose site holds its data when one fits.
	StrategyNearestSite = "nearest-site"
)

// Strategies lists every strategy.
var Strategies = []string{StrategyStrata, StrategyCloudOnly, StrategyRandom, StrategyLeastLoaded, StrategyNearestSite}

// RunOptions says how to replay a trace.
type RunOptions struct {
	// Strategies to compare; default all, in the order of Strategies.
	Strategies []string
	// Engine configures strata's engine; zero means its defaults.
	Engine *placement.Options
	// Parallel is the number of strategies replayed at once; default
	// GOMAXPROCS.
	Parallel int
	// Seed drives the random strategy and request tie-breaks.
	Seed uint64
	// Progress, when set, is called as each strategy ends.
	Progress func(Result)
}

// Result is how one strategy did over a trace.
type Result struct {
	Strategy string `json:"strategy"`
	// Services counts service arrivals; Placed those with every replica
	// placed at the end (after failures and re-placement).
	Services       int `json:"services"`
	ServicesPlaced int `json:"services_placed"`
	// ClientPairs counts (service, client site) pairs; SLOAttainment is
	// the share of them whose nearest replica is within the service's p99
	// by true round-trip time at the end of the trace (a pair with no
	// replica misses).
	ClientPairs   int     `json:"client_pairs"`
	SLOAttainment float64 `json:"slo_attainment"`
	// EgressBytes is the data moved across sites: a model or dataset
	// copied to a site that did not hold it (once per site), and every
	// retrained model to each site serving it.
	EgressBytes int64 `json:"egress_bytes"`
	// Jobs counts training arrivals and JobsPlaced those running at the
	// end; Retrains and RetrainsPlaced the same for drift retrains.
	Jobs           int `json:"jobs"`
	JobsPlaced     int `json:"jobs_placed"`
	Retrains       int `json:"retrains"`
	RetrainsPlaced int `json:"retrains_placed"`
	// FreeGPUs is the healthy free GPUs on the alive nodes of RDMA
	// fabrics at the end; StrandedGPUs those on a node where some GPU is
	// in use (a gang member that wants the whole node cannot use them);
	// GPUFragmentation is their share.
	FreeGPUs         int     `json:"free_gpus"`
	StrandedGPUs     int     `json:"stranded_gpus"`
	GPUFragmentation float64 `json:"gpu_fragmentation"`
	// Decisions counts placement decisions; DecisionP50 and DecisionP99
	// are their wall-clock times.
	Decisions   int           `json:"decisions"`
	DecisionP50 time.Duration `json:"decision_p50_ns"`
	DecisionP99 time.Duration `json:"decision_p99_ns"`
	// Replaced counts replicas and gang members placed again after their
	// node failed; Lost those that found no place.
	Replaced int `json:"replaced"`
	Lost     int `json:"lost"`
	// Elapsed is the wall-clock time of the whole replay.
	Elapsed time.Duration `json:"elapsed_ns"`
	// SiteReplicas counts replicas and gang members per site at the end.
	SiteReplicas map[string]int `json:"site_replicas,omitempty"`
}

// Report compares strategies over one trace.
type Report struct {
	Nodes   int `json:"nodes"`
	Sites   int `json:"sites"`
	Regions int `json:"regions"`
	Events  int `json:"events"`
	// EstimatedRTT is set when the estate has no ground truth for RTT (a
	// live mesh's, from FromNodes): SLO attainment is then measured by
	// the coordinates' estimate.
	EstimatedRTT bool     `json:"estimated_rtt,omitempty"`
	Results      []Result `json:"results"`
}

// Run replays evs over t once per strategy. Every strategy starts from the
// same estate and sees the same events in order: arrivals are placed and
// hold their resources to the end, failures take nodes down and what ran
// there is placed again, drift places a retrain and rolls its model out.
func Run(t *Topology, evs []Event, o RunOptions) (*Report, error) {
	if len(o.Strategies) == 0 {
		o.Strategies = Strategies
	}
	for _, s := range o.Strategies {
		if !slices.Contains(Strategies, s) {
			return nil, fmt.Errorf("sim: strategy %q: want one of %s", s, strings.Join(Strategies, ", "))
		}
	}
	for k := range evs {
		if err := evs[k].Validate(); err != nil {
			return nil, fmt.Errorf("sim: event %d (%s %s): %w", k+1, evs[k].Kind, cmp.Or(evs[k].Name, evs[k].Target), err)
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
	ix := newTopoIndex(t)
	for k := range evs {
		if err := ix.check(&evs[k]); err != nil {
			return nil, fmt.Errorf("sim: event %d (%s %s): %w", k+1, evs[k].Kind, cmp.Or(evs[k].Name, evs[k].Target), err)
		}
	}
	rep := &Report{Nodes: len(t.Nodes), Sites: len(t.Sites), Regions: len(t.Regions), Events: len(evs), EstimatedRTT: t.pos == nil}
	results, err := replayEach(o.Strategies, o.Parallel, func(name string) (Result, error) {
		return newRunner(t, ix, eng, name, o.Seed).run(evs)
	}, o.Progress)
	if err != nil {
		return nil, err
	}
	rep.Results = results
	return rep, nil
}

// topoIndex is what every strategy reads of the topology, built once.
type topoIndex struct {
	t        *Topology
	byName   map[string]int32
	siteIdx  map[string]int32
	siteOf   []int32
	tierOf   map[string][]int32 // tier → nodes
	fabrics  []string
	fabNodes map[string][]int32
	fabSite  map[string]int32
	gpuModel []string // lower-case model of a node's GPUs
	healthy  []int    // healthy GPUs per node
	holds    map[dataAt]bool
	siteRep  []int32 // a site's representative node: where its clients are
	siteCrd  []*coordinate.Coordinate
}

type dataAt struct {
	site int32
	data string
}

func newTopoIndex(t *Topology) *topoIndex {
	ix := &topoIndex{t: t, byName: make(map[string]int32, len(t.Nodes)), siteIdx: map[string]int32{},
		siteOf: make([]int32, len(t.Nodes)), tierOf: map[string][]int32{}, fabNodes: map[string][]int32{},
		fabSite: map[string]int32{}, gpuModel: make([]string, len(t.Nodes)), healthy: make([]int, len(t.Nodes)),
		holds: map[dataAt]bool{}}
	for s, site := range t.Sites {
		ix.siteIdx[site.Name] = int32(s)
		for _, i := range site.Nodes {
			ix.siteOf[i] = int32(s)
		}
		ix.siteRep = append(ix.siteRep, int32(site.Nodes[0]))
		var cs []*coordinate.Coordinate
		for _, i := range site.Nodes {
			cs = append(cs, t.Nodes[i].Coord)
		}
		ix.siteCrd = append(ix.siteCrd, placement.ClientCoordinate(cs))
	}
	for i := range t.Nodes {
		n := &t.Nodes[i]
		ix.byName[n.Name] = int32(i)
		ix.tierOf[n.Tier] = append(ix.tierOf[n.Tier], int32(i))
		if n.Fabric != "" {
			if _, ok := ix.fabNodes[n.Fabric]; !ok {
				ix.fabrics = append(ix.fabrics, n.Fabric)
				ix.fabSite[n.Fabric] = ix.siteOf[i]
			}
			ix.fabNodes[n.Fabric] = append(ix.fabNodes[n.Fabric], int32(i))
		}
		for _, g := range n.GPUs {
			if g.Healthy {
				ix.healthy[i]++
			}
		}
		if len(n.GPUs) > 0 {
			ix.gpuModel[i] = strings.ToLower(n.GPUs[0].Model)
		}
		for _, a := range n.Artifacts {
			ix.holds[dataAt{ix.siteOf[i], a}] = true
		}
		for _, d := range n.Datasets {
			ix.holds[dataAt{ix.siteOf[i], d}] = true
		}
	}
	return ix
}

// check reports an event that names what the topology lacks.
func (ix *topoIndex) check(e *Event) error {
	for _, c := range e.Clients {
		if _, ok := ix.siteIdx[c]; !ok {
			return fmt.Errorf("clients: no site %q", c)
		}
	}
	switch e.Kind {
	case EventSiteDown:
		if _, ok := ix.siteIdx[e.Target]; !ok {
			return fmt.Errorf("target: no site %q", e.Target)
		}
	case EventNodeDown:
		if _, ok := ix.byName[e.Target]; !ok {
			return fmt.Errorf("target: no node %q", e.Target)
		}
	}
	return nil
}

// workload is a placed arrival.
type workload struct {
	ev     *Event
	req    *placement.Request
	nodes  []int32
	gpus   [][]int // GPU indexes taken per node
	member placement.Resources
}

// runner replays a trace for one strategy.
type runner struct {
	ix       *topoIndex
	eng      *placement.Engine
	strategy string
	snap     *placement.Snapshot
	rng      *rand.Rand
	seed     uint64

	alive    []bool
	cpu, mem []int64
	gpus     []int                // healthy free GPUs
	work     map[string]*workload // by request key
	order    []string             // keys in arrival order
	has      map[dataAt]bool      // data copied to a site during the run
	retrains []*workload
	nearest  map[int32][]int32
	pools    map[string][]int32
	res      Result
	durs     []time.Duration
}

func newRunner(t *Topology, ix *topoIndex, eng *placement.Engine, name string, seed uint64) *runner {
	r := &runner{ix: ix, eng: eng, strategy: name, snap: t.Snapshot.Clone(), seed: seed,
		rng:   rand.New(rand.NewPCG(seed, 0x5712a7)),
		alive: make([]bool, len(t.Nodes)), cpu: make([]int64, len(t.Nodes)), mem: make([]int64, len(t.Nodes)),
		gpus: make([]int, len(t.Nodes)), work: map[string]*workload{}, has: map[dataAt]bool{}, nearest: map[int32][]int32{}, pools: map[string][]int32{},
		res: Result{Strategy: name}}
	for i := range t.Nodes {
		n := &t.Nodes[i]
		r.alive[i], r.cpu[i], r.mem[i] = n.Alive, n.FreeCPU, n.FreeMemory
		for _, g := range n.GPUs {
			if g.Healthy && g.Free {
				r.gpus[i]++
			}
		}
	}
	return r
}

func (r *runner) run(evs []Event) (Result, error) {
	start := time.Now()
	for k := range evs {
		e := &evs[k]
		switch e.Kind {
		case EventService:
			r.res.Services++
			r.arrive(e, r.seed^uint64(k+1))
		case EventTraining:
			r.res.Jobs++
			r.arrive(e, r.seed^uint64(k+1))
		case EventSiteDown:
			if err := r.down(r.ix.t.Sites[r.ix.siteIdx[e.Target]].Nodes); err != nil {
				return r.res, err
			}
		case EventNodeDown:
			if err := r.down([]int{int(r.ix.byName[e.Target])}); err != nil {
				return r.res, err
			}
		case EventDrift:
			r.drift(e, r.seed^uint64(k+1))
		}
	}
	r.finish()
	r.res.Elapsed = time.Since(start)
	return r.res, nil
}

// arrive places an arrival; what cannot be placed is kept with fewer
// nodes, and counts as missing its SLO.
func (r *runner) arrive(e *Event, seed uint64) {
	req := e.Request(seed)
	w := &workload{ev: e, req: req, member: req.Resources}
	if req.Kind == placement.Training {
		w.member.GPUs = req.Gang.GPUsPerNode
	}
	r.work[req.Key] = w
	r.order = append(r.order, req.Key)
	r.place(w, req)
}

// place places req (all of w, or the replicas w lost) and adds what it
// placed to w.
func (r *runner) place(w *workload, req *placement.Request) int {
	start := time.Now()
	var nodes []int32
	switch r.strategy {
	case StrategyStrata, StrategyCloudOnly:
		q := req
		if r.strategy == StrategyCloudOnly {
			c := *req
			c.Tiers = []string{placement.TierCloud}
			c.Latency.P99 = 0
			q = &c
		}
		d, err := r.eng.Place(r.snap, q)
		if err == nil && (d.Feasible || req.Kind == placement.Inference) {
			for _, p := range d.Placements {
				nodes = append(nodes, r.ix.byName[p.Node])
			}
		}
	default:
		if req.Kind == placement.Training {
			nodes = r.gang(req, w.member)
		} else {
			nodes = r.replicas(req, w.member)
		}
	}
	r.durs = append(r.durs, time.Since(start))
	r.res.Decisions++
	for _, i := range nodes {
		taken, err := r.snap.Reserve(r.ix.t.Nodes[i].Name, w.member)
		if err != nil {
			continue // the snapshot refused what the mirror allowed: not placed
		}
		r.cpu[i] -= w.member.CPU
		r.mem[i] -= w.member.Memory
		r.gpus[i] -= len(taken)
		w.nodes = append(w.nodes, i)
		w.gpus = append(w.gpus, taken)
		r.move(w, i)
	}
	return len(nodes)
}

// move counts the bytes a placement on node i copies into its site.
func (r *runner) move(w *workload, i int32) {
	if w.ev.Data == "" {
		return
	}
	at := dataAt{r.ix.siteOf[i], w.ev.Data}
	if r.ix.holds[at] || r.has[at] {
		return
	}
	r.has[at] = true
	r.res.EgressBytes += w.ev.Bytes
}

// fits says whether node i could take one member m (by the runner's
// mirror of free resources).
func (r *runner) fits(i int32, m placement.Resources) bool {
	if !r.alive[i] || r.cpu[i] < m.CPU || r.mem[i] < m.Memory || r.gpus[i] < m.GPUs {
		return false
	}
	return m.GPUs == 0 || m.GPUModel == "" || strings.Contains(r.ix.gpuModel[i], strings.ToLower(m.GPUModel))
}

// pool is every node of the request's tiers, in one slice.
func (r *runner) pool(req *placement.Request) []int32 {
	key := strings.Join(req.Tiers, ",")
	if p, ok := r.pools[key]; ok {
		return p
	}
	p := slices.Concat(r.candidates(req)...)
	r.pools[key] = p
	return p
}

// candidates are the nodes of the request's tiers.
func (r *runner) candidates(req *placement.Request) [][]int32 {
	var out [][]int32
	for _, tier := range req.Tiers {
		out = append(out, r.ix.tierOf[tier])
	}
	return out
}

// replicas is the baselines' inference placement: distinct nodes, one per
// site, not excluded.
func (r *runner) replicas(req *placement.Request, m placement.Resources) []int32 {
	need := max(1, req.Replicas)
	// A replica's site is used by the replicas kept (Exclude) and those
	// taken: at most one per site.
	var usedSite []int32
	for _, x := range req.Exclude {
		if i, ok := r.ix.byName[x]; ok {
			usedSite = append(usedSite, r.ix.siteOf[i])
		}
	}
	ok := func(i int32) bool { return r.fits(i, m) && !slices.Contains(usedSite, r.ix.siteOf[i]) }
	var out []int32
	take := func(i int32) {
		out = append(out, i)
		usedSite = append(usedSite, r.ix.siteOf[i])
	}
	switch r.strategy {
	case StrategyRandom:
		all := r.pool(req)
		if len(all) == 0 {
			return nil
		}
		for tries := 0; len(out) < need && tries < 64*need; tries++ {
			if i := all[r.rng.IntN(len(all))]; ok(i) {
				take(i)
			}
		}
		for off, k := r.rng.IntN(len(all)), 0; len(out) < need && k < len(all); k++ {
			if i := all[(off+k)%len(all)]; ok(i) {
				take(i)
			}
		}
	case StrategyLeastLoaded:
		// One pass keeps the best node of each of the need best sites.
		type pick struct {
			i int32
			v float64
		}
		var best []pick
		for _, tier := range r.candidates(req) {
			for _, i := range tier {
				n := &r.ix.t.Nodes[i]
				if n.CPU <= 0 || !ok(i) {
					continue
				}
				v := float64(r.cpu[i]) / float64(n.CPU)
				k := slices.IndexFunc(best, func(p pick) bool { return r.ix.siteOf[p.i] == r.ix.siteOf[i] })
				switch {
				case k >= 0 && best[k].v >= v:
					continue
				case k >= 0:
					best = slices.Delete(best, k, k+1)
				case len(best) == need && best[need-1].v >= v:
					continue
				case len(best) == need:
					best = best[:need-1]
				}
				at, _ := slices.BinarySearchFunc(best, v, func(p pick, v float64) int { return cmp.Compare(v, p.v) })
				best = slices.Insert(best, at, pick{i, v})
			}
		}
		for _, p := range best {
			take(p.i)
		}
	case StrategyNearestSite:
		from := int32(-1)
		if len(req.Latency.Clients) > 0 {
			from = r.ix.siteIdx[req.Latency.Clients[0]]
		}
		allowed := map[string]bool{}
		for _, t := range req.Tiers {
			allowed[t] = true
		}
		for _, s := range r.nearestSites(from) {
			if len(out) == need {
				break
			}
			site := &r.ix.t.Sites[s]
			if !allowed[site.Tier] {
				continue
			}
			for _, i := range site.Nodes {
				if ok(int32(i)) {
					take(int32(i))
					break
				}
			}
		}
	}
	return out
}

// nearestSites orders the sites by predicted RTT from site from (-1: in
// index order).
func (r *runner) nearestSites(from int32) []int32 {
	if s, ok := r.nearest[from]; ok {
		return s
	}
	out := make([]int32, len(r.ix.t.Sites))
	for k := range out {
		out[k] = int32(k)
	}
	if from >= 0 {
		c := r.ix.siteCrd[from]
		dist := make([]float64, len(out))
		for k := range out {
			dist[k] = math.Inf(1) // a site without coordinates is farthest
			if d := r.ix.siteCrd[k]; c != nil && d != nil {
				dist[k] = c.DistanceTo(d).Seconds()
			}
		}
		dist[from] = -1
		slices.SortStableFunc(out, func(a, b int32) int { return cmp.Compare(dist[a], dist[b]) })
	}
	r.nearest[from] = out
	return out
}

// gang is the baselines' training placement: one fabric of the request's
// tiers with enough nodes that fit, chosen by the strategy.
func (r *runner) gang(req *placement.Request, m placement.Resources) []int32 {
	need := max(1, req.Gang.Nodes)
	excl := map[int32]bool{}
	for _, x := range req.Exclude {
		if i, ok := r.ix.byName[x]; ok {
			excl[i] = true
		}
	}
	allowed := map[string]bool{}
	for _, t := range req.Tiers {
		allowed[t] = true
	}
	members := func(f string) ([]int32, int) {
		var out []int32
		free := 0
		for _, i := range r.ix.fabNodes[f] {
			if !excl[i] && r.fits(i, m) {
				out = append(out, i)
				free += r.gpus[i]
			}
		}
		return out, free
	}
	var data string
	if len(req.Data) > 0 {
		data = req.Data[0].Dataset
	}
	order := slices.Clone(r.ix.fabrics)
	switch r.strategy {
	case StrategyRandom:
		r.rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	case StrategyNearestSite:
		r.rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		holds := func(f string) bool {
			at := dataAt{r.ix.fabSite[f], data}
			return data != "" && (r.ix.holds[at] || r.has[at])
		}
		slices.SortStableFunc(order, func(a, b string) int {
			return cmp.Compare(btoi(!holds(a)), btoi(!holds(b)))
		})
	}
	var best []int32
	bestFree := -1
	for _, f := range order {
		if !allowed[r.ix.t.Nodes[r.ix.fabNodes[f][0]].Tier] {
			continue
		}
		ms, free := members(f)
		if len(ms) < need {
			continue
		}
		if r.strategy != StrategyLeastLoaded {
			return ms[:need]
		}
		if free > bestFree {
			best, bestFree = ms[:need], free
		}
	}
	return best
}

// down takes nodes down and places again what ran there: the replicas a
// service lost, a whole gang that lost a member (its other members are
// released first). The snapshot is rebuilt from its nodes with the dead
// ones down and the released members freed: a snapshot takes
// reservations, not releases.
func (r *runner) down(nodes []int) error {
	lost := map[int32]bool{}
	for _, i := range nodes {
		if r.alive[i] {
			r.alive[i] = false
			lost[int32(i)] = true
		}
	}
	if len(lost) == 0 {
		return nil
	}
	all := slices.Concat(r.order, r.keys(r.retrains))
	snapNodes := r.snap.Nodes()
	for i := range lost {
		snapNodes[i].Alive = false
	}
	var hits []*workload
	var counts []int
	for _, key := range all {
		w := r.work[key]
		hit := 0
		for _, i := range w.nodes {
			if lost[i] {
				hit++
			}
		}
		if hit == 0 {
			continue
		}
		hits, counts = append(hits, w), append(counts, hit)
		if w.req.Kind == placement.Training {
			r.release(w, snapNodes)
			continue
		}
		var keep []int32
		var keepG [][]int
		for k, i := range w.nodes {
			if !lost[i] {
				keep = append(keep, i)
				keepG = append(keepG, w.gpus[k])
			}
		}
		w.nodes, w.gpus = keep, keepG
	}
	var b placement.Builder
	b.Add(snapNodes...)
	snap, err := b.Build()
	if err != nil {
		return fmt.Errorf("rebuilding the snapshot: %w", err)
	}
	r.snap = snap.Clone()
	for k, w := range hits {
		q := *w.req
		if w.req.Kind == placement.Training {
			q.Exclude = nil
			need := max(1, w.req.Gang.Nodes)
			if got := r.place(w, &q); got == need {
				r.res.Replaced += got
			} else {
				r.res.Lost += need
			}
			continue
		}
		q.Replicas = counts[k]
		q.Exclude = nil
		for _, i := range w.nodes {
			q.Exclude = append(q.Exclude, r.ix.t.Nodes[i].Name)
		}
		got := r.place(w, &q)
		r.res.Replaced += got
		r.res.Lost += counts[k] - got
	}
	return nil
}

func (r *runner) keys(ws []*workload) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.req.Key)
	}
	return out
}

// release gives a gang's surviving members' resources back, in nodes
// (the snapshot about to be rebuilt) and the runner's mirror.
func (r *runner) release(w *workload, nodes []placement.Node) {
	for k, i := range w.nodes {
		if !r.alive[i] {
			continue
		}
		n := &nodes[i]
		n.FreeCPU += w.member.CPU
		n.FreeMemory += w.member.Memory
		for _, g := range w.gpus[k] {
			n.GPUs[g].Free = true
		}
		r.cpu[i] += w.member.CPU
		r.mem[i] += w.member.Memory
		r.gpus[i] += len(w.gpus[k])
	}
	w.nodes, w.gpus = nil, nil
}

// drift places a retrain near the service's model and rolls the new
// model out to every site serving the service.
func (r *runner) drift(e *Event, seed uint64) {
	r.res.Retrains++
	svc, ok := r.work["InferenceService/"+e.Name]
	if !ok {
		return
	}
	job := &Event{Kind: EventTraining, Name: fmt.Sprintf("%s-retrain-%d", e.Name, r.res.Retrains),
		Nodes: 1, GPUs: max(1, e.GPUs), GPUModel: e.GPUModel, CPU: e.CPU, Memory: e.Memory}
	req := job.Request(seed)
	req.Gang.SameFabric = false
	w := &workload{ev: job, req: req, member: req.Resources}
	w.member.GPUs = req.Gang.GPUsPerNode
	r.work[req.Key] = w
	r.retrains = append(r.retrains, w)
	if r.place(w, req) == 0 {
		return
	}
	r.res.RetrainsPlaced++
	sites := map[int32]bool{}
	for _, i := range svc.nodes {
		sites[r.ix.siteOf[i]] = true
	}
	for s := range sites {
		if s != r.ix.siteOf[w.nodes[0]] {
			r.res.EgressBytes += svc.ev.Bytes
		}
	}
}

// finish computes the end-of-trace measures.
func (r *runner) finish() {
	t := r.ix.t
	r.res.SiteReplicas = map[string]int{}
	for _, key := range r.order {
		w := r.work[key]
		for _, i := range w.nodes {
			r.res.SiteReplicas[t.Sites[r.ix.siteOf[i]].Name]++
		}
		switch w.req.Kind {
		case placement.Training:
			if len(w.nodes) == max(1, w.req.Gang.Nodes) {
				r.res.JobsPlaced++
			}
		case placement.Inference:
			if len(w.nodes) == w.req.Replicas {
				r.res.ServicesPlaced++
			}
			for _, c := range w.ev.Clients {
				r.res.ClientPairs++
				from := int(r.ix.siteRep[r.ix.siteIdx[c]])
				best := time.Duration(-1)
				for _, i := range w.nodes {
					if d := t.TrueRTT(from, int(i)); best < 0 || d < best {
						best = d
					}
				}
				if best >= 0 && (w.ev.P99 == 0 || best <= w.ev.P99) {
					r.res.SLOAttainment++
				}
			}
		}
	}
	if r.res.ClientPairs > 0 {
		r.res.SLOAttainment /= float64(r.res.ClientPairs)
	}
	for _, f := range r.ix.fabrics {
		for _, i := range r.ix.fabNodes[f] {
			if !r.alive[i] {
				continue
			}
			r.res.FreeGPUs += r.gpus[i]
			if r.gpus[i] < r.ix.healthy[i] {
				r.res.StrandedGPUs += r.gpus[i]
			}
		}
	}
	if r.res.FreeGPUs > 0 {
		r.res.GPUFragmentation = float64(r.res.StrandedGPUs) / float64(r.res.FreeGPUs)
	}
	slices.Sort(r.durs)
	if n := len(r.durs); n > 0 {
		r.res.DecisionP50 = r.durs[n/2]
		r.res.DecisionP99 = r.durs[min(n-1, n*99/100)]
	}
}

// WriteTable writes the report as a table for people: one row per
// strategy.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%d nodes, %d sites, %d regions; %d events\n\n", rep.Nodes, rep.Sites, rep.Regions, rep.Events)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STRATEGY\tSLO MET\tSERVICES PLACED\tJOBS PLACED\tCROSS-SITE\tGPU FRAG\tDECISION P50\tP99\tREPLACED\tLOST\tTIME\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d/%d\t%d/%d\t%s\t%.1f%%\t%s\t%s\t%d\t%d\t%s\t\n", r.Strategy, 100*r.SLOAttainment,
			r.ServicesPlaced, r.Services, r.JobsPlaced+r.RetrainsPlaced, r.Jobs+r.Retrains, formatBytes(r.EgressBytes),
			100*r.GPUFragmentation, roundDur(r.DecisionP50), roundDur(r.DecisionP99), r.Replaced, r.Lost, r.Elapsed.Round(100*time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rtt := "true RTT"
	if rep.EstimatedRTT {
		rtt = "RTT the coordinates estimate (no ground truth on a live mesh)"
	}
	_, err := fmt.Fprint(w, `
SLO MET     (service, client site) pairs whose nearest replica is within the p99, by `+rtt+`
CROSS-SITE  models and datasets copied to a site that lacked them, and retrained models rolled out
GPU FRAG    free GPUs on fabric nodes where some GPU is in use
REPLACED    replicas and gang members placed again after a failure; LOST found no place
`)
	return err
}

func formatBytes(n int64) string {
	switch {
	case n >= 1e12:
		return fmt.Sprintf("%.2f TB", float64(n)/1e12)
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	default:
		return fmt.Sprintf("%.0f MB", float64(n)/1e6)
	}
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	}
	return d
}

// replayEach runs replay once per strategy, at most parallel at once
// (GOMAXPROCS when not positive), and returns the results in the order of
// strategies; progress, when set, is told each result as it comes. The
// errors of every strategy that failed are joined.
func replayEach[R any](strategies []string, parallel int, replay func(name string) (R, error), progress func(R)) ([]R, error) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]R, len(strategies))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for k, name := range strategies {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := replay(name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("sim: %s: %w", name, err))
				return
			}
			out[k] = res
			if progress != nil {
				progress(res)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
