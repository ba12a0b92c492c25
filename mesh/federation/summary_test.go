package federation

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/strata-mesh/strata/mesh"
)

// TestSummaryNamesFewHolders: a summary names up to HoldersPerBlob live
// holders of each blob, the same nodes for every blob, and says where
// only those are.
func TestSummaryNamesFewHolders(t *testing.T) {
	t.Parallel()
	var nodes []mesh.Node
	for i := 5; i >= 0; i-- { // not in name order
		n := mesh.Node{NodeState: mesh.NodeState{Name: fmt.Sprintf("n%d", i), Site: "s", Tier: mesh.TierEdge}, Status: mesh.StatusAlive}
		n.Addrs.Data = fmt.Sprintf("10.0.0.%d:7471", i)
		n.Locality.Artifacts = []string{"d1"}
		if i%2 == 0 {
			n.Locality.Artifacts = append(n.Locality.Artifacts, "d2")
		}
		if i == 0 {
			n.Status = mesh.StatusFailed
		}
		if i == 3 { // behind a NAT, reached through a relay
			n.Addrs.Federation = []string{"/ip4/10.0.0.3/tcp/7950/p2p/QmN3", "/ip4/10.0.9.1/tcp/7950/p2p/QmRelay/p2p-circuit/p2p/QmN3"}
		}
		nodes = append(nodes, n)
	}
	s := Summarize("s", nodes, nil)
	want := map[string][]string{"d1": {"n1", "n2", "n3"}, "d2": {"n2", "n4"}}
	if !reflect.DeepEqual(s.Holders, want) {
		t.Errorf("holders = %v, want %v", s.Holders, want)
	}
	if len(s.Contacts) != 4 || s.Contacts["n4"].Data != "10.0.0.4:7471" {
		t.Errorf("contacts = %v, want n1..n4's", s.Contacts)
	}
	if c := s.Contacts["n3"]; c.Data != "" || len(c.Federation) != 2 {
		t.Errorf("n3, behind a NAT: contact %+v, want its libp2p addresses and no QUIC address", c)
	}
}

// TestSummaryShapes: a tier's shapes group its live nodes by free
// resources, rounded down, largest first, at most MaxShapes.
func TestSummaryShapes(t *testing.T) {
	t.Parallel()
	node := func(name string, cpu, mem int64, gpus int) mesh.Node {
		n := mesh.Node{NodeState: mesh.NodeState{Name: name, Site: "s", Tier: mesh.TierEdge}, Status: mesh.StatusAlive}
		n.Load.FreeCPU, n.Load.FreeMemory, n.Load.FreeGPUs = cpu, mem, gpus
		return n
	}
	nodes := []mesh.Node{node("a", 2100, 1<<30+5, 0), node("b", 2000, 1<<30, 0), node("c", 8000, 4<<30, 2)}
	dead := node("d", 64000, 64<<30, 8)
	dead.Status = mesh.StatusFailed
	nodes = append(nodes, dead)
	got := Summarize("s", nodes, nil).Tiers["edge"].Shapes
	want := []Shape{{FreeCPU: 8000, FreeMemory: 4 << 30, FreeGPUs: 2, Nodes: 1}, {FreeCPU: 2000, FreeMemory: 1 << 30, Nodes: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("shapes = %+v, want %+v", got, want)
	}
	nodes = nil
	for i := range 2 * MaxShapes {
		nodes = append(nodes, node(fmt.Sprint(i), int64(i+1)*1000, 1<<30, 0))
	}
	got = Summarize("s", nodes, nil).Tiers["edge"].Shapes
	if len(got) != MaxShapes || got[0].FreeCPU != 2*MaxShapes*1000 || got[MaxShapes-1].FreeCPU != (MaxShapes+1)*1000 {
		t.Errorf("%d shapes from %d kinds of node, largest first: %+v", len(got), 2*MaxShapes, got)
	}
}
