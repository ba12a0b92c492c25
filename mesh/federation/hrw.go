package federation

import (
	"cmp"
	"hash/fnv"
	"slices"

	"github.com/strata-mesh/strata/mesh"
)

// Gateways returns the names of the k gateways of site among nodes, best
// first: the live members (alive or suspect) of the site ranked by
// rendezvous hashing of (site, node ID). Every agent that sees the same members computes the same
// list; when a gateway fails, the next one in rank takes its place and the
// others stay.
func Gateways(nodes []mesh.Node, site string, k int) []string {
	type ranked struct {
		name  string
		score uint64
	}
	var rs []ranked
	for _, n := range nodes {
		if n.Site != site || (n.Status != mesh.StatusAlive && n.Status != mesh.StatusSuspect) {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(site))
		h.Write([]byte{0})
		h.Write([]byte(n.ID))
		rs = append(rs, ranked{n.Name, h.Sum64()})
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	var out []string
	for _, r := range rs[:min(k, len(rs))] {
		out = append(out, r.name)
	}
	return out
}
