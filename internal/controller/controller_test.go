package controller

import (
	"slices"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
)

// node is a mesh node of site with status st that holds key's assignment
// at epoch (accepted) when epoch > 0.
func node(name, site string, st mesh.Status, key string, epoch uint64) mesh.Node {
	n := mesh.Node{NodeState: mesh.NodeState{Name: name, ID: "id-" + name, Site: site}, Status: st}
	if epoch > 0 {
		n.Assignments = []mesh.Assignment{{Key: key, Epoch: epoch, Accepted: true}}
	}
	return n
}

// TestUnreachableSiteKeepsItsReplicas: a failed node whose whole site is
// gone is not replaced, and stays in a new placement; a failed node whose
// site still answers is replaced.
func TestUnreachableSiteKeepsItsReplicas(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Generation: 3}
	rec := catalog.Placement{Key: key, Kind: p.Kind, Name: "web", Generation: 3, Epoch: 7, Wanted: 2, State: catalog.StatePlaced,
		Nodes: []catalog.PlacedNode{{Name: "a1", Site: "edge-a", Client: "edge-a"}, {Name: "b1", Site: "edge-b", Client: "edge-b"}}}
	c := New(Config{})

	// edge-b's only node failed: the site is unreachable.
	nodes := []mesh.Node{node("a1", "edge-a", mesh.StatusAlive, key, 7), node("b1", "edge-b", mesh.StatusFailed, key, 7), node("c1", "dc", mesh.StatusAlive, key, 0)}
	cut := mesh.UnreachableSites(nodes)
	if !cut["edge-b"] || cut["edge-a"] {
		t.Fatalf("unreachable sites %v, want edge-b only", cut)
	}
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	if need, why := c.needsPlacement(p, rec, true, byName, cut); need {
		t.Errorf("placed again (%s) though the failed node's whole site is unreachable", why)
	}
	keep := kept(p, rec, true, nodes, cut)
	if got := names(keep); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Errorf("kept %v, want a1 and b1", got)
	}

	// edge-b has another node that answers: b1 is a node failure.
	nodes = append(nodes, node("b2", "edge-b", mesh.StatusAlive, key, 0))
	byName["b2"] = nodes[len(nodes)-1]
	cut = mesh.UnreachableSites(nodes)
	if need, _ := c.needsPlacement(p, rec, true, byName, cut); !need {
		t.Error("not placed again though b1 failed and its site answers")
	}
	keep = kept(p, rec, true, nodes, cut)
	if got := names(keep); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("kept %v, want a1", got)
	}
	// The fresh decision moved edge-a's replica to c1 and put edge-b's on
	// b2: a1 stays, b2 is added, c1 is not taken.
	fresh := []catalog.PlacedNode{{Name: "c1", Client: "edge-a"}, {Name: "b2", Client: "edge-b"}}
	if got := names(mergeKept(keep, fresh, 2)); !slices.Equal(got, []string{"a1", "b2"}) {
		t.Errorf("merged %v, want a1 b2", got)
	}
	// Without clients: count-based.
	if got := names(mergeKept([]catalog.PlacedNode{{Name: "a1"}}, []catalog.PlacedNode{{Name: "c1"}, {Name: "a1"}, {Name: "b2"}}, 2)); !slices.Equal(got, []string{"a1", "c1"}) {
		t.Errorf("merged %v, want a1 c1", got)
	}
	// A new generation keeps nothing.
	p.Generation++
	if keep := kept(p, rec, true, nodes, cut); len(keep) != 0 {
		t.Errorf("kept %v across a policy change", names(keep))
	}
}

func names(ns []catalog.PlacedNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}
