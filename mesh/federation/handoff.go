package federation

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// HandOff picks, for a request no node of site here can take, the
// reachable site whose summary shows room for it, and says why; "" when
// none does. Room means free capacity in the tiers the request may use,
// and as many nodes as it has replicas (or gang members) whose free CPU,
// memory and GPUs each fit one (the tiers' shapes). The summary is still
// coarser than the site's own view (shapes are rounded and capped, GPUs
// per fabric are totals), so its placement may find no node: a policy
// handed over once is not handed on. Constraints are checked against each
// site and tier (node.site, node.region, node.tier; a constraint on
// labels or single nodes matches no summary).
//
// A request with a latency bound goes only to a site within the bound of
// every client site it names, as the sites' WAN coordinates estimate it
// (own is here's coordinate): a client in the site itself counts as zero.
// It is not handed over when a client is a region or a site without a
// coordinate, nor to a site without one. Of the sites that qualify, the
// one nearest its farthest client wins when there is a bound, then the one
// with the most free GPUs (then CPU).
func HandOff(here string, own *coordinate.Coordinate, remotes []Remote, req *placement.Request) (site, why string) {
	if req == nil {
		return "", ""
	}
	coords := map[string]*coordinate.Coordinate{here: own}
	for _, r := range remotes {
		if r.Summary.Site != here {
			coords[r.Summary.Site] = r.Summary.Coordinate
		}
	}
	// Coordinates of other dimensions than own's cannot be compared
	// (serf's DistanceTo panics on them).
	usable := func(c *coordinate.Coordinate) bool {
		return c != nil && c.IsValid() && own.IsCompatibleWith(c)
	}
	bound := req.Latency.P99 > 0
	if bound {
		if own == nil || !own.IsValid() {
			return "", ""
		}
		for _, c := range req.Latency.Clients {
			if !usable(coords[c]) {
				return "", ""
			}
		}
	}
	type fit struct {
		site  string
		worst time.Duration
		gpus  int
		cpu   int64
		why   string
	}
	var fits []fit
	for _, r := range remotes {
		if r.Status != mesh.SiteReachable {
			continue
		}
		ok, gpus, cpu, why := room(r.Summary, req)
		if !ok {
			continue
		}
		f := fit{site: r.Summary.Site, gpus: gpus, cpu: cpu, why: why}
		if bound {
			c := r.Summary.Coordinate
			if !usable(c) {
				continue
			}
			far := ""
			for _, name := range req.Latency.Clients {
				if name == f.site {
					continue
				}
				if d := c.DistanceTo(coords[name]); d > f.worst || far == "" {
					f.worst, far = d, name
				}
			}
			if f.worst > req.Latency.P99 {
				continue
			}
			if far != "" {
				f.why += fmt.Sprintf("; its farthest client site, %s, is an estimated %s away", far, f.worst.Round(100*time.Microsecond))
			} else {
				f.why += "; its clients are in the site"
			}
		}
		fits = append(fits, f)
	}
	if len(fits) == 0 {
		return "", ""
	}
	best := slices.MaxFunc(fits, func(a, b fit) int {
		return cmp.Or(cmp.Compare(b.worst, a.worst), cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.cpu, b.cpu), cmp.Compare(b.site, a.site))
	})
	return best.site, best.why
}

// room reports whether a site's summary shows room for req, with the free
// GPUs and CPU of its matching tiers.
func room(s Summary, req *placement.Request) (ok bool, gpus int, cpu int64, why string) {
	members := max(req.Replicas, 1)
	perGPUs := req.Resources.GPUs
	if req.Kind == placement.Training {
		if req.Gang.Nodes > 0 {
			members = req.Gang.Nodes
		}
		if req.Gang.GPUsPerNode > 0 {
			perGPUs = req.Gang.GPUsPerNode
		}
	}
	var nodes, fitting int
	var mem int64
	var tiers []string
	shaped := false
	for _, tier := range slices.Sorted(maps.Keys(s.Tiers)) {
		c := s.Tiers[tier]
		if len(req.Tiers) > 0 && !slices.Contains(req.Tiers, tier) {
			continue
		}
		n := &policy.Node{Site: s.Site, Region: s.Region, Tier: tier, CPU: c.Millicores, Memory: c.Memory,
			FreeCPU: c.FreeCPU, FreeMemory: c.FreeMemory, Labels: map[string]string{}}
		matches := true
		for _, con := range req.Constraints {
			if m, err := con.Match(n); err != nil || !m {
				matches = false
				break
			}
		}
		if !matches {
			continue
		}
		tiers = append(tiers, tier)
		nodes += c.Nodes
		cpu += c.FreeCPU
		mem += c.FreeMemory
		gpus += c.FreeGPUs
		for _, sh := range c.Shapes {
			shaped = true
			if sh.FreeCPU >= req.Resources.CPU && sh.FreeMemory >= req.Resources.Memory && sh.FreeGPUs >= perGPUs {
				fitting += sh.Nodes
			}
		}
	}
	need := int64(members)
	if len(tiers) == 0 || nodes < members || cpu < need*req.Resources.CPU || mem < need*req.Resources.Memory || gpus < members*perGPUs {
		return false, 0, 0, ""
	}
	// Each replica or gang member takes a node of its own. A summary
	// from an agent before shapes has sums only.
	if shaped && fitting < members {
		return false, 0, 0, ""
	}
	if req.Kind == placement.Training && req.Gang.SameFabric && perGPUs > 0 &&
		slices.Max(append(slices.Collect(maps.Values(s.Fabrics)), 0)) < members*perGPUs {
		return false, 0, 0, ""
	}
	if shaped {
		return true, gpus, cpu, fmt.Sprintf("its summary shows %d node(s) in %v with room for one each, of %dm CPU, %d MiB and %d GPU(s) free", fitting, tiers, cpu, mem>>20, gpus)
	}
	return true, gpus, cpu, fmt.Sprintf("its summary shows %d node(s) in %v with %dm CPU, %d MiB and %d GPU(s) free", nodes, tiers, cpu, mem>>20, gpus)
}
