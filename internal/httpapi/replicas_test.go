package httpapi

import (
	"strings"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
)

// TestReplicaStates: a placed service reads placed only when every
// replica serves; pending with the reason while its model is not
// published; loading while one loads; failed with the node and reason.
func TestReplicaStates(t *testing.T) {
	t.Parallel()
	node := func(name string, reps ...mesh.Replica) mesh.Node {
		n := mesh.Node{Status: mesh.StatusAlive}
		n.Name, n.Replicas = name, reps
		return n
	}
	const key = "InferenceService/fraud"
	unpublished := mesh.Replica{Policy: key, State: mesh.ReplicaLoading, Reason: "model fraud:3 not published (or not replicated here yet)"}
	for _, c := range []struct {
		name       string
		nodes      map[string]mesh.Node
		state, msg string
	}{
		{"serving", map[string]mesh.Node{"a": node("a", mesh.Replica{Policy: key, State: mesh.ReplicaServing})}, catalog.StatePlaced, "serving on every node"},
		{"unpublished", map[string]mesh.Node{"a": node("a", unpublished)}, catalog.StatePending, "model fraud:3 not published"},
		{"loading", map[string]mesh.Node{"a": node("a", mesh.Replica{Policy: key, State: mesh.ReplicaLoading})}, catalog.StateLoading, "0 of 1 replicas serving"},
		{"failed", map[string]mesh.Node{"a": node("a", mesh.Replica{Policy: key, State: mesh.ReplicaFailed, Reason: "unsupported operator Foo"})}, catalog.StateFailed, "a: unsupported operator Foo"},
	} {
		rec := catalog.Placement{Key: key, State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "a"}}}
		replicaStates(&rec, c.nodes)
		if rec.State != c.state || !strings.Contains(rec.Message, c.msg) {
			t.Errorf("%s: %s %q; want %s with %q", c.name, rec.State, rec.Message, c.state, c.msg)
		}
	}
	// Placed in part, serving what it placed: it says why no more. A node
	// of another site (not seen here) reads from the record its owner
	// wrote.
	rec := catalog.Placement{Key: key, State: catalog.StatePlaced, Wanted: 2, Message: "placed 1 of 2: 7 latency_slo",
		Nodes: []catalog.PlacedNode{{Name: "far", Replica: mesh.ReplicaServing}}}
	replicaStates(&rec, map[string]mesh.Node{})
	if rec.State != catalog.StatePlaced || rec.Message != "serving; placed 1 of 2: 7 latency_slo" {
		t.Errorf("placed in part, served in another site: %s %q", rec.State, rec.Message)
	}
}

// TestStandbyWarm: a replica's standby reads warm when its node document
// lists the replica's model among its standbys, and not for another
// version or before it has loaded.
func TestStandbyWarm(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/fraud"
	replica := mesh.Node{Status: mesh.StatusAlive}
	replica.Name, replica.Replicas = "a", []mesh.Replica{{Policy: key, Model: "fraud@3", State: mesh.ReplicaServing}}
	for _, c := range []struct {
		name     string
		standbys []string
		warm     bool
	}{{"loaded", []string{"fraud@3"}, true}, {"another version", []string{"fraud@2"}, false}, {"cold", nil, false}} {
		standby := mesh.Node{Status: mesh.StatusAlive}
		standby.Name, standby.Standbys = "b", c.standbys
		rec := catalog.Placement{Key: key, State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "a", Standby: "b"}}}
		replicaStates(&rec, map[string]mesh.Node{"a": replica, "b": standby})
		if rec.Nodes[0].StandbyWarm != c.warm {
			t.Errorf("%s: standby warm %v, want %v", c.name, rec.Nodes[0].StandbyWarm, c.warm)
		}
	}
}
