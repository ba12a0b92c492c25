package federation

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// HandOff picks, for a request no node of this site can take, the
// reachable site whose summary shows room for it, and says why; "" when
// none does. Room means free capacity in the tiers the request may use,
// and as many nodes as it has replicas (or gang members) whose free CPU,
// memory and GPUs each fit one (the tiers' shapes). The summary is still
// coarser than the site's own view (shapes are rounded and capped, GPUs
// per fabric are totals), so its placement may find no node: a policy
// handed over once is not handed on. Constraints are checked against each
// site and tier (node.site, node.region, node.tier; a constraint on
// labels or single nodes matches no summary), and a request with a
// latency bound is not handed over: the receiving site's placement cannot
// judge its distance to clients in another site. Of
// the sites with room, the one with the most free GPUs (then CPU) wins.
func HandOff(remotes []Remote, req *placement.Request) (site, why string) {
	if req == nil || req.Latency.P99 > 0 {
		return "", ""
	}
	type fit struct {
		site string
		gpus int
		cpu  int64
		why  string
	}
	var fits []fit
	for _, r := range remotes {
		if r.Status != mesh.SiteReachable {
			continue
		}
		if ok, gpus, cpu, why := room(r.Summary, req); ok {
			fits = append(fits, fit{r.Summary.Site, gpus, cpu, why})
		}
	}
	if len(fits) == 0 {
		return "", ""
	}
	best := slices.MaxFunc(fits, func(a, b fit) int {
		return cmp.Or(cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.cpu, b.cpu), cmp.Compare(b.site, a.site))
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
