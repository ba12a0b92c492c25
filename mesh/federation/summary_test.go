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
