package placement

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// Live keeps the snapshot of an estate whose nodes keep changing. Update
// takes the nodes as they are now and returns their snapshot. Most changes
// in a running mesh are load: an assignment admitted or released changes
// a node's free CPU, memory and GPUs. Update lays those over the index it
// built last, as reservations lie on a clone, at a cost in the number of
// nodes that changed. It builds the index again only when one of these
// changed:
//   - the set of nodes or their order;
//   - anything the index sorts or filters a node by: name, tier, site,
//     region, rack, labels, arch, CPU and memory totals, GPUs (model,
//     memory, health), fabric, alive, artifacts, datasets;
//   - a node's coordinate, by more than CoordSlack of RTT;
//   - the overlay grew past an eighth of the nodes (a pass reads an
//     overlaid node's free resources from a map, not in line).
//
// A decision on an updated snapshot is the decision on one built from the
// same nodes, but for coordinates that moved less than CoordSlack.
// Live is not safe for concurrent use; the snapshots it returns are.
type Live struct {
	// CoordSlack is how far a node's coordinate may move, as the most it
	// can change the RTT estimated to any client, before the index is
	// built again. Vivaldi moves coordinates a little on every probe; zero
	// builds again on any move.
	CoordSlack time.Duration

	cur    *Snapshot // the last built index, with the load overlay
	remote []RemoteClient
	moved  bool // remote changed since cur was built
	stats  LiveStats
}

// SetRemoteClients sets the client sites that no node is in
// (Builder.AddRemoteClient) for the snapshots Update returns from now on.
// The index is built again when a client is added, removed, or moved by
// more than CoordSlack.
func (l *Live) SetRemoteClients(rs []RemoteClient) {
	if !slices.EqualFunc(l.remote, rs, func(a, b RemoteClient) bool {
		return a.Name == b.Name && a.Via == b.Via && a.Unreachable == b.Unreachable && (a.RTT-b.RTT).Abs() <= l.CoordSlack
	}) {
		l.remote = slices.Clone(rs)
		l.moved = true
	}
}

// LiveStats counts what Live did.
type LiveStats struct {
	// Builds counts indexes built; Updates snapshots returned without
	// building one.
	Builds, Updates int
	// Overlaid is how many nodes' free resources differ from the index.
	Overlaid int
	// Reason says why the last index was built.
	Reason string
}

// Stats returns what Live has done so far.
func (l *Live) Stats() LiveStats {
	st := l.stats
	if l.cur != nil {
		st.Overlaid = len(l.cur.over)
	}
	return st
}

// Update returns the snapshot of nodes. The snapshot is a clone: reserve
// on it, or clone it again, as on any clone.
func (l *Live) Update(nodes []Node) (*Snapshot, error) {
	why, changed := l.diff(nodes)
	if why == "" && l.moved {
		why = "remote client sites changed"
	}
	if why != "" {
		var b Builder
		b.Add(nodes...)
		for _, rc := range l.remote {
			b.AddRemoteClient(rc)
		}
		l.moved = false
		s, err := b.Build()
		if err != nil {
			l.cur = nil
			return nil, err
		}
		l.cur = s.Clone()
		l.stats.Builds++
		l.stats.Reason = why
		return l.cur.Clone(), nil
	}
	for _, c := range changed {
		l.cur.setFree(c.i, c.free)
	}
	l.stats.Updates++
	return l.cur.Clone(), nil
}

// nodeFree is what node i has free now.
type nodeFree struct {
	i    int32
	free freeState
}

// diff says why nodes need a new index, or ("", the nodes whose free
// resources differ from the overlay's) when the index held serves.
func (l *Live) diff(nodes []Node) (string, []nodeFree) {
	switch {
	case l.cur == nil:
		return "first snapshot", nil
	case len(nodes) != len(l.cur.ix.nodes):
		return "nodes joined or left", nil
	}
	var changed []nodeFree
	offIndex := 0 // nodes whose load differs from the index's
	for i := range nodes {
		a, b := &l.cur.ix.nodes[i].Node, &nodes[i]
		if why := indexedChange(a, b, l.CoordSlack); why != "" {
			return "node " + b.Name + ": " + why, nil
		}
		f := freeOfNode(&l.cur.ix.nodes[i], b)
		if f != l.cur.ix.hotOf(int32(i)).free {
			offIndex++
		}
		if f != l.cur.freeOf(int32(i)) {
			changed = append(changed, nodeFree{int32(i), f})
		}
	}
	if offIndex > 64 && offIndex > len(nodes)/8 {
		return "load changed on many nodes", nil
	}
	return "", changed
}

// freeOfNode is what n says it has free, as the index's node s (the same
// node) holds it.
func freeOfNode(s *snode, n *Node) freeState {
	f := freeState{cpu: n.FreeCPU, mem: n.FreeMemory}
	for j := range min(len(n.GPUs), len(s.GPUs)) {
		if n.GPUs[j].Free {
			f.gpus |= 1 << j
		}
	}
	return f
}

// indexedChange says what the index holds of a that b changes, "" for
// nothing (load aside).
func indexedChange(a, b *Node, slack time.Duration) string {
	switch {
	case a.ID != b.ID || a.Name != b.Name:
		return "identity"
	case a.Tier != b.Tier || a.Site != b.Site || a.Region != b.Region || a.Rack != b.Rack:
		return "location"
	case a.Alive != b.Alive:
		return "alive"
	case a.Arch != b.Arch || a.CPU != b.CPU || a.Memory != b.Memory || a.Fabric != b.Fabric:
		return "capacity"
	case !maps.Equal(a.Labels, b.Labels):
		return "labels"
	case !slices.EqualFunc(a.GPUs, b.GPUs, func(x, y GPU) bool {
		return x.Model == y.Model && x.Memory == y.Memory && x.Healthy == y.Healthy
	}):
		return "GPUs"
	case !slices.Equal(a.Artifacts, b.Artifacts) || !slices.Equal(a.Datasets, b.Datasets):
		return "locality"
	case coordMoved(a.Coord, b.Coord) > slack.Seconds():
		return "coordinate"
	}
	return ""
}

// coordMoved bounds, in seconds, how much the RTT estimated from any
// coordinate to a can change when a becomes b: the distance between the
// vectors plus the changes in height and adjustment. A coordinate gained
// or lost is an infinite move.
func coordMoved(a, b *coordinate.Coordinate) float64 {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil || b == nil || len(a.Vec) != len(b.Vec):
		return math.Inf(1)
	}
	return vecDist(a.Vec, b.Vec) + math.Abs(a.Height-b.Height) + math.Abs(a.Adjustment-b.Adjustment)
}
