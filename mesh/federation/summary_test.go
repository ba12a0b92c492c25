package federation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
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

// TestUndecodableRecordsAreLoggedOnce: a site record or WAN coordinate that
// does not decode is read as absent, and logged once per version however
// often it is read.
func TestUndecodableRecordsAreLoggedOnce(t *testing.T) {
	id, err := mesh.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	m, err := mesh.New(mesh.Config{Name: "a-1", Identity: id, Transport: (&meshtest.Network{}).NewTransport("a-1"),
		Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "a"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var buf bytes.Buffer
	undecodable.mu.Lock()
	old := undecodable.log
	undecodable.log = slog.New(slog.NewTextHandler(&buf, nil))
	undecodable.mu.Unlock()
	t.Cleanup(func() {
		undecodable.mu.Lock()
		undecodable.log = old
		undecodable.mu.Unlock()
	})
	logged := func(key string) int {
		undecodable.mu.Lock()
		defer undecodable.mu.Unlock()
		return strings.Count(buf.String(), "key="+key+" ")
	}
	bad := json.RawMessage(`"not a record"`)
	site := SitePrefix + "zz"
	for _, key := range []string{site, wanKey} {
		if _, err := m.Put(key, bad, mesh.PutOptions{Scope: mesh.ScopeSite}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if r := Remotes(m, time.Now()); len(r) != 0 {
			t.Fatalf("Remotes = %v, want none", r)
		}
		if c := SiteCoordinate(m); c != nil {
			t.Fatalf("SiteCoordinate = %v, want nil", c)
		}
	}
	if n, w := logged(site), logged(wanKey); n != 1 || w != 1 {
		t.Errorf("logged the site record %d times and the WAN record %d times, want once each:\n%s", n, w, buf.String())
	}
	// A new version of the record is logged again.
	if _, err := m.Put(site, json.RawMessage(`[1]`), mesh.PutOptions{Scope: mesh.ScopeSite}); err != nil {
		t.Fatal(err)
	}
	Remotes(m, time.Now())
	Remotes(m, time.Now())
	if n := logged(site); n != 2 {
		t.Errorf("logged the site record %d times after a new version, want 2", n)
	}
}
