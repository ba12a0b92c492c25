package sim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/strata-mesh/strata/placement"
)

// FromNodes makes a topology of nodes as they are, such as a live mesh's
// as its placement engine sees them, to replay a trace over. Sites are
// the nodes' sites, edge sites first, then on-prem, then cloud (a site
// takes the tier most of its nodes have), each by name.
//
// A live mesh has no ground truth for RTT: TrueRTT is then the estimate
// from the nodes' coordinates, the one the engine reads, so SLO
// attainment measures placement against the estimate, not against what
// clients would see. A node without a coordinate is out of every client's
// reach.
func FromNodes(nodes []placement.Node) (*Topology, error) {
	if len(nodes) == 0 {
		return nil, errors.New("sim: no nodes")
	}
	var b placement.Builder
	b.Add(nodes...)
	snap, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	t := &Topology{Nodes: snap.Nodes(), Snapshot: snap}
	bySite := map[string]*Site{}
	tiers := map[string]map[string]int{}
	regions, fabrics, datasets := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, n := range t.Nodes {
		s, ok := bySite[n.Site]
		if !ok {
			s = &Site{Name: n.Site, Region: n.Region}
			bySite[n.Site] = s
			tiers[n.Site] = map[string]int{}
		}
		s.Nodes = append(s.Nodes, i)
		tiers[n.Site][n.Tier]++
		regions[n.Region] = true
		if n.Fabric != "" {
			fabrics[n.Fabric] = true
		}
		for _, d := range n.Datasets {
			datasets[d] = true
		}
	}
	rank := map[string]int{placement.TierEdge: 0, placement.TierOnprem: 1, placement.TierCloud: 2}
	for name, s := range bySite {
		best := 0
		for _, tier := range []string{placement.TierEdge, placement.TierOnprem, placement.TierCloud} {
			if n := tiers[name][tier]; n > best {
				s.Tier, best = tier, n
			}
		}
		t.Sites = append(t.Sites, *s)
	}
	slices.SortFunc(t.Sites, func(a, b Site) int {
		return cmp.Or(cmp.Compare(rank[a.Tier], rank[b.Tier]), cmp.Compare(a.Name, b.Name))
	})
	t.Regions = slices.Sorted(maps.Keys(regions))
	t.Fabrics = slices.Sorted(maps.Keys(fabrics))
	t.Datasets = slices.Sorted(maps.Keys(datasets))
	return t, nil
}

// estimatedRTT is the RTT the coordinates of nodes a and b predict, or
// the longest duration when one has none.
func (t *Topology) estimatedRTT(a, b int) time.Duration {
	ca, cb := t.Nodes[a].Coord, t.Nodes[b].Coord
	if ca == nil || cb == nil || len(ca.Vec) != len(cb.Vec) {
		return math.MaxInt64
	}
	return ca.DistanceTo(cb)
}
