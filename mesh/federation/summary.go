package federation

import (
	"cmp"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/mesh"
)

// Summary is what one site tells the others about itself: enough to see
// its capacity and what it holds, without the detail of its nodes.
type Summary struct {
	Site   string `json:"site"`
	Region string `json:"region,omitempty"`
	// Seq orders one site's summaries (its publisher's clock, in
	// microseconds); a receiver keeps the highest.
	Seq   uint64 `json:"seq"`
	Nodes int    `json:"nodes"`
	Alive int    `json:"alive"`
	// Tiers is the capacity of the site's live nodes per tier.
	Tiers map[string]Capacity `json:"tiers,omitempty"`
	// Fabrics counts GPUs of live nodes per RDMA fabric ID.
	Fabrics map[string]int `json:"fabrics,omitempty"`
	// Models are the model versions served in the site ("name@version");
	// Datasets what its nodes hold.
	Models   []string `json:"models,omitempty"`
	Datasets []string `json:"datasets,omitempty"`
	// Holders names, for each artifact blob (digest) the site holds, up to
	// HoldersPerBlob of its live nodes that hold it whole: another site
	// pulls it from them (see RemoteHolders). Contacts says where each is.
	Holders  map[string][]string `json:"holders,omitempty"`
	Contacts map[string]Contact  `json:"contacts,omitempty"`
	// Serving names, for each model version served in the site
	// ("name@version"), up to HoldersPerBlob of its live nodes that serve
	// it and take forwarded requests (a data-plane address outside a
	// NAT): an agent of another site that serves it not forwards an
	// inference request to one of them (see RemoteServers). Contacts says
	// where each is.
	Serving map[string][]string `json:"serving,omitempty"`
	// Gateways are the site's gateways, best first, with the libp2p
	// addresses another site dials them at.
	Gateways []Gateway `json:"gateways"`
	// Coordinate is the site's Vivaldi coordinate among the sites (its
	// publishing gateway's, from pings to other sites' gateways): the
	// distance between two sites' coordinates estimates their RTT. Nil
	// from agents before WAN coordinates.
	Coordinate *coordinate.Coordinate `json:"coordinate,omitempty"`
}

// Capacity is one tier's total and free resources in a site.
type Capacity struct {
	Nodes      int   `json:"nodes"`
	Millicores int64 `json:"millicores"`
	Memory     int64 `json:"memory"`
	GPUs       int   `json:"gpus"`
	FreeCPU    int64 `json:"free_cpu"`
	FreeMemory int64 `json:"free_memory"`
	FreeGPUs   int   `json:"free_gpus"`
	// Shapes says how the free resources are spread over the nodes: the
	// free CPU, memory and GPUs of one node, rounded down, with how many
	// nodes have that much; the MaxShapes largest, so it may leave small
	// nodes out. Sums alone would show room for a replica that fits no
	// node (ten nodes with 2 cores free each for one that needs 4).
	// Empty in summaries of agents from before shapes.
	Shapes []Shape `json:"shapes,omitempty"`
}

// Shape is the free resources of Nodes nodes of a tier: each has at least
// this much.
type Shape struct {
	FreeCPU    int64 `json:"free_cpu"`
	FreeMemory int64 `json:"free_memory"`
	FreeGPUs   int   `json:"free_gpus"`
	Nodes      int   `json:"nodes"`
}

// MaxShapes bounds a tier's shapes, so a summary grows with the kinds of
// nodes a site has, not their number.
const MaxShapes = 16

// Shapes round free CPU down to shapeCPU millicores and free memory down
// to shapeMemory bytes, so nodes of one kind share a shape and a summary
// does not change with every small load change.
const (
	shapeCPU    = 250
	shapeMemory = 256 << 20
)

// addShape counts one node of the given free resources in shapes.
func addShape(shapes []Shape, cpu, mem int64, gpus int) []Shape {
	k := Shape{FreeCPU: max(cpu, 0) / shapeCPU * shapeCPU, FreeMemory: max(mem, 0) / shapeMemory * shapeMemory, FreeGPUs: max(gpus, 0)}
	for i := range shapes {
		if s := shapes[i]; s.FreeCPU == k.FreeCPU && s.FreeMemory == k.FreeMemory && s.FreeGPUs == k.FreeGPUs {
			shapes[i].Nodes++
			return shapes
		}
	}
	k.Nodes = 1
	return append(shapes, k)
}

// largestShapes sorts shapes largest first (GPUs, then CPU, then memory)
// and keeps MaxShapes of them.
func largestShapes(shapes []Shape) []Shape {
	slices.SortFunc(shapes, func(a, b Shape) int {
		return cmp.Or(cmp.Compare(b.FreeGPUs, a.FreeGPUs), cmp.Compare(b.FreeCPU, a.FreeCPU), cmp.Compare(b.FreeMemory, a.FreeMemory))
	})
	return shapes[:min(len(shapes), MaxShapes)]
}

// Contact is where another site reaches a node's data plane: its QUIC
// address, and its libp2p addresses for a relayed stream where that
// address does not answer (a NAT, a firewall open only to the federation).
// A node reached through a circuit relay is behind a NAT: its contact has
// no QUIC address, so pullers go to libp2p at once instead of after a
// QUIC dial times out.
type Contact struct {
	Data       string   `json:"data,omitempty"`
	Federation []string `json:"federation,omitempty"`
}

// HoldersPerBlob is how many holders of each blob a summary names: enough
// to pull from another when one fails, few enough that a summary grows
// with the blobs a site holds, not its nodes.
const HoldersPerBlob = 3

// Gateway names one gateway and where to reach it.
type Gateway struct {
	Name  string   `json:"name"`
	Addrs []string `json:"addrs"`
}

// Summarize builds site's summary from the nodes of its pool, with the
// given gateways (names, best first).
func Summarize(site string, nodes []mesh.Node, gateways []string) Summary {
	s := Summary{Site: site, Seq: uint64(time.Now().UnixMicro()), Tiers: map[string]Capacity{}, Fabrics: map[string]int{}}
	models, datasets := map[string]bool{}, map[string]bool{}
	addrs := map[string][]string{}
	holders, serving := map[string][]string{}, map[string][]string{}
	contacts := map[string]Contact{}
	// By name, so that the same few nodes are named for every blob.
	nodes = slices.SortedFunc(slices.Values(nodes), func(a, b mesh.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		if n.Site != site {
			continue
		}
		s.Nodes++
		if s.Region == "" {
			s.Region = n.Region
		}
		addrs[n.Name] = n.Addrs.Federation
		if n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect {
			continue
		}
		s.Alive++
		c := s.Tiers[n.Tier]
		c.Nodes++
		c.Millicores += n.Capabilities.CPU.Millicores
		c.Memory += n.Capabilities.Memory.Total
		c.GPUs += len(n.Capabilities.GPUs)
		c.FreeCPU += n.Load.FreeCPU
		c.FreeMemory += n.Load.FreeMemory
		c.FreeGPUs += n.Load.FreeGPUs
		c.Shapes = addShape(c.Shapes, n.Load.FreeCPU, n.Load.FreeMemory, n.Load.FreeGPUs)
		s.Tiers[n.Tier] = c
		if f := n.Capabilities.Fabric; f != "" {
			s.Fabrics[f] += len(n.Capabilities.GPUs)
		}
		reachable := n.Status == mesh.StatusAlive && (n.Addrs.Data != "" || len(n.Addrs.Federation) > 0)
		for _, m := range n.Models {
			models[m] = true
			if n.Status == mesh.StatusAlive && n.Addrs.Data != "" && !behindNAT(n.Addrs.Federation) && len(serving[m]) < HoldersPerBlob {
				serving[m] = append(serving[m], n.Name)
				contacts[n.Name] = Contact{Data: n.Addrs.Data, Federation: n.Addrs.Federation}
			}
		}
		for _, a := range n.Locality.Artifacts {
			if reachable && len(holders[a]) < HoldersPerBlob {
				holders[a] = append(holders[a], n.Name)
				c := Contact{Data: n.Addrs.Data, Federation: n.Addrs.Federation}
				if behindNAT(n.Addrs.Federation) {
					c.Data = ""
				}
				contacts[n.Name] = c
			}
		}
		for _, d := range n.Locality.Datasets {
			datasets[d] = true
		}
	}
	for tier, c := range s.Tiers {
		c.Shapes = largestShapes(c.Shapes)
		s.Tiers[tier] = c
	}
	s.Models = slices.Sorted(maps.Keys(models))
	if len(holders) > 0 {
		s.Holders = holders
	}
	if len(serving) > 0 {
		s.Serving = serving
	}
	if len(contacts) > 0 {
		s.Contacts = contacts
	}
	s.Datasets = slices.Sorted(maps.Keys(datasets))
	for _, g := range gateways {
		s.Gateways = append(s.Gateways, Gateway{Name: g, Addrs: addrs[g]})
	}
	return s
}

// same reports whether two summaries of a site say the same, Seq aside.
func same(a, b Summary) bool {
	// A coordinate moves a little with every ping: it is rewritten with
	// the summary every summaryRefresh, not on every change.
	a.Seq, b.Seq = 0, 0
	a.Coordinate, b.Coordinate = nil, nil
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// wanKey is where a site keeps its own WAN coordinate and the round trips
// its publishing gateway measured (a wanRecord, written by that gateway),
// from which its agents estimate RTTs to other sites.
const wanKey = "federation/wan"

// wanRecord is what wanKey holds: the site's WAN coordinate, its fields at
// the top level as agents before Measured wrote it, the median of the
// publisher's last pings to each site it pinged lately, in milliseconds,
// and the sites of those whose last ping went through a relay.
type wanRecord struct {
	coordinate.Coordinate
	Measured map[string]float64 `json:"measured_ms,omitempty"`
	Relayed  map[string]bool    `json:"relayed,omitempty"`
}

// SitePrefix is where a site keeps the other sites' summaries in its
// catalog (site scope: each site's gateways write what they heard).
const SitePrefix = "federation/sites/"

// Remote is another site as this site last heard of it.
type Remote struct {
	Summary Summary `json:"summary"`
	// Heard is when a gateway of this site last got the site's summary.
	Heard time.Time `json:"heard"`
	// Status is reachable when Heard is within the reachability window
	// (see UnreachableAfter), else unreachable.
	Status mesh.SiteStatus `json:"status"`
}

// UnreachableAfter is how long a site stays reachable after its last summary
// was heard: several summary intervals, so one lost summary does not flap
// it.
const UnreachableAfter = 30 * time.Second

// Remotes returns the other sites this agent's site has heard of, sorted by
// name, each marked reachable or unreachable by when it was last heard.
func Remotes(m *mesh.Mesh, now time.Time) []Remote {
	var out []Remote
	for _, e := range m.List(SitePrefix) {
		var r Remote
		if err := json.Unmarshal(e.Value, &r); err != nil {
			undecodable.note(e, err)
			continue
		}
		if r.Summary.Site != strings.TrimPrefix(e.Key, SitePrefix) {
			continue
		}
		r.Status = mesh.SiteReachable
		if now.Sub(r.Heard) > UnreachableAfter {
			r.Status = mesh.SiteUnreachable
		}
		out = append(out, r)
	}
	return out
}

// Sites returns the other sites as mesh.Site rows (via federation) for the
// API's site list. A site's RTT is the median of this site's publisher's
// last pings to it where it pinged it lately (measured beats estimated
// when there are few sites to ping), else the estimate from the two
// sites' WAN coordinates; its Path is that of the last ping. An
// unreachable site has neither.
func Sites(m *mesh.Mesh, now time.Time) []mesh.Site {
	var out []mesh.Site
	own := siteWAN(m)
	for _, r := range Remotes(m, now) {
		heard := r.Heard
		s := mesh.Site{Name: r.Summary.Site, Region: r.Summary.Region, Nodes: r.Summary.Nodes, Alive: r.Summary.Alive,
			Status: r.Status, Via: mesh.ViaFederation, Heard: &heard}
		if r.Status == mesh.SiteUnreachable {
			// Cut off (or down): it has no distance now, measured or
			// estimated.
		} else if ms, ok := own.Measured[s.Name]; ok && ms >= 0 {
			s.RTTMillis = &ms
			s.Path = mesh.PathDirect
			if own.Relayed[s.Name] {
				s.Path = mesh.PathRelayed
			}
		} else if c := r.Summary.Coordinate; own.Vec != nil && c != nil && own.IsValid() && c.IsValid() && own.IsCompatibleWith(c) {
			ms := float64(own.DistanceTo(c)) / float64(time.Millisecond)
			s.RTTMillis = &ms
		}
		out = append(out, s)
	}
	return out
}

// SiteCoordinate returns this agent's site's WAN coordinate, as its
// publishing gateway last wrote it; nil before it did.
func SiteCoordinate(m *mesh.Mesh) *coordinate.Coordinate {
	w := siteWAN(m)
	if w.Vec == nil {
		return nil
	}
	return &w.Coordinate
}

// siteWAN reads wanKey; zero before the publisher wrote it.
func siteWAN(m *mesh.Mesh) wanRecord {
	w, _ := siteWANAt(m)
	return w
}

// siteWANAt is siteWAN with when its writer wrote it (a record's version
// is its writer's clock in microseconds); zero before it was written.
func siteWANAt(m *mesh.Mesh) (wanRecord, time.Time) {
	var w wanRecord
	e, err := m.Get(wanKey)
	if err != nil {
		return w, time.Time{}
	}
	if err := json.Unmarshal(e.Value, &w); err != nil {
		undecodable.note(e, err)
		return wanRecord{}, time.Time{}
	}
	return w, time.UnixMicro(int64(e.Version))
}

// undecodable logs the federation records of the site's catalog that do
// not decode (and are read as absent). Remotes and siteWAN, which have no
// Federation and so no metrics of one, read them at every call: each is
// logged once per key and version.
var undecodable = &badRecords{}

// badRecords logs records that do not decode, once per key and version.
type badRecords struct {
	mu     sync.Mutex
	logged map[string]uint64 // key -> version last logged
	// log receives the lines; nil means slog.Default().
	log *slog.Logger
}

// note logs that e does not decode, unless this version of its key was
// logged already.
func (b *badRecords) note(e mesh.Entry, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.logged[e.Key]; ok && v == e.Version {
		return
	}
	if b.logged == nil {
		b.logged = map[string]uint64{}
	}
	b.logged[e.Key] = e.Version
	log := b.log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("federation: ignoring a catalog record that does not decode",
		"key", e.Key, "version", e.Version, "origin", e.Origin, "err", err)
}

// behindNAT reports whether a node advertises a circuit relay address:
// it is behind a NAT (told so, or AutoNAT found it), and other sites cannot
// dial its other addresses.
func behindNAT(addrs []string) bool {
	for _, a := range addrs {
		if strings.Contains(a, "/p2p-circuit/") {
			return true
		}
	}
	return false
}
