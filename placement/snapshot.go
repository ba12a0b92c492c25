package placement

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/policy"
)

// Node is one node of the mesh as the engine sees it. CPU is in
// millicores, memory in bytes.
type Node struct {
	// ID is the node's identity (from its key); unique.
	ID string `json:"id"`
	// Name is the node's name in the mesh; unique.
	Name string `json:"name"`
	// Tier is edge, onprem or cloud.
	Tier string `json:"tier"`
	// Site is the node's site (one gossip pool).
	Site string `json:"site"`
	// Region groups sites.
	Region string `json:"region"`
	// Rack is the node's rack or leaf switch, "" when unknown. Gang members
	// are kept on as few racks as the fabric allows.
	Rack string `json:"rack,omitempty"`
	// Labels are the operator's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Arch is the CPU architecture (amd64, arm64).
	Arch string `json:"arch,omitempty"`
	// CPU is the node's total CPU in millicores; FreeCPU what is unreserved.
	CPU     int64 `json:"cpu"`
	FreeCPU int64 `json:"free_cpu"`
	// Memory is the node's total memory in bytes; FreeMemory what is
	// unreserved.
	Memory     int64 `json:"memory"`
	FreeMemory int64 `json:"free_memory"`
	// GPUs lists the node's GPUs (at most 64).
	GPUs []GPU `json:"gpus,omitempty"`
	// Fabric is the RDMA fabric ID, "" for none.
	Fabric string `json:"fabric,omitempty"`
	// Alive is whether the mesh considers the node alive.
	Alive bool `json:"alive"`
	// Coord is the node's Vivaldi coordinate; nil when unknown (the node
	// then fails every latency SLO).
	Coord *coordinate.Coordinate `json:"coord,omitempty"`
	// Artifacts are the digests of the artifacts the node holds.
	Artifacts []string `json:"artifacts,omitempty"`
	// Datasets are the dataset names the node holds.
	Datasets []string `json:"datasets,omitempty"`
}

// GPU is one GPU of a node: the type CEL expressions see, so a node's
// GPUs need no copy into its policy view.
type GPU = policy.GPU

// Bandwidth is the link model used for data gravity: the bytes per second
// data moves at between two places, by how close they are. The cost of
// moving data is its size divided by the bandwidth from its nearest holder;
// data already on the node (or, for a gang, anywhere on its fabric) costs
// nothing.
type Bandwidth struct {
	// SameFabric is the RDMA bandwidth between nodes of one fabric.
	// Default 25 GB/s (200 Gb/s InfiniBand).
	SameFabric float64 `json:"same_fabric"`
	// SameSite is the bandwidth inside a site. Default 1.25 GB/s (10 GbE).
	SameSite float64 `json:"same_site"`
	// SameRegion is the bandwidth between sites of a region. Default
	// 125 MB/s (1 Gb/s).
	SameRegion float64 `json:"same_region"`
	// CrossRegion is the bandwidth between regions, and from outside the
	// mesh when no node holds the data. Default 25 MB/s (200 Mb/s).
	CrossRegion float64 `json:"cross_region"`
}

// DefaultBandwidth returns the default link model.
func DefaultBandwidth() Bandwidth {
	return Bandwidth{SameFabric: 25e9, SameSite: 1.25e9, SameRegion: 125e6, CrossRegion: 25e6}
}

func (b *Bandwidth) ensureDefaults() {
	d := DefaultBandwidth()
	if b.SameFabric <= 0 {
		b.SameFabric = d.SameFabric
	}
	if b.SameSite <= 0 {
		b.SameSite = d.SameSite
	}
	if b.SameRegion <= 0 {
		b.SameRegion = d.SameRegion
	}
	if b.CrossRegion <= 0 {
		b.CrossRegion = d.CrossRegion
	}
}

// Errors about snapshots.
var (
	// ErrInvalidSnapshot wraps every Build error.
	ErrInvalidSnapshot = errors.New("placement: invalid snapshot")
	// ErrImmutable is returned by Reserve on a snapshot from Build: reserve
	// on a Clone.
	ErrImmutable = errors.New("placement: snapshot from Build is immutable; reserve on a Clone")
	// ErrUnknownNode is returned for a node name or ID the snapshot lacks.
	ErrUnknownNode = errors.New("placement: unknown node")
	// ErrUnknownClient is returned when a request names a client site or
	// region the snapshot has no coordinate for.
	ErrUnknownClient = errors.New("placement: unknown client site or region")
	// ErrClientNotMeasured is returned when a request names a client site
	// whose nodes have no coordinate yet: an agent publishes its first
	// within seconds of starting, so the request can be tried again.
	ErrClientNotMeasured = errors.New("placement: no RTT estimate yet for client site")
	// ErrClientUnreachable is returned when a request names a client site
	// of another pool that is unreachable (RemoteClient.Unreachable): cut
	// off, it has no distance to place by until it is back.
	ErrClientUnreachable = errors.New("placement: client site is unreachable")
)

// Builder collects nodes and client coordinates for a Snapshot. The zero
// value is ready to use; a Builder is not safe for concurrent use.
type Builder struct {
	nodes     []Node
	clients   map[string]*coordinate.Coordinate
	remote    []RemoteClient
	bandwidth Bandwidth
}

// RemoteClient is a client site with no node in the snapshot, whose
// distance is known from another coordinate system: the sites of a
// federated mesh keep WAN coordinates among themselves, and the pool's
// Vivaldi coordinates do not reach across sites. Its clients are RTT
// further away than site Via, one of the snapshot's sites: the RTT
// estimated from them to a node is RTT plus the node's distance from the
// middle of Via (its client coordinate). An Unreachable one has no RTT:
// a request naming it fails with ErrClientUnreachable.
type RemoteClient struct {
	Name        string        `json:"name"`
	Via         string        `json:"via"`
	RTT         time.Duration `json:"rtt"`
	Unreachable bool          `json:"unreachable,omitempty"`
}

// AddRemoteClient adds a client site that no node is in (RemoteClient).
// A site of the nodes' own keeps its coordinate, one set with SetClient
// wins over both, and one whose Via has no node with a coordinate stays
// unknown.
func (b *Builder) AddRemoteClient(rc RemoteClient) { b.remote = append(b.remote, rc) }

// Add adds nodes. Build copies them; the caller may reuse its slices after
// Build.
func (b *Builder) Add(nodes ...Node) { b.nodes = append(b.nodes, nodes...) }

// SetClient sets the coordinate of a client site or region by name,
// replacing the one Build would compute from the nodes (use it for client
// sites that run no agent).
func (b *Builder) SetClient(name string, c *coordinate.Coordinate) {
	if b.clients == nil {
		b.clients = map[string]*coordinate.Coordinate{}
	}
	b.clients[name] = c.Clone()
}

// SetBandwidth sets the link model for data gravity; zero fields take the
// DefaultBandwidth values.
func (b *Builder) SetBandwidth(bw Bandwidth) { b.bandwidth = bw }

// ClientCoordinate returns the coordinate that stands for a group of
// nodes, such as a client site: the component-wise median of their
// vectors, heights, adjustments and errors. The median keeps one badly
// converged node from dragging the site. It returns nil for no coordinates
// and panics if their dimensions differ.
func ClientCoordinate(coords []*coordinate.Coordinate) *coordinate.Coordinate {
	var cs []*coordinate.Coordinate
	for _, c := range coords {
		if c != nil {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return nil
	}
	dim := len(cs[0].Vec)
	vals := make([]float64, len(cs))
	median := func(get func(c *coordinate.Coordinate) float64) float64 {
		for i, c := range cs {
			vals[i] = get(c)
		}
		slices.Sort(vals)
		n := len(vals)
		if n%2 == 1 {
			return vals[n/2]
		}
		return (vals[n/2-1] + vals[n/2]) / 2
	}
	out := &coordinate.Coordinate{Vec: make([]float64, dim)}
	for d := 0; d < dim; d++ {
		out.Vec[d] = median(func(c *coordinate.Coordinate) float64 {
			if len(c.Vec) != dim {
				panic(coordinate.DimensionalityConflictError{})
			}
			return c.Vec[d]
		})
	}
	out.Height = median(func(c *coordinate.Coordinate) float64 { return c.Height })
	out.Adjustment = median(func(c *coordinate.Coordinate) float64 { return c.Adjustment })
	out.Error = median(func(c *coordinate.Coordinate) float64 { return c.Error })
	return out
}

// Snapshot is an indexed, immutable view of the mesh for placement. A
// snapshot from Build is never changed; Clone gives a copy on which
// Reserve records reservations (copy-on-write: a clone costs nothing until
// it reserves). Snapshots are safe for concurrent reads.
type Snapshot struct {
	ix   *index
	over map[int32]freeState // reservations of a clone; nil on a built snapshot
	// overSet is a bit set over node indexes: bit i set when over holds
	// node i, so a pass tests a bit, not a map, for every node.
	overSet []uint64
	// used is what the reservations in over take per gang domain
	// (domainKey of tier and fabric), so scoring a domain's fill does not
	// walk every reservation.
	used map[string]usage
}

// usage is GPUs and CPU taken.
type usage struct{ gpu, cpu int64 }

// freeState is what a node has unreserved. gpus is a bit set over the
// node's GPUs: bit j set when GPU j is free.
type freeState struct {
	cpu, mem int64
	gpus     uint64
}

type snode struct {
	Node
	modelIDs []int32 // per GPU: index into index.models
	sig      int32   // model signature: the set of distinct models
	siteID   int32   // dense site number, for spread
	regionID int32   // dense region number, for spread
	idHash   uint64  // FNV-1a of ID, for seeded tie-breaks
	healthy  uint64  // bit j set when GPU j is healthy
	free     freeState
	view     policy.Node // static part of the CEL view
}

// hotNode (64 bytes) is what a decision reads of every node it looks at, packed
// apart from the (large) snode so that a pass over 100k nodes stays in
// cache.
type hotNode struct {
	free     freeState
	cpu, mem int64  // totals
	idHash   uint64 // FNV-1a of ID, for seeded tie-breaks
	class    int32  // node class (see class.go)
	gpuClass int32  // the class's GPUs (models, memory, health)
	node     int32  // the node's index
}

type index struct {
	nodes       []snode
	hot         []hotNode // in pass order; pos maps a node to its entry
	pos         []int32
	siteOf      []int32 // per node: siteID, packed for spread
	regionOf    []int32 // per node: regionID
	cls         classes
	rackID      []int32 // per node: racks numbered in name order
	nRacks      int
	nGPUClasses int
	emptyRack   bool // some node has no rack (its number is 0)
	nSites      int  // dense site IDs are 0..nSites-1
	nRegions    int
	byKey       map[string]int32 // name and ID → node
	dead        []int32
	tiers       map[string]*tierIx
	models      []string  // distinct GPU model names, sorted
	sigs        [][]int32 // signature → sorted model IDs; sig 0 is "no GPU"
	clients     map[string]*coordinate.Coordinate
	sites       map[string]bool
	unreachable map[string]bool  // remote client sites cut off
	siteIDs     map[string]int32 // site name → dense site ID
	holders     map[string]*holding
	bw          Bandwidth
	dim         int
}

type tierIx struct {
	name    string
	alive   int
	regions []*regionIx
	domains []*domainIx // fabrics with alive nodes in this tier, by name
	counts  []sigCount
}

type regionIx struct {
	name   string
	ball   ball
	cells  []*cell
	counts []sigCount
}

// cell is the nodes of one site in one tier.
type cell struct {
	site   string
	ball   ball
	groups []*group
	counts []sigCount
}

// group is the alive nodes of a cell with one GPU signature and fabric.
type group struct {
	sig    int32
	fabric string
	nodes  []int32
	start  int32 // index in index.hot of nodes[0]; the rest follow
}

// domainIx is the alive nodes of one fabric in one tier, with what a gang
// decision needs of them precomputed: GPUs (healthy) and CPU in all and in
// use on the built snapshot.
type domainIx struct {
	fabric                           string
	nodes                            []int32
	key                              string // domainKey(tier, fabric)
	allGPU, usedGPU, allCPU, usedCPU int64
}

// sigCount counts alive nodes with one GPU signature, on a fabric or not.
type sigCount struct {
	sig           int32
	fabric, plain int
}

// ball bounds the coordinates of a set of nodes: every vector lies within
// radius of cent, and every height and adjustment is at least minH and
// minAdj. n counts nodes with a coordinate, sites lists their dense site
// IDs.
type ball struct {
	n            int
	cent         []float64
	radius       float64
	minH, minAdj float64
	sites        []int32
}

func (h *holding) has(i int32) bool { return h != nil && h.nodes[i/64]&(1<<(i%64)) != 0 }

type holding struct {
	nodes   []uint64 // bit set over node indexes
	sites   map[string]struct{}
	regions map[string]struct{}
	fabrics map[string]struct{}
}

// Build validates the nodes and indexes them. Client coordinates are
// computed for every site and region from its nodes (ClientCoordinate)
// unless set with SetClient. Errors wrap ErrInvalidSnapshot and list every
// problem.
func (b *Builder) Build() (*Snapshot, error) {
	ix := &index{
		byKey:   make(map[string]int32, 2*len(b.nodes)),
		tiers:   map[string]*tierIx{},
		clients: map[string]*coordinate.Coordinate{},
		holders: map[string]*holding{},
		bw:      b.bandwidth,
		dim:     -1,
	}
	ix.bw.ensureDefaults()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	sigs := ix.gpuModels(b.nodes)
	ix.nodes = make([]snode, len(b.nodes))
	for i, in := range b.nodes {
		ix.addNode(int32(i), in, sigs, bad)
	}
	if ix.dim < 0 {
		// No node has a coordinate: take the dimensions of the given
		// client coordinates, if any.
		ix.dim = 0
		for _, name := range slices.Sorted(maps.Keys(b.clients)) {
			if c := b.clients[name]; c != nil {
				ix.dim = len(c.Vec)
				break
			}
		}
	}
	ix.numberPlaces()
	ix.clientCoordinates(b.remote, b.clients, bad)
	ix.buildTiers()
	ix.buildHot()
	ix.buildClasses()
	ix.buildRacks()
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSnapshot, errors.Join(errs...))
	}
	return &Snapshot{ix: ix}, nil
}

// gpuSigs numbers GPU models and the sets of them nodes hold (a node's
// signature: 0 for none).
type gpuSigs struct {
	modelID map[string]int32
	sigID   map[string]int32
}

// gpuModels lists the distinct GPU models of nodes in ix.models and
// starts the signature table.
func (ix *index) gpuModels(nodes []Node) gpuSigs {
	modelSet := map[string]bool{}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			modelSet[g.Model] = true
		}
	}
	ix.models = slices.Sorted(maps.Keys(modelSet))
	g := gpuSigs{modelID: make(map[string]int32, len(ix.models)), sigID: map[string]int32{"": 0}}
	for i, m := range ix.models {
		g.modelID[m] = int32(i)
	}
	ix.sigs = [][]int32{nil}
	return g
}

// addNode validates node i (a copy of in: the snapshot shares nothing
// with the builder's caller) and indexes it: its keys, GPU signature,
// free resources, CEL view and the artifacts and datasets it holds.
func (ix *index) addNode(i int32, in Node, sigs gpuSigs, bad func(string, ...any)) {
	n := &ix.nodes[i]
	n.Node = in
	n.Labels = maps.Clone(in.Labels)
	n.GPUs = slices.Clone(in.GPUs)
	n.Artifacts = slices.Clone(in.Artifacts)
	n.Datasets = slices.Clone(in.Datasets)
	if in.Coord != nil {
		n.Coord = in.Coord.Clone()
	}
	if n.Name == "" || n.ID == "" {
		bad("node %d: name and id are required", i)
	}
	for _, k := range []string{n.Name, n.ID} {
		if j, dup := ix.byKey[k]; dup && j != i {
			bad("node %q: name or id %q used twice", n.Name, k)
		}
		ix.byKey[k] = i
	}
	if n.Tier != TierEdge && n.Tier != TierOnprem && n.Tier != TierCloud {
		bad("node %q: tier %q: want edge, onprem or cloud", n.Name, n.Tier)
	}
	if n.CPU < 0 || n.Memory < 0 || n.FreeCPU < 0 || n.FreeMemory < 0 {
		bad("node %q: resources must not be negative", n.Name)
	}
	if len(n.GPUs) > 64 {
		bad("node %q: %d GPUs, at most 64 supported", n.Name, len(n.GPUs))
		n.GPUs = n.GPUs[:64]
	}
	if n.Coord != nil {
		if !n.Coord.IsValid() {
			bad("node %q: invalid coordinate", n.Name)
			n.Coord = nil
		} else if ix.dim < 0 {
			ix.dim = len(n.Coord.Vec)
		} else if len(n.Coord.Vec) != ix.dim {
			bad("node %q: coordinate has %d dimensions, others %d", n.Name, len(n.Coord.Vec), ix.dim)
			n.Coord = nil
		}
	}
	n.modelIDs = make([]int32, len(n.GPUs))
	var ms []int32
	for j, g := range n.GPUs {
		n.modelIDs[j] = sigs.modelID[g.Model]
		if g.Healthy {
			n.healthy |= 1 << j
		}
		if g.Free {
			n.free.gpus |= 1 << j
		}
		if !slices.Contains(ms, sigs.modelID[g.Model]) {
			ms = append(ms, sigs.modelID[g.Model])
		}
	}
	slices.Sort(ms)
	key := fmt.Sprint(ms)
	if len(ms) == 0 {
		key = ""
	}
	s, ok := sigs.sigID[key]
	if !ok {
		s = int32(len(ix.sigs))
		sigs.sigID[key] = s
		ix.sigs = append(ix.sigs, ms)
	}
	n.sig = s
	n.free.cpu, n.free.mem = n.FreeCPU, n.FreeMemory
	n.idHash = fnv64(n.ID)
	n.view = policy.Node{
		Name: n.Name, ID: n.ID, Tier: n.Tier, Site: n.Site, Region: n.Region,
		Labels: n.Labels, CPU: n.CPU, Memory: n.Memory, Arch: n.Arch,
		Fabric: n.Fabric, GPUs: make([]policy.GPU, len(n.GPUs)),
	}
	copy(n.view.GPUs, n.GPUs)
	for _, a := range n.Artifacts {
		ix.hold(a, i, n)
	}
	for _, d := range n.Datasets {
		ix.hold(datasetKey(d), i, n)
	}
}

// numberPlaces numbers the nodes' sites and regions, in node order.
func (ix *index) numberPlaces() {
	siteIDs, regionIDs := map[string]int32{}, map[string]int32{}
	ix.sites, ix.unreachable = map[string]bool{}, map[string]bool{}
	for i := range ix.nodes {
		n := &ix.nodes[i]
		if _, ok := siteIDs[n.Site]; !ok {
			siteIDs[n.Site] = int32(len(siteIDs))
		}
		if _, ok := regionIDs[n.Region]; !ok {
			regionIDs[n.Region] = int32(len(regionIDs))
		}
		n.siteID, n.regionID = siteIDs[n.Site], regionIDs[n.Region]
		ix.sites[n.Site] = true
	}
	ix.siteIDs = siteIDs
	ix.nSites, ix.nRegions = len(siteIDs), len(regionIDs)
}

// clientCoordinates places the clients: each site and region at its
// nodes' (ClientCoordinate), then the remote sites by their RTT from the
// site they are measured via, then the explicit ones (SetClient).
func (ix *index) clientCoordinates(remote []RemoteClient, explicit map[string]*coordinate.Coordinate, bad func(string, ...any)) {
	siteCoords := map[string][]*coordinate.Coordinate{}
	regionCoords := map[string][]*coordinate.Coordinate{}
	for i := range ix.nodes {
		n := &ix.nodes[i]
		if n.Coord == nil {
			continue
		}
		siteCoords[n.Site] = append(siteCoords[n.Site], n.Coord)
		regionCoords[n.Region] = append(regionCoords[n.Region], n.Coord)
	}
	for name, cs := range regionCoords {
		ix.clients[name] = ClientCoordinate(cs)
	}
	for name, cs := range siteCoords {
		ix.clients[name] = ClientCoordinate(cs)
	}
	for _, rc := range remote {
		via := ix.clients[rc.Via]
		switch {
		case rc.Name != "" && rc.Unreachable && !ix.sites[rc.Name]:
			ix.unreachable[rc.Name] = true
		case rc.Name == "" || rc.RTT < 0:
			bad("remote client %q: a name and an RTT not below zero are required", rc.Name)
		case siteCoords[rc.Via] == nil || ix.sites[rc.Name]:
			// Via has no coordinate yet (the client stays unknown), or
			// the client is a site of the nodes, whose own serves.
		default:
			c := via.Clone()
			c.Height += rc.RTT.Seconds()
			ix.clients[rc.Name] = c
		}
	}
	for name, c := range explicit {
		if c == nil || !c.IsValid() || (ix.dim > 0 && len(c.Vec) != ix.dim) {
			bad("client %q: invalid coordinate or wrong dimensions", name)
			continue
		}
		ix.clients[name] = c
	}
}

// buildHot lays the hot part of every node out in the order passes walk
// the index (tier, region, site, group), so that a pass reads memory
// front to back whatever order the nodes were added in.
func (ix *index) buildHot() {
	ix.hot = make([]hotNode, 0, len(ix.nodes))
	ix.pos = make([]int32, len(ix.nodes))
	ix.siteOf, ix.regionOf = make([]int32, len(ix.nodes)), make([]int32, len(ix.nodes))
	for i := range ix.nodes {
		ix.siteOf[i], ix.regionOf[i] = ix.nodes[i].siteID, ix.nodes[i].regionID
	}
	add := func(i int32) {
		n := &ix.nodes[i]
		ix.pos[i] = int32(len(ix.hot))
		ix.hot = append(ix.hot, hotNode{free: n.free, cpu: n.CPU, mem: n.Memory, idHash: n.idHash, node: i})
	}
	for _, tn := range slices.Sorted(maps.Keys(ix.tiers)) {
		for _, r := range ix.tiers[tn].regions {
			for _, c := range r.cells {
				for _, g := range c.groups {
					g.start = int32(len(ix.hot))
					for _, i := range g.nodes {
						add(i)
					}
				}
			}
		}
	}
	for _, i := range ix.dead {
		add(i)
	}
}

// hotOf returns node i's hot part.
func (ix *index) hotOf(i int32) *hotNode { return &ix.hot[ix.pos[i]] }

func (ix *index) buildRacks() {
	names := map[string]int32{}
	for i := range ix.nodes {
		names[ix.nodes[i].Rack] = 0
	}
	for k, r := range slices.Sorted(maps.Keys(names)) {
		names[r] = int32(k)
	}
	ix.nRacks = len(names)
	_, ix.emptyRack = names[""]
	ix.rackID = make([]int32, len(ix.nodes))
	for i := range ix.nodes {
		ix.rackID[i] = names[ix.nodes[i].Rack]
	}
}

func (ix *index) hold(key string, i int32, n *snode) {
	h := ix.holders[key]
	if h == nil {
		h = &holding{nodes: make([]uint64, (len(ix.nodes)+63)/64), sites: map[string]struct{}{}, regions: map[string]struct{}{}, fabrics: map[string]struct{}{}}
		ix.holders[key] = h
	}
	h.nodes[i/64] |= 1 << (i % 64)
	h.sites[n.Site] = struct{}{}
	h.regions[n.Region] = struct{}{}
	if n.Fabric != "" {
		h.fabrics[n.Fabric] = struct{}{}
	}
}

// buildTiers builds tier → region → cell → group and tier → fabric.
func (ix *index) buildTiers() {
	type cellKey struct{ tier, region, site string }
	type groupKey struct {
		c      cellKey
		sig    int32
		fabric string
	}
	groups := map[groupKey][]int32{}
	domains := map[[2]string][]int32{}
	for i := range ix.nodes {
		n := &ix.nodes[i]
		if !n.Alive {
			ix.dead = append(ix.dead, int32(i))
			continue
		}
		k := groupKey{cellKey{n.Tier, n.Region, n.Site}, n.sig, n.Fabric}
		groups[k] = append(groups[k], int32(i))
		if n.Fabric != "" {
			dk := [2]string{n.Tier, n.Fabric}
			domains[dk] = append(domains[dk], int32(i))
		}
	}
	keys := slices.Collect(maps.Keys(groups))
	sort.Slice(keys, func(a, b int) bool {
		x, y := keys[a], keys[b]
		if x.c != y.c {
			if x.c.tier != y.c.tier {
				return x.c.tier < y.c.tier
			}
			if x.c.region != y.c.region {
				return x.c.region < y.c.region
			}
			return x.c.site < y.c.site
		}
		if x.sig != y.sig {
			return x.sig < y.sig
		}
		return x.fabric < y.fabric
	})
	var t *tierIx
	var r *regionIx
	var c *cell
	for _, k := range keys {
		if t == nil || t.name != k.c.tier {
			t = &tierIx{name: k.c.tier}
			ix.tiers[t.name] = t
			r, c = nil, nil
		}
		if r == nil || r.name != k.c.region {
			r = &regionIx{name: k.c.region}
			t.regions = append(t.regions, r)
			c = nil
		}
		if c == nil || c.site != k.c.site {
			c = &cell{site: k.c.site}
			r.cells = append(r.cells, c)
		}
		g := &group{sig: k.sig, fabric: k.fabric, nodes: groups[k]}
		c.groups = append(c.groups, g)
		t.alive += len(g.nodes)
		for _, counts := range []*[]sigCount{&t.counts, &r.counts, &c.counts} {
			addCount(counts, g.sig, g.fabric != "", len(g.nodes))
		}
	}
	for _, t := range ix.tiers {
		for _, r := range t.regions {
			var all []int32
			for _, c := range r.cells {
				var cn []int32
				for _, g := range c.groups {
					cn = append(cn, g.nodes...)
				}
				c.ball = ix.ballOf(cn)
				all = append(all, cn...)
			}
			r.ball = ix.ballOf(all)
		}
	}
	dkeys := slices.Collect(maps.Keys(domains))
	sort.Slice(dkeys, func(a, b int) bool {
		if dkeys[a][0] != dkeys[b][0] {
			return dkeys[a][0] < dkeys[b][0]
		}
		return dkeys[a][1] < dkeys[b][1]
	})
	for _, k := range dkeys {
		dm := &domainIx{fabric: k[1], nodes: domains[k], key: domainKey(k[0], k[1])}
		for _, i := range dm.nodes {
			n := &ix.nodes[i]
			h := int64(popcount(n.healthy))
			dm.allGPU += h
			dm.usedGPU += h - int64(popcount(n.healthy&n.free.gpus))
			dm.allCPU += n.CPU
			dm.usedCPU += n.CPU - n.free.cpu
		}
		ix.tiers[k[0]].domains = append(ix.tiers[k[0]].domains, dm)
	}
}

func addCount(counts *[]sigCount, sig int32, onFabric bool, n int) {
	for i := range *counts {
		if (*counts)[i].sig == sig {
			if onFabric {
				(*counts)[i].fabric += n
			} else {
				(*counts)[i].plain += n
			}
			return
		}
	}
	sc := sigCount{sig: sig}
	if onFabric {
		sc.fabric = n
	} else {
		sc.plain = n
	}
	*counts = append(*counts, sc)
}

func (ix *index) ballOf(nodes []int32) ball {
	var b ball
	b.cent = make([]float64, ix.dim)
	b.minH, b.minAdj = math.Inf(1), math.Inf(1)
	for _, i := range nodes {
		c := ix.nodes[i].Coord
		if c == nil {
			continue
		}
		b.n++
		for d := range b.cent {
			b.cent[d] += c.Vec[d]
		}
		b.minH = min(b.minH, c.Height)
		b.minAdj = min(b.minAdj, c.Adjustment)
		if s := ix.nodes[i].siteID; !slices.Contains(b.sites, s) {
			b.sites = append(b.sites, s)
		}
	}
	if b.n == 0 {
		return b
	}
	for d := range b.cent {
		b.cent[d] /= float64(b.n)
	}
	for _, i := range nodes {
		c := ix.nodes[i].Coord
		if c == nil {
			continue
		}
		b.radius = max(b.radius, vecDist(b.cent, c.Vec))
	}
	// Guard against rounding: the bound must never exceed a real distance.
	b.radius = b.radius*(1+1e-9) + 1e-12
	return b
}

// lowerBound is a lower bound, in seconds, of the RTT predicted from
// client to any node inside the ball (see clientRTT). It follows from the
// triangle inequality: |c - v| >= |c - cent| - radius. For a site's
// clients (site is its dense ID, -1 for a region) whose site has nodes in
// the ball, it leaves out the heights, as their estimate does.
func (b *ball) lowerBound(client *coordinate.Coordinate, site int32) float64 {
	if b.n == 0 {
		return math.Inf(1)
	}
	vec := max(0, vecDist(client.Vec, b.cent)-b.radius)
	raw := vec + client.Height + b.minH
	lb := min(raw, raw+client.Adjustment+b.minAdj)
	if site >= 0 && slices.Contains(b.sites, site) {
		lb = min(lb, vec)
	}
	return lb
}

func vecDist(a, b []float64) float64 {
	sum := 0.0
	for i := range a {
		d := a[i] - b[i]
		sum += d * d
	}
	return math.Sqrt(sum)
}

// clientRTT is the RTT in seconds predicted from a client coordinate to a
// node's: serf's estimate (rttSeconds), except from a site's clients to a
// node of that site (clientSite == nodeSite, a dense site ID; -1 for a
// region), where it is the distance between the vectors alone. A height
// stands for a node's access link to the rest of the network, which
// traffic within a site does not cross; adding the site's median height
// and the node's would put a one-node site two heights away from its own
// clients (tens of milliseconds on a WAN-facing edge node).
func clientRTT(client *coordinate.Coordinate, clientSite int32, node *coordinate.Coordinate, nodeSite int32) float64 {
	if clientSite >= 0 && clientSite == nodeSite {
		return vecDist(client.Vec, node.Vec)
	}
	return rttSeconds(client, node)
}

// rttSeconds is serf's Coordinate.DistanceTo in float seconds, without its
// allocations: the Euclidean distance plus both heights, plus both
// adjustments when that stays positive.
func rttSeconds(a, b *coordinate.Coordinate) float64 {
	dist := vecDist(a.Vec, b.Vec) + a.Height + b.Height
	if adj := dist + a.Adjustment + b.Adjustment; adj > 0 {
		return adj
	}
	return dist
}

// Clone returns a copy that shares the index and takes reservations.
func (s *Snapshot) Clone() *Snapshot {
	c := &Snapshot{ix: s.ix, over: make(map[int32]freeState, len(s.over)), used: make(map[string]usage, len(s.used))}
	maps.Copy(c.over, s.over)
	if s.overSet != nil {
		c.overSet = slices.Clone(s.overSet)
	} else {
		c.overSet = make([]uint64, (len(s.ix.nodes)+63)/64)
	}
	maps.Copy(c.used, s.used)
	return c
}

// Len returns the number of nodes, alive or not.
func (s *Snapshot) Len() int { return len(s.ix.nodes) }

func (s *Snapshot) freeOf(i int32) freeState {
	if s.overlaid(i) {
		return s.over[i]
	}
	return s.ix.hotOf(i).free
}

// overlaid says whether a clone's reservations changed node i.
func (s *Snapshot) overlaid(i int32) bool {
	return s.overSet != nil && s.overSet[i>>6]&(1<<(i&63)) != 0
}

func (s *Snapshot) lookup(nameOrID string) (int32, bool) {
	i, ok := s.ix.byKey[nameOrID]
	return i, ok
}

// Node returns a copy of a node by name or ID, with its free resources as
// this snapshot has them (reservations applied).
func (s *Snapshot) Node(nameOrID string) (Node, bool) {
	i, ok := s.lookup(nameOrID)
	if !ok {
		return Node{}, false
	}
	return s.nodeCopy(i), true
}

func (s *Snapshot) nodeCopy(i int32) Node {
	n := s.ix.nodes[i].Node
	f := s.freeOf(i)
	n.Labels = maps.Clone(n.Labels)
	n.GPUs = slices.Clone(n.GPUs)
	for j := range n.GPUs {
		n.GPUs[j].Free = f.gpus&(1<<j) != 0
	}
	n.FreeCPU, n.FreeMemory = f.cpu, f.mem
	n.Artifacts = slices.Clone(n.Artifacts)
	n.Datasets = slices.Clone(n.Datasets)
	if n.Coord != nil {
		n.Coord = n.Coord.Clone()
	}
	return n
}

// Nodes returns copies of every node, in the order they were added.
func (s *Snapshot) Nodes() []Node {
	out := make([]Node, len(s.ix.nodes))
	for i := range out {
		out[i] = s.nodeCopy(int32(i))
	}
	return out
}

// Client returns the coordinate of a client site or region.
func (s *Snapshot) Client(name string) (*coordinate.Coordinate, bool) {
	c, ok := s.ix.clients[name]
	if !ok {
		return nil, false
	}
	return c.Clone(), true
}

// Clients returns the names of every client site and region, sorted.
func (s *Snapshot) Clients() []string {
	return slices.Sorted(maps.Keys(s.ix.clients))
}

// RTT returns the RTT predicted by coordinates from a client site or region
// to a node.
func (s *Snapshot) RTT(client, node string) (time.Duration, error) {
	c, ok := s.ix.clients[client]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownClient, client)
	}
	i, ok := s.lookup(node)
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	n := s.ix.nodes[i].Coord
	if n == nil {
		return 0, fmt.Errorf("placement: node %q has no coordinate", node)
	}
	site, ok := s.ix.siteIDs[client]
	if !ok {
		site = -1
	}
	return secondsToDuration(clientRTT(c, site, n, s.ix.siteOf[i])), nil
}

func secondsToDuration(s float64) time.Duration { return time.Duration(s * 1e9) }

// Reserve takes r from a node of a clone: CPU, memory and r.GPUs free,
// healthy GPUs of the requested model and memory (lowest indexes first). It
// returns the GPU indexes taken, or a *Refusal when the node lacks room
// (nothing is taken then), or ErrImmutable on a snapshot from Build.
func (s *Snapshot) Reserve(node string, r Resources) ([]int, error) {
	if s.over == nil {
		return nil, ErrImmutable
	}
	i, ok := s.lookup(node)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	n := &s.ix.nodes[i]
	f := s.freeOf(i)
	if !n.Alive {
		return nil, &Refusal{Reason: ReasonNotAlive, Detail: "node is not alive"}
	}
	if f.cpu < r.CPU {
		return nil, &Refusal{Reason: ReasonInsufficientCPU, Detail: fmt.Sprintf("needs %s CPU, %s free", fmtCPU(r.CPU), fmtCPU(f.cpu))}
	}
	if f.mem < r.Memory {
		return nil, &Refusal{Reason: ReasonInsufficientMemory, Detail: fmt.Sprintf("needs %s memory, %s free", policy.FormatBytes(r.Memory), policy.FormatBytes(f.mem))}
	}
	var taken []int
	mask := uint64(0)
	if r.GPUs > 0 {
		for j := range n.GPUs {
			if len(taken) == r.GPUs {
				break
			}
			if n.healthy&f.gpus&(1<<j) != 0 && gpuMatches(n.GPUs[j], r) {
				taken = append(taken, j)
				mask |= 1 << j
			}
		}
		if len(taken) < r.GPUs {
			return nil, &Refusal{Reason: ReasonInsufficientGPU, Detail: fmt.Sprintf("needs %d GPUs%s, %d available", r.GPUs, gpuSpec(r), len(taken))}
		}
	}
	f.cpu -= r.CPU
	f.mem -= r.Memory
	f.gpus &^= mask
	s.setFree(i, f)
	return taken, nil
}

// Release gives back on a clone what a reservation on node took: CPU,
// memory, and the GPUs at the given positions in the node's GPU list (as
// Reserve returns them). It is how a policy placed again sees what it
// already holds as free.
func (s *Snapshot) Release(node string, cpu, mem int64, gpus []int) error {
	if s.over == nil {
		return ErrImmutable
	}
	i, ok := s.lookup(node)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	n := &s.ix.nodes[i]
	f := s.freeOf(i)
	f.cpu += cpu
	f.mem += mem
	for _, j := range gpus {
		if j < 0 || j >= len(n.GPUs) {
			return fmt.Errorf("placement: node %q has no GPU at position %d", node, j)
		}
		f.gpus |= 1 << j
	}
	s.setFree(i, f)
	return nil
}

// setFree records what node i has free on a clone, and what that changes
// in its gang domain's usage. An alive node's usage counts (domains hold
// alive nodes only); a node back at the index's free state drops out of
// the overlay.
func (s *Snapshot) setFree(i int32, f freeState) {
	n := &s.ix.nodes[i]
	prev := s.freeOf(i)
	if n.Alive {
		k := domainKey(n.Tier, n.Fabric)
		u := s.used[k]
		u.gpu += int64(popcount(n.healthy&prev.gpus) - popcount(n.healthy&f.gpus))
		u.cpu += prev.cpu - f.cpu
		if u == (usage{}) {
			delete(s.used, k)
		} else {
			s.used[k] = u
		}
	}
	if f == s.ix.hotOf(i).free {
		delete(s.over, i)
		s.overSet[i>>6] &^= 1 << (i & 63)
	} else {
		s.over[i] = f
		s.overSet[i>>6] |= 1 << (i & 63)
	}
}

func gpuMatches(g GPU, r Resources) bool {
	return g.Memory >= r.GPUMemory && modelMatches(g.Model, r.GPUModel)
}

func modelMatches(model, want string) bool {
	return want == "" || strings.Contains(strings.ToLower(model), strings.ToLower(want))
}

func gpuSpec(r Resources) string {
	var s string
	if r.GPUModel != "" {
		s += " " + r.GPUModel
	}
	if r.GPUMemory > 0 {
		s += " with ≥ " + policy.FormatBytes(r.GPUMemory)
	}
	return s
}

func fmtCPU(m int64) string {
	if m%1000 == 0 {
		return fmt.Sprintf("%d", m/1000)
	}
	return fmt.Sprintf("%dm", m)
}
