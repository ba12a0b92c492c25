package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
)

// GPU models the generator uses.
const (
	ModelH100 = "NVIDIA H100 80GB HBM3"
	ModelA100 = "NVIDIA A100-SXM4-40GB"
	ModelL4   = "NVIDIA L4"
	ModelT4   = "Tesla T4"
)

const gib = int64(1) << 30

// Options describes a topology. Zero fields take the documented defaults.
type Options struct {
	// Nodes is the number of nodes. Default 1000.
	Nodes int
	// Seed drives every random choice.
	Seed uint64
	// Regions is the number of regions. Default max(3, Nodes/1000).
	Regions int
	// EdgeFraction and OnpremFraction split the nodes between tiers; cloud
	// takes the rest. Defaults 0.7 and 0.2.
	EdgeFraction, OnpremFraction float64
	// DeadFraction is the share of nodes not alive. Default 0.01; negative
	// means none.
	DeadFraction float64
	// Noise bounds the per-pair relative deviation of true RTT from the
	// plane model. Default 0.05; negative means none.
	Noise float64
	// Vivaldi computes coordinates by running serf's coordinate.Client
	// against the ground truth (see the package doc) instead of directly.
	Vivaldi bool
	// VivaldiRounds is the number of updates per node in Vivaldi mode, each
	// against a random peer. Default 400.
	VivaldiRounds int
	// Sites, when set, is the number of sites: the edge nodes are split
	// evenly over the sites the data centres (one per other region) and
	// cloud regions leave. Zero draws edge sites of 4–24 nodes.
	Sites int
}

func (o *Options) ensureDefaults() {
	if o.Nodes == 0 {
		o.Nodes = 1000
	}
	if o.Regions == 0 {
		o.Regions = max(3, o.Nodes/1000)
	}
	if o.EdgeFraction == 0 {
		o.EdgeFraction = 0.7
	}
	if o.OnpremFraction == 0 {
		o.OnpremFraction = 0.2
	}
	if o.DeadFraction == 0 {
		o.DeadFraction = 0.01
	}
	if o.DeadFraction < 0 {
		o.DeadFraction = 0
	}
	if o.Noise == 0 {
		o.Noise = 0.05
	}
	if o.Noise < 0 {
		o.Noise = 0
	}
	if o.VivaldiRounds == 0 {
		o.VivaldiRounds = 400
	}
}

// Validate reports every problem with the options.
func (o *Options) Validate() error {
	var errs []error
	if o.Nodes < 0 {
		errs = append(errs, fmt.Errorf("sim: Nodes %d must not be negative", o.Nodes))
	}
	if o.Regions < 0 {
		errs = append(errs, fmt.Errorf("sim: Regions %d must not be negative", o.Regions))
	}
	if o.EdgeFraction < 0 || o.OnpremFraction < 0 || o.EdgeFraction+o.OnpremFraction > 1 {
		errs = append(errs, fmt.Errorf("sim: EdgeFraction %v + OnpremFraction %v must lie in [0, 1]", o.EdgeFraction, o.OnpremFraction))
	}
	if o.Sites < 0 {
		errs = append(errs, fmt.Errorf("sim: Sites %d must not be negative", o.Sites))
	}
	if o.DeadFraction > 1 || o.Noise >= 1 {
		errs = append(errs, errors.New("sim: DeadFraction and Noise must be below 1"))
	}
	return errors.Join(errs...)
}

// Site is one site of the topology.
type Site struct {
	Name   string
	Region string
	Tier   string
	// Nodes are indexes into Topology.Nodes.
	Nodes []int
}

// Topology is a generated estate.
type Topology struct {
	// Nodes are the generated nodes, coordinates included.
	Nodes []placement.Node
	// Sites lists the sites, edge first.
	Sites []Site
	// Regions lists the region names.
	Regions []string
	// Fabrics lists the RDMA fabric IDs.
	Fabrics []string
	// Datasets lists the dataset names held somewhere.
	Datasets []string
	// Snapshot is the nodes, built.
	Snapshot *placement.Snapshot

	pos    [][2]float64 // ms
	height []float64    // ms
	noise  float64
	seed   uint64
}

// Generate builds a topology.
func Generate(opts Options) (*Topology, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.ensureDefaults()
	g := &generator{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed)), t: &Topology{noise: opts.Noise, seed: opts.Seed}}
	g.regions()
	nEdge := int(float64(opts.Nodes) * opts.EdgeFraction)
	nOnprem := int(float64(opts.Nodes) * opts.OnpremFraction)
	g.edge(nEdge)
	g.onprem(nOnprem)
	g.cloud(opts.Nodes - nEdge - nOnprem)
	t := g.t
	if opts.Vivaldi {
		if err := t.vivaldi(g.rng, opts.VivaldiRounds); err != nil {
			return nil, err
		}
	} else {
		for i := range t.Nodes {
			c := coordinate.NewCoordinate(coordinate.DefaultConfig())
			c.Vec[0], c.Vec[1] = t.pos[i][0]/1e3, t.pos[i][1]/1e3
			c.Height = t.height[i] / 1e3
			c.Error = 0.1
			t.Nodes[i].Coord = c
		}
	}
	var b placement.Builder
	b.Add(t.Nodes...)
	snap, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	t.Snapshot = snap
	return t, nil
}

// generator builds a Topology from Options with one random source, drawn
// in a fixed order (regions, edge, on-prem, cloud), so a seed gives one
// estate.
type generator struct {
	opts    Options
	rng     *rand.Rand
	t       *Topology
	centres [][2]float64 // each region's centre, ms
}

// regions lays the regions on a jittered grid over a 150 × 100 ms world.
func (g *generator) regions() {
	cols := int(math.Ceil(math.Sqrt(float64(g.opts.Regions) * 1.5)))
	rows := (g.opts.Regions + cols - 1) / cols
	g.centres = make([][2]float64, g.opts.Regions)
	for r := range g.opts.Regions {
		cx := (float64(r%cols) + 0.5 + 0.3*(g.rng.Float64()-0.5)) * 150 / float64(cols)
		cy := (float64(r/cols) + 0.5 + 0.3*(g.rng.Float64()-0.5)) * 100 / float64(rows)
		g.centres[r] = [2]float64{cx, cy}
		g.t.Regions = append(g.t.Regions, fmt.Sprintf("r%02d", r))
	}
}

// inDisk returns a point drawn uniformly in the disk of radius around c.
func (g *generator) inDisk(c [2]float64, radius float64) [2]float64 {
	a := g.rng.Float64() * 2 * math.Pi
	d := radius * math.Sqrt(g.rng.Float64())
	return [2]float64{c[0] + d*math.Cos(a), c[1] + d*math.Sin(a)}
}

// add adds node n near its site's point, with height h (ms), and
// returns its index.
func (g *generator) add(n placement.Node, site [2]float64, h float64) int {
	t := g.t
	n.ID = nodeID(g.opts.Seed, n.Name)
	n.Alive = g.rng.Float64() >= g.opts.DeadFraction
	t.Nodes = append(t.Nodes, n)
	t.pos = append(t.pos, g.inDisk(site, 0.1))
	t.height = append(t.height, h)
	return len(t.Nodes) - 1
}

// free draws what is free of total: a fraction from lo to hi.
func (g *generator) free(total int64, lo, hi float64) int64 {
	return int64(float64(total) * (lo + (hi-lo)*g.rng.Float64()))
}

// edge adds nEdge edge nodes.
func (g *generator) edge(nEdge int) {
	// Edge: sites of 4–24 small boxes (or what Options.Sites leaves), a
	// quarter with one small GPU.
	edgeSites := 0
	if g.opts.Sites > 0 {
		edgeSites = max(1, g.opts.Sites-(g.opts.Regions+1)/2-g.opts.Regions)
	}
	for r, left := 0, nEdge; left > 0; r = (r + 1) % g.opts.Regions {
		size := min(left, 4+g.rng.IntN(21))
		if edgeSites > 0 {
			k := len(g.t.Sites)
			size = min(left, max(1, nEdge/edgeSites+btoi(k < nEdge%edgeSites)))
		}
		left -= size
		site := Site{Name: fmt.Sprintf("edge-%s-%03d", g.t.Regions[r], len(g.t.Sites)), Region: g.t.Regions[r], Tier: placement.TierEdge}
		at := g.inDisk(g.centres[r], 5)
		for k := range size {
			cores := []int64{4, 8, 16}[g.rng.IntN(3)]
			mem := []int64{8, 16, 32, 64}[g.rng.IntN(4)] * gib
			arch := "amd64"
			if g.rng.Float64() < 0.3 {
				arch = "arm64"
			}
			n := placement.Node{
				Name: fmt.Sprintf("%s-n%02d", site.Name, k), Tier: placement.TierEdge,
				Site: site.Name, Region: site.Region, Arch: arch,
				CPU: cores * 1000, FreeCPU: g.free(cores*1000, 0.1, 0.95),
				Memory: mem, FreeMemory: g.free(mem, 0.1, 0.95),
				Labels: map[string]string{"hw": []string{"nuc", "rugged", "1u"}[g.rng.IntN(3)]},
			}
			if g.rng.Float64() < 0.25 {
				gpu := placement.GPU{Model: ModelT4, Memory: 16 * gib, Healthy: true, Free: g.rng.Float64() < 0.6}
				if g.rng.Float64() < 0.5 {
					gpu.Model, gpu.Memory = ModelL4, 24*gib
				}
				n.GPUs = []placement.GPU{gpu}
			}
			if g.rng.Float64() < 0.3 {
				n.Artifacts = []string{fmt.Sprintf("sha256:model-%02d", g.rng.IntN(20))}
			}
			site.Nodes = append(site.Nodes, g.add(n, at, 0.3+0.7*g.rng.Float64()))
		}
		g.t.Sites = append(g.t.Sites, site)
	}

}

// onprem adds nOnprem on-prem nodes.
func (g *generator) onprem(nOnprem int) {
	// On-prem: a data centre in every other region; racks of 16 nodes with
	// 8 H100s each, one InfiniBand fabric per pod of 2 racks.
	dcRegions := []int{}
	for r := 0; r < g.opts.Regions; r += 2 {
		dcRegions = append(dcRegions, r)
	}
	dcSites := map[int]*Site{}
	dcAt := map[int][2]float64{}
	for k := 0; k < nOnprem; k++ {
		r := dcRegions[(k/64)%len(dcRegions)]
		s := dcSites[r]
		if s == nil {
			s = &Site{Name: "dc-" + g.t.Regions[r], Region: g.t.Regions[r], Tier: placement.TierOnprem}
			dcSites[r] = s
			dcAt[r] = g.inDisk(g.centres[r], 2)
		}
		idx := len(s.Nodes)
		rack := idx / 16
		pod := rack / 2
		fabric := fmt.Sprintf("ib-%s-pod%02d", g.t.Regions[r], pod)
		if idx%32 == 0 {
			g.t.Fabrics = append(g.t.Fabrics, fabric)
		}
		n := placement.Node{
			Name: fmt.Sprintf("%s-r%02d-n%02d", s.Name, rack, idx%16), Tier: placement.TierOnprem,
			Site: s.Name, Region: s.Region, Arch: "amd64",
			Rack: fmt.Sprintf("%s-rack%02d", s.Name, rack), Fabric: fabric,
			CPU: 128000, Memory: 2048 * gib,
			Labels: map[string]string{"hw": "hgx"},
		}
		n.GPUs = gpus(g.rng, 8, ModelH100, 80*gib)
		busy := popFree(n.GPUs)
		n.FreeCPU = n.CPU - int64(8-busy)*12000
		n.FreeMemory = n.Memory - int64(8-busy)*200*gib
		if idx%32 < 3 && g.rng.Float64() < 0.5 {
			ds := fmt.Sprintf("ds-%02d:v1", g.rng.IntN(10))
			n.Datasets = []string{ds}
			g.t.Datasets = appendUnique(g.t.Datasets, ds)
		}
		s.Nodes = append(s.Nodes, g.add(n, dcAt[r], 0.05+0.15*g.rng.Float64()))
	}
	for _, r := range dcRegions {
		if s := dcSites[r]; s != nil {
			g.t.Sites = append(g.t.Sites, *s)
		}
	}

}

// cloud adds nCloud cloud nodes.
func (g *generator) cloud(nCloud int) {
	// Cloud: a site per region; CPU instances, single-L4 instances and
	// 8×A100 instances in placement groups of 16 (one fabric each).
	cloudSites := make([]Site, g.opts.Regions)
	cloudAt := make([][2]float64, g.opts.Regions)
	for k := 0; k < nCloud; k++ {
		r := k % g.opts.Regions
		s := &cloudSites[r]
		if s.Name == "" {
			*s = Site{Name: "cloud-" + g.t.Regions[r], Region: g.t.Regions[r], Tier: placement.TierCloud}
			cloudAt[r] = g.inDisk(g.centres[r], 2)
		}
		idx := len(s.Nodes)
		n := placement.Node{
			Name: fmt.Sprintf("%s-i%04d", s.Name, idx), Tier: placement.TierCloud,
			Site: s.Name, Region: s.Region, Arch: "amd64",
		}
		switch kind := idx % 10; {
		case kind < 3:
			pg := idx / 10 / 2
			n.Fabric = fmt.Sprintf("efa-%s-pg%02d", g.t.Regions[r], pg)
			g.t.Fabrics = appendUnique(g.t.Fabrics, n.Fabric)
			n.CPU, n.Memory = 96000, 1152*gib
			n.GPUs = gpus(g.rng, 8, ModelA100, 40*gib)
			popFree(n.GPUs)
			n.Labels = map[string]string{"instance": "p4d.24xlarge"}
		case kind < 5:
			n.CPU, n.Memory = 16000, 64*gib
			n.GPUs = gpus(g.rng, 1, ModelL4, 24*gib)
			n.Labels = map[string]string{"instance": "g6.4xlarge"}
		default:
			n.CPU, n.Memory = 32000, 128*gib
			n.Labels = map[string]string{"instance": "m7i.8xlarge"}
		}
		n.FreeCPU, n.FreeMemory = g.free(n.CPU, 0.2, 1), g.free(n.Memory, 0.2, 1)
		s.Nodes = append(s.Nodes, g.add(n, cloudAt[r], 0.05+0.15*g.rng.Float64()))
	}
	for _, s := range cloudSites {
		if s.Name != "" {
			g.t.Sites = append(g.t.Sites, s)
		}
	}

}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func gpus(rng *rand.Rand, n int, model string, mem int64) []placement.GPU {
	out := make([]placement.GPU, n)
	for j := range out {
		out[j] = placement.GPU{Model: model, Memory: mem, Healthy: rng.Float64() >= 0.01, Free: true}
	}
	// Half the nodes idle, a quarter full, a quarter partly used.
	switch p := rng.Float64(); {
	case p < 0.5:
	case p < 0.75:
		for j := range out {
			out[j].Free = false
		}
	default:
		for j := range rng.IntN(n) + 1 {
			out[j].Free = false
		}
	}
	return out
}

// popFree counts the GPUs in use.
func popFree(gs []placement.GPU) int {
	k := 0
	for _, g := range gs {
		if !g.Free {
			k++
		}
	}
	return k
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func nodeID(seed uint64, name string) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, name)
	return fmt.Sprintf("%016x", h.Sum64())
}

// TrueRTT is the ground-truth round-trip time between nodes a and b
// (indexes into Nodes). A topology from FromNodes has no ground truth:
// there it is the estimate from the nodes' coordinates.
func (t *Topology) TrueRTT(a, b int) time.Duration {
	if a == b {
		return 0
	}
	if t.pos == nil {
		return t.estimatedRTT(a, b) // from FromNodes: no ground truth
	}
	dx, dy := t.pos[a][0]-t.pos[b][0], t.pos[a][1]-t.pos[b][1]
	ms := math.Sqrt(dx*dx+dy*dy) + t.height[a] + t.height[b]
	ms *= 1 + t.noise*pairNoise(t.seed, a, b)
	return time.Duration(ms * float64(time.Millisecond))
}

// pairNoise is a symmetric, deterministic value in [-1, 1] per pair.
func pairNoise(seed uint64, a, b int) float64 {
	if a > b {
		a, b = b, a
	}
	x := seed ^ uint64(a)*0x9e3779b97f4a7c15 ^ uint64(b)*0xc2b2ae3d27d4eb4f
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/float64(1<<53)*2 - 1
}

// vivaldi runs serf coordinate clients against the ground truth: every
// round, every node measures one random peer. Starting coordinates get a
// small seeded offset so serf never needs its own (global) randomness to
// separate coincident nodes.
func (t *Topology) vivaldi(rng *rand.Rand, rounds int) error {
	cfg := coordinate.DefaultConfig()
	clients := make([]*coordinate.Client, len(t.Nodes))
	for i := range clients {
		c, err := coordinate.NewClient(cfg)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		start := coordinate.NewCoordinate(cfg)
		for d := range start.Vec {
			start.Vec[d] = (rng.Float64() - 0.5) * 1e-3
		}
		if err := c.SetCoordinate(start); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		clients[i] = c
	}
	n := len(t.Nodes)
	if n < 2 {
		for i := range t.Nodes {
			t.Nodes[i].Coord = clients[i].GetCoordinate()
		}
		return nil
	}
	for range rounds {
		for i := range n {
			j := rng.IntN(n - 1)
			if j >= i {
				j++
			}
			if _, err := clients[i].Update(t.Nodes[j].Name, clients[j].GetCoordinate(), t.TrueRTT(i, j)); err != nil {
				return fmt.Errorf("sim: vivaldi update: %w", err)
			}
		}
	}
	for i := range t.Nodes {
		t.Nodes[i].Coord = clients[i].GetCoordinate()
	}
	return nil
}

// EdgeSites returns the names of the edge sites.
func (t *Topology) EdgeSites() []string {
	var out []string
	for _, s := range t.Sites {
		if s.Tier == placement.TierEdge {
			out = append(out, s.Name)
		}
	}
	return out
}

// InferenceRequest returns a typical edge inference request drawn from
// seed: 1–4 replicas of a 1-core, 2 GiB model within p99 20 ms of one or
// two edge client sites, tiers edge → onprem → cloud, spread by site.
func (t *Topology) InferenceRequest(seed uint64) *placement.Request {
	rng := rand.New(rand.NewPCG(seed, 0x1f))
	edge := t.EdgeSites()
	clients := []string{edge[rng.IntN(len(edge))]}
	if rng.IntN(4) == 0 {
		clients = append(clients, edge[rng.IntN(len(edge))])
		if clients[1] == clients[0] {
			clients = clients[:1]
		}
	}
	return &placement.Request{
		Kind:      placement.Inference,
		Key:       fmt.Sprintf("InferenceService/svc-%d", seed),
		Replicas:  1 + rng.IntN(4),
		Resources: placement.Resources{CPU: 1000, Memory: 2 * gib},
		Latency:   placement.Latency{P99: 20 * time.Millisecond, Clients: clients},
		Tiers:     []string{placement.TierEdge, placement.TierOnprem, placement.TierCloud},
		Spread:    placement.SpreadSite,
		Data:      []placement.DataRef{{Digest: fmt.Sprintf("sha256:model-%02d", rng.IntN(20)), Bytes: 500 << 20}},
		Seed:      seed,
	}
}

// TrainingRequest returns a gang of nodes × gpusPerNode H100-class GPUs on
// one fabric, near a dataset the topology holds (when it holds any).
func (t *Topology) TrainingRequest(seed uint64, nodes, gpusPerNode int) *placement.Request {
	rng := rand.New(rand.NewPCG(seed, 0x7a))
	r := &placement.Request{
		Kind:      placement.Training,
		Key:       fmt.Sprintf("TrainingJob/job-%d", seed),
		Resources: placement.Resources{CPU: 8000, Memory: 64 * gib, GPUModel: "H100"},
		Gang:      placement.Gang{Nodes: nodes, GPUsPerNode: gpusPerNode, SameFabric: true},
		Tiers:     []string{placement.TierOnprem, placement.TierCloud},
		Seed:      seed,
	}
	if len(t.Datasets) > 0 {
		r.Data = []placement.DataRef{{Dataset: t.Datasets[rng.IntN(len(t.Datasets))], Bytes: 200 * gib}}
	}
	return r
}
