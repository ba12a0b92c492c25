package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-mesh/strata/mesh/pki"
)

// forgeNode is a node of a trusted mesh that never joins anyone: the
// tests hand it crafted records as if a peer had gossiped them.
type forgeNode struct {
	m  *Mesh
	id Identity
}

type forgeCA struct{ cert, key []byte }

func (ca forgeCA) node(tb testing.TB, name, site, tier string, controller bool, authorize func(Reader, Writer, Entry) error) forgeNode {
	tb.Helper()
	id, err := NewIdentity()
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := pki.IssueNodeCertClaims(ca.cert, ca.key, id.Public(), name, nil, pki.Claims{ID: id.ID(), Site: site, Tier: tier, Controller: controller})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := New(Config{Name: name, Identity: id, BindAddr: "127.0.0.1:0", Registerer: prometheus.NewRegistry(),
		Trust: &Trust{CA: ca.cert, Cert: cert, Authorize: authorize},
		Local: NodeState{Tier: tier, Site: site, Controller: controller}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return forgeNode{m: m, id: id}
}

func newForgeCA(tb testing.TB) forgeCA {
	cert, key, err := pki.NewCA("")
	if err != nil {
		tb.Fatal(err)
	}
	return forgeCA{cert, key}
}

// ownDoc returns n's signed document as it gossips it.
func (n forgeNode) ownDoc(tb testing.TB) []byte {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	b, err := encodeState(n.m.docs[n.m.id])
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// sign has n sign s as its own (as a compromised node could).
func (n forgeNode) sign(tb testing.TB, s NodeState) []byte {
	s.Sig, s.Cert, s.raw = nil, nil, nil
	body, err := json.Marshal(&s)
	if err != nil {
		tb.Fatal(err)
	}
	raw, _, _ := n.m.trust.sign(body, true)
	return raw
}

// signEntry has n sign e, whatever its key.
func (n forgeNode) signEntry(tb testing.TB, e Entry) []byte {
	e.Sig, e.Cert, e.raw = nil, nil, nil
	body, err := json.Marshal(&e)
	if err != nil {
		tb.Fatal(err)
	}
	raw, _, _ := n.m.trust.sign(body, false)
	return raw
}

func refusedTotal(m *Mesh, kind, reason string) float64 {
	var d dto.Metric
	if err := m.metrics.recordsRefused.WithLabelValues(kind, reason).Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}

func rules(_ Reader, w Writer, e Entry) error {
	if strings.HasPrefix(e.Key, "policies/") && !w.Controller {
		return errors.New("controllers only")
	}
	return nil
}

// TestForgedRecordsAreRefused plays a compromised edge node (its own
// certificate and key) and an insider (no certificate) against a
// controller: every forgery is refused with its reason and counted.
func TestForgedRecordsAreRefused(t *testing.T) {
	ca := newForgeCA(t)
	ctrl := ca.node(t, "ctrl", "s", TierOnprem, true, rules)
	edge := ca.node(t, "edge", "s", TierEdge, false, rules)
	victim := ca.node(t, "victim", "s", TierOnprem, true, rules)

	// The controller learns the edge node's and the victim's real documents.
	for _, n := range []forgeNode{edge, victim} {
		s, err := decodeState(n.ownDoc(t))
		if err != nil {
			t.Fatal(err)
		}
		if !ctrl.m.merge(s, false) {
			t.Fatalf("the controller refused %s's own document", n.m.Name())
		}
	}
	victimDoc, _ := victim.m.Node(victim.m.ID())
	edgeDoc := edge.m.Local()
	future := uint64(time.Now().Add(time.Hour).UnixMicro())

	docs := []struct {
		name, reason string
		raw          func() []byte
	}{
		{"the victim's document, unsigned, at the highest version", refuseFuture, func() []byte {
			s := victimDoc.NodeState.Clone()
			s.Version, s.Addrs.API = math.MaxUint64, "127.0.0.1:1"
			b, _ := json.Marshal(&s)
			return b
		}},
		{"the victim's document, unsigned", refuseUnsigned, func() []byte {
			s := victimDoc.NodeState.Clone()
			s.Version++
			s.Addrs.API = "127.0.0.1:1"
			b, _ := json.Marshal(&s)
			return b
		}},
		{"the victim's document signed by the edge node", refuseCertMismatch, func() []byte {
			s := victimDoc.NodeState.Clone()
			s.Version++
			return edge.sign(t, s)
		}},
		{"the edge node's document claiming the controller role", refuseCertMismatch, func() []byte {
			s := edgeDoc.Clone()
			s.Version, s.Controller = uint64(time.Now().UnixMicro()), true
			return edge.sign(t, s)
		}},
		{"the edge node's document claiming another site", refuseCertMismatch, func() []byte {
			s := edgeDoc.Clone()
			s.Version, s.Site = uint64(time.Now().UnixMicro()), "elsewhere"
			return edge.sign(t, s)
		}},
		{"the edge node's document with a 2-dimensional coordinate", refuseInvalid, func() []byte {
			s := edgeDoc.Clone()
			s.Version, s.Coord = uint64(time.Now().UnixMicro()), &coordinate.Coordinate{Vec: []float64{1, 2}}
			return edge.sign(t, s)
		}},
		{"the edge node's document with a coordinate far out of bounds", refuseInvalid, func() []byte {
			s := edgeDoc.Clone()
			c := coordinate.NewCoordinate(coordinate.DefaultConfig())
			c.Vec[3] = 1e300
			s.Version, s.Coord = uint64(time.Now().UnixMicro()), c
			b := edge.sign(t, s)
			return b
		}},
		{"the edge node's document with negative traffic", refuseInvalid, func() []byte {
			s := edgeDoc.Clone()
			s.Version, s.Traffic = uint64(time.Now().UnixMicro()), []ModelTraffic{{Model: "m@1", RPS: 3, Inflight: -40}}
			return edge.sign(t, s)
		}},
		{"the edge node's document with traffic from too many client sites", refuseInvalid, func() []byte {
			s := edgeDoc.Clone()
			sites := map[string]float64{}
			for i := range MaxTrafficSites + 1 {
				sites[fmt.Sprintf("site-%d", i)] = 1
			}
			s.Version, s.Traffic = uint64(time.Now().UnixMicro()), []ModelTraffic{{Model: "m@1", RPS: 3, Sites: sites}}
			return edge.sign(t, s)
		}},
		{"the edge node's document with traffic from a site that is no name", refuseInvalid, func() []byte {
			s := edgeDoc.Clone()
			s.Version, s.Traffic = uint64(time.Now().UnixMicro()), []ModelTraffic{{Model: "m@1", RPS: 3, Sites: map[string]float64{"edge\x00a": 3}}}
			return edge.sign(t, s)
		}},
		{"the edge node's document from the future", refuseFuture, func() []byte {
			s := edgeDoc.Clone()
			s.Version = future
			return edge.sign(t, s)
		}},
		{"the edge node's document with a byte changed", refuseSignature, func() []byte {
			s := edgeDoc.Clone()
			s.Version = uint64(time.Now().UnixMicro())
			b := edge.sign(t, s)
			return []byte(strings.Replace(string(b), `"workloads":0`, `"workloads":9`, 1))
		}},
	}
	for _, tt := range docs {
		t.Run(tt.name, func(t *testing.T) {
			before := refusedTotal(ctrl.m, "state", tt.reason)
			raw := tt.raw()
			s, err := decodeState(raw)
			if err != nil {
				if tt.reason == refuseInvalid {
					return // does not even decode: dropped as malformed
				}
				t.Fatal(err)
			}
			if ctrl.m.merge(s, true) {
				t.Fatal("merged")
			}
			if got := refusedTotal(ctrl.m, "state", tt.reason); got != before+1 {
				t.Errorf("refused{reason=%s} went from %v to %v", tt.reason, before, got)
			}
		})
	}
	if n, _ := ctrl.m.Node("victim"); n.Addrs.API == "127.0.0.1:1" {
		t.Error("the victim's document was replaced")
	}

	entries := []struct {
		name, reason string
		e            func() *Entry
	}{
		{"a policy by the edge node", refuseForbidden, func() *Entry {
			e := &Entry{Key: "policies/TrainingJob/pwn", Value: json.RawMessage(`{}`), Version: uint64(time.Now().UnixMicro()), Origin: edge.m.ID(), Written: time.Now()}
			raw := edge.signEntry(t, *e)
			e, _ = decodeEntry(raw)
			return e
		}},
		{"a policy in the controller's name, signed by the edge node", refuseSignature, func() *Entry {
			e := &Entry{Key: "policies/TrainingJob/pwn", Value: json.RawMessage(`{}`), Version: uint64(time.Now().UnixMicro()), Origin: ctrl.m.ID(), Written: time.Now()}
			raw := edge.signEntry(t, *e)
			e, _ = decodeEntry(raw)
			return e
		}},
		{"an unsigned policy at the highest version", refuseFuture, func() *Entry {
			return &Entry{Key: "policies/TrainingJob/pwn", Value: json.RawMessage(`{}`), Version: math.MaxUint64, Origin: "nobody", Written: time.Now()}
		}},
		{"an unsigned policy", refuseUnsigned, func() *Entry {
			return &Entry{Key: "policies/TrainingJob/pwn", Value: json.RawMessage(`{}`), Version: uint64(time.Now().UnixMicro()), Origin: "nobody", Written: time.Now()}
		}},
		{"an entry of a writer never seen", refuseUnknown, func() *Entry {
			stranger := ca.node(t, "stranger", "s", TierCloud, true, rules)
			e := &Entry{Key: "placements/x", Value: json.RawMessage(`{}`), Version: uint64(time.Now().UnixMicro()), Origin: stranger.m.ID(), Written: time.Now()}
			e, _ = decodeEntry(stranger.signEntry(t, *e))
			return e
		}},
	}
	for _, tt := range entries {
		t.Run(tt.name, func(t *testing.T) {
			before := refusedTotal(ctrl.m, "entry", tt.reason)
			e := tt.e()
			if ctrl.m.mergeEntry(e, true) {
				t.Fatal("merged")
			}
			if got := refusedTotal(ctrl.m, "entry", tt.reason); got != before+1 {
				t.Errorf("refused{reason=%s} went from %v to %v", tt.reason, before, got)
			}
		})
	}
	if _, err := ctrl.m.Get("policies/TrainingJob/pwn"); err == nil {
		t.Error("a forged policy was merged")
	}
}

// TestTombstoneCannotOverflow deletes a key held at the highest version
// (from a store written before versions were bounded): the delete is an
// error, not a tombstone at version 0 that every peer would ignore.
func TestTombstoneCannotOverflow(t *testing.T) {
	m, err := New(Config{Name: "a", Identity: mustIdentity(t), BindAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.mu.Lock()
	m.setEntryLocked(&Entry{Key: "policies/x", Version: math.MaxUint64, Origin: "old"})
	m.mu.Unlock()
	if err := m.Delete("policies/x"); err == nil {
		t.Fatal("deleting a key at the highest version succeeded")
	}
}

func mustIdentity(tb testing.TB) Identity {
	id, err := NewIdentity()
	if err != nil {
		tb.Fatal(err)
	}
	return id
}
