package federation

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

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
	// Artifacts and Datasets what its nodes hold.
	Models    []string `json:"models,omitempty"`
	Artifacts []string `json:"artifacts,omitempty"`
	Datasets  []string `json:"datasets,omitempty"`
	// Gateways are the site's gateways, best first, with the libp2p
	// addresses another site dials them at.
	Gateways []Gateway `json:"gateways"`
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
}

// Gateway names one gateway and where to reach it.
type Gateway struct {
	Name  string   `json:"name"`
	Addrs []string `json:"addrs"`
}

// Summarize builds site's summary from the nodes of its pool, with the
// given gateways (names, best first).
func Summarize(site string, nodes []mesh.Node, gateways []string) Summary {
	s := Summary{Site: site, Seq: uint64(time.Now().UnixMicro()), Tiers: map[string]Capacity{}, Fabrics: map[string]int{}}
	models, artifacts, datasets := map[string]bool{}, map[string]bool{}, map[string]bool{}
	addrs := map[string][]string{}
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
		s.Tiers[n.Tier] = c
		if f := n.Capabilities.Fabric; f != "" {
			s.Fabrics[f] += len(n.Capabilities.GPUs)
		}
		for _, m := range n.Models {
			models[m] = true
		}
		for _, a := range n.Locality.Artifacts {
			artifacts[a] = true
		}
		for _, d := range n.Locality.Datasets {
			datasets[d] = true
		}
	}
	s.Models = slices.Sorted(maps.Keys(models))
	s.Artifacts = slices.Sorted(maps.Keys(artifacts))
	s.Datasets = slices.Sorted(maps.Keys(datasets))
	for _, g := range gateways {
		s.Gateways = append(s.Gateways, Gateway{Name: g, Addrs: addrs[g]})
	}
	return s
}

// same reports whether two summaries of a site say the same, Seq aside.
func same(a, b Summary) bool {
	a.Seq, b.Seq = 0, 0
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
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
	// (see Reachability), else unreachable.
	Status mesh.SiteStatus `json:"status"`
}

// Reachability is how long a site stays reachable after its last summary
// was heard: several summary intervals, so one lost summary does not flap
// it.
const Reachability = 30 * time.Second

// Remotes returns the other sites this agent's site has heard of, sorted by
// name, each marked reachable or unreachable by when it was last heard.
func Remotes(m *mesh.Mesh, now time.Time) []Remote {
	var out []Remote
	for _, e := range m.List(SitePrefix) {
		var r Remote
		if err := json.Unmarshal(e.Value, &r); err != nil || r.Summary.Site != strings.TrimPrefix(e.Key, SitePrefix) {
			continue
		}
		r.Status = mesh.SiteReachable
		if now.Sub(r.Heard) > Reachability {
			r.Status = mesh.SiteUnreachable
		}
		out = append(out, r)
	}
	return out
}

// Sites returns the other sites as mesh.Site rows (via federation) for the
// API's site list.
func Sites(m *mesh.Mesh, now time.Time) []mesh.Site {
	var out []mesh.Site
	for _, r := range Remotes(m, now) {
		heard := r.Heard
		out = append(out, mesh.Site{Name: r.Summary.Site, Region: r.Summary.Region, Nodes: r.Summary.Nodes, Alive: r.Summary.Alive,
			Status: r.Status, Via: mesh.ViaFederation, Heard: &heard})
	}
	return out
}
