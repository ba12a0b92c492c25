package mesh_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/mesh/pki"
)

// testCA is a mesh CA for tests.
type testCA struct{ cert, key []byte }

func newTestCA(tb testing.TB) testCA {
	tb.Helper()
	cert, key, err := pki.NewCA("test CA")
	if err != nil {
		tb.Fatal(err)
	}
	return testCA{cert, key}
}

// trust issues id a certificate for name with the given claims and
// returns the mesh Trust that uses it; authorize is the rule set.
func (ca testCA) trust(tb testing.TB, id mesh.Identity, name, site, tier string, controller bool, authorize func(mesh.Reader, mesh.Writer, mesh.Entry) error) *mesh.Trust {
	tb.Helper()
	cert, err := pki.IssueNodeCertClaims(ca.cert, ca.key, id.Public(), name, nil,
		pki.Claims{ID: id.ID(), Site: site, Tier: tier, Controller: controller})
	if err != nil {
		tb.Fatal(err)
	}
	return &mesh.Trust{CA: ca.cert, Cert: cert, Authorize: authorize}
}

// controllersOnly lets only controllers write policies/; anyone else.
func controllersOnly(_ mesh.Reader, w mesh.Writer, e mesh.Entry) error {
	if strings.HasPrefix(e.Key, "policies/") && !w.Controller {
		return errors.New("not a controller")
	}
	return nil
}

type trustNode struct {
	m   *mesh.Mesh
	reg *prometheus.Registry
}

// refusedCount sums strata_gossip_records_refused_total for kind and
// reason.
func (n trustNode) refusedCount(kind, reason string) float64 {
	mfs, _ := n.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "strata_gossip_records_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// startTrustNode starts a node on network; trust nil is a member that
// holds the gossip key (here: reaches the network) but no certificate.
func startTrustNode(tb testing.TB, network *meshtest.Network, name, tier string, id mesh.Identity, trust *mesh.Trust, join string) trustNode {
	tb.Helper()
	reg := prometheus.NewRegistry()
	m, err := mesh.New(mesh.Config{
		Name: name, Identity: id, Transport: network.NewTransport(name), Trust: trust, Registerer: reg,
		Local:               mesh.NodeState{Tier: tier, Site: "s", Controller: tier != mesh.TierEdge, Labels: map[string]string{}},
		Memberlist:          meshtest.FastTimings,
		CatalogSyncInterval: 500 * time.Millisecond,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	if join != "" {
		if err := m.Join(context.Background(), []string{join}); err != nil {
			tb.Fatal(err)
		}
	}
	return trustNode{m: m, reg: reg}
}

func identity(tb testing.TB) mesh.Identity {
	tb.Helper()
	id, err := mesh.NewIdentity()
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// TestSignedGossip runs a controller and an edge node with certificates
// and an insider that holds the gossip key but no certificate: the
// certified nodes see each other and the controller's policy; the
// insider's document and its policy are refused and counted, never
// relayed; the edge node cannot write a policy.
func TestSignedGossip(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	network := &meshtest.Network{}
	cid, eid := identity(t), identity(t)
	ctrl := startTrustNode(t, network, "ctrl", mesh.TierOnprem, cid, ca.trust(t, cid, "ctrl", "s", mesh.TierOnprem, true, controllersOnly), "")
	edge := startTrustNode(t, network, "edge", mesh.TierEdge, eid, ca.trust(t, eid, "edge", "s", mesh.TierEdge, false, controllersOnly), ctrl.m.GossipAddr())
	insider := startTrustNode(t, network, "insider", mesh.TierOnprem, identity(t), nil, ctrl.m.GossipAddr())

	if _, err := ctrl.m.Put("policies/ok", []byte(`{"by":"ctrl"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := edge.m.Put("policies/edge", []byte(`{}`)); !errors.Is(err, mesh.ErrForbidden) {
		t.Errorf("edge writes a policy: err = %v, want ErrForbidden", err)
	}
	if _, err := insider.m.Put("policies/pwn", []byte(`{"launcher":"exec"}`)); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 20*time.Second, "the edge node has the controller's policy and document", func() bool {
		_, err := edge.m.Get("policies/ok")
		n, nerr := edge.m.Node("ctrl")
		return err == nil && nerr == nil && n.Controller
	})
	meshtest.WaitFor(t, 20*time.Second, "both certified nodes refused the insider's document and policy", func() bool {
		for _, n := range []trustNode{ctrl, edge} {
			if n.refusedCount("state", "unsigned") == 0 || n.refusedCount("entry", "unsigned") == 0 {
				return false
			}
		}
		return true
	})
	for _, n := range []trustNode{ctrl, edge} {
		if _, err := n.m.Get("policies/pwn"); err == nil {
			t.Errorf("%s took the insider's policy", n.m.Name())
		}
		if _, err := n.m.Node("insider"); err == nil {
			t.Errorf("%s lists the insider as a node", n.m.Name())
		}
	}
}

// TestTrustNeedsMatchingCertificate refuses to start a node whose
// certificate is another node's, or names another site.
func TestTrustNeedsMatchingCertificate(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	id, other := identity(t), identity(t)
	tests := []struct {
		name  string
		trust *mesh.Trust
		want  string
	}{
		{"another node's certificate", ca.trust(t, other, "a", "s", mesh.TierEdge, false, nil), "not this node's identity"},
		{"another name", ca.trust(t, id, "b", "s", mesh.TierEdge, false, nil), `is for "b"`},
		{"another site", ca.trust(t, id, "a", "elsewhere", mesh.TierEdge, false, nil), "site"},
		{"another CA", &mesh.Trust{CA: newTestCA(t).cert, Cert: ca.trust(t, id, "a", "s", mesh.TierEdge, false, nil).Cert}, "mesh CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mesh.New(mesh.Config{Name: "a", Identity: id, Transport: (&meshtest.Network{}).NewTransport("a"), Trust: tt.trust,
				Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "s"}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: err = %v, want one that says %q", err, tt.want)
			}
		})
	}
}

// TestControllerRoleFollowsCertificate: a node whose configuration says
// controller but whose certificate does not give the role publishes
// itself as no controller.
func TestControllerRoleFollowsCertificate(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	id := identity(t)
	n := startTrustNode(t, &meshtest.Network{}, "a", mesh.TierOnprem, id, ca.trust(t, id, "a", "s", mesh.TierOnprem, false, nil), "")
	if n.m.Local().Controller {
		t.Fatal("a node without the controller role in its certificate publishes itself as a controller")
	}
}

// BenchmarkVerify measures merging a new record as a peer receives it
// (decode, validate and, signed, verify the signature against the
// writer's cached certificate): 64 catalog entries and a node document,
// 20 rounds each iteration, in microseconds a record, signed beside
// unsigned.
func BenchmarkVerify(b *testing.B) {
	ca := newTestCA(b)
	for _, signed := range []bool{false, true} {
		impl := "unsigned"
		if signed {
			impl = "signed"
		}
		b.Run("impl="+impl, func(b *testing.B) {
			network := &meshtest.Network{}
			wid, rid := identity(b), identity(b)
			var wt, rt *mesh.Trust
			if signed {
				wt, rt = ca.trust(b, wid, "w", "s", mesh.TierOnprem, true, nil), ca.trust(b, rid, "r", "s", mesh.TierOnprem, true, nil)
			}
			w := startTrustNode(b, network, "w", mesh.TierOnprem, wid, wt, "")
			r := startTrustNode(b, network, "r", mesh.TierOnprem, rid, rt, "")
			msgs := mesh.BenchRecords(w.m, 64)
			b.ResetTimer()
			start, n := time.Now(), 0
			for range b.N {
				for range 20 {
					for _, msg := range msgs {
						mesh.BenchMerge(r.m, msg)
						n++
					}
				}
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(n), "us/record")
		})
	}
}

// BenchmarkSignedDissemination measures, at 64 agents in one pool
// (in-memory network, LAN timings), how long a node document change and a
// catalog entry take to reach every agent (median of 7 each), with
// records signed and verified and without, side by side in one run
// (make bench prints the ratio).
func BenchmarkSignedDissemination(b *testing.B) {
	const n, repeats = 64, 7
	ca := newTestCA(b)
	for _, signed := range []bool{false, true} {
		impl := "unsigned"
		if signed {
			impl = "signed"
		}
		b.Run(fmt.Sprintf("nodes=%d/impl=%s", n, impl), func(b *testing.B) {
			var trust func(string, mesh.Identity) *mesh.Trust
			if signed {
				trust = func(name string, id mesh.Identity) *mesh.Trust {
					return ca.trust(b, id, name, "s", mesh.TierEdge, true, nil)
				}
			}
			nodes, _ := memClusterTrust(b, &meshtest.Network{}, n, nil, trust)
			var docs, entries []float64
			for r := range repeats {
				src := nodes[(r*7919)%n]
				val := fmt.Sprint(r)
				if err := src.Update(func(s *mesh.NodeState) { s.Labels["bench"] = val }); err != nil {
					b.Fatal(err)
				}
				want, id := src.Local().Version, src.ID()
				docs = append(docs, meshtest.Elapsed(b, 3*time.Minute, "the document to reach every node", func() bool {
					for _, m := range nodes {
						if v, ok := m.NodeVersion(id); !ok || v < want {
							return false
						}
					}
					return true
				}).Seconds())
				e, err := src.Put("bench/"+val, []byte(`{"replicas":2}`))
				if err != nil {
					b.Fatal(err)
				}
				entries = append(entries, meshtest.Elapsed(b, 3*time.Minute, "the entry to reach every node", func() bool {
					for _, m := range nodes {
						if got, ok := m.Lookup(e.Key); !ok || got.Version < e.Version {
							return false
						}
					}
					return true
				}).Seconds())
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(median(docs), "doc-median-s")
			b.ReportMetric(median(entries), "entry-median-s")
		})
	}
}

// TestGossipKeyRotation rotates the gossip key of 7 agents on real
// sockets while one of them writes a record every 100ms: install the new
// key everywhere, use it everywhere, remove the old one everywhere. No
// agent sees another fail, every record reaches every agent, and an agent
// restarted afterwards with the old key in its configuration comes back
// with the new one from its store.
func TestGossipKeyRotation(t *testing.T) {
	t.Parallel()
	old, next := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	var nodes []*node
	for i := range 7 {
		n := start(t, fmt.Sprintf("k%d", i), t.TempDir(), identity(t), old, "", mesh.TierEdge)
		if i > 0 {
			if err := n.m.Join(context.Background(), []string{nodes[0].m.GossipAddr()}); err != nil {
				t.Fatal(err)
			}
		}
		nodes = append(nodes, n)
	}
	allAlive := func() bool {
		for _, n := range nodes {
			if n.m.NumAlive() != len(nodes) {
				return false
			}
		}
		return true
	}
	meshtest.WaitFor(t, 30*time.Second, "7 agents alive", allAlive)

	// Watch for any member seen failed or suspect while keys change.
	stop := make(chan struct{})
	done := make(chan []string)
	go func() {
		var bad []string
		var i int
		for {
			select {
			case <-stop:
				done <- bad
				return
			case <-time.After(100 * time.Millisecond): // pacing the writes
			}
			i++
			if _, err := nodes[0].m.Put(fmt.Sprintf("rotate/%d", i), []byte(`{}`)); err != nil {
				bad = append(bad, err.Error())
			}
			for _, n := range nodes {
				for _, mb := range n.m.Members() {
					if mb.Status == mesh.StatusFailed || mb.Status == mesh.StatusUnreachable {
						bad = append(bad, fmt.Sprintf("%s saw %s %s", n.m.Name(), mb.Name, mb.Status))
					}
				}
			}
		}
	}()
	step := func(what string, op func(*mesh.Mesh) error, want func(mesh.KeyringStatus) bool) {
		t.Helper()
		for _, n := range nodes {
			if err := op(n.m); err != nil {
				t.Fatalf("%s on %s: %v", what, n.m.Name(), err)
			}
		}
		for _, n := range nodes {
			if st, err := n.m.Keyring(); err != nil || !want(st) {
				t.Fatalf("after %s, %s holds %+v (%v)", what, n.m.Name(), st, err)
			}
		}
		key := "after/" + what
		if _, err := nodes[len(nodes)-1].m.Put(key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		meshtest.WaitFor(t, 20*time.Second, "a record written after "+what+" at every agent", func() bool {
			for _, n := range nodes {
				if _, err := n.m.Get(key); err != nil {
					return false
				}
			}
			return allAlive()
		})
	}
	oldFP, nextFP := mesh.KeyFingerprint(old), mesh.KeyFingerprint(next)
	step("install", func(m *mesh.Mesh) error { return m.InstallKey(next) }, func(st mesh.KeyringStatus) bool {
		return st.Primary == oldFP && len(st.Keys) == 2
	})
	step("use", func(m *mesh.Mesh) error { return m.UseKey(next) }, func(st mesh.KeyringStatus) bool { return st.Primary == nextFP })
	step("remove", func(m *mesh.Mesh) error { return m.RemoveKey(old) }, func(st mesh.KeyringStatus) bool {
		return st.Primary == nextFP && len(st.Keys) == 1
	})
	close(stop)
	if bad := <-done; len(bad) > 0 {
		t.Errorf("during the rotation: %d problems, first %q", len(bad), bad[0])
	}
	// Removing the key in use is refused.
	if err := nodes[0].m.RemoveKey(next); err == nil {
		t.Error("removing the key in use succeeded")
	}

	// A restart with the old key configured comes back with the new one.
	last := nodes[len(nodes)-1]
	dir, id := last.dir, last.id
	last.kill()
	back := start(t, "k6", dir, id, old, "", mesh.TierEdge)
	if st, err := back.m.Keyring(); err != nil || st.Primary != nextFP || len(st.Keys) != 1 {
		t.Fatalf("after a restart: %+v (%v), want only %s", st, err, nextFP)
	}
	if err := back.m.Join(context.Background(), []string{nodes[0].m.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	nodes[len(nodes)-1] = back
	meshtest.WaitFor(t, 30*time.Second, "the restarted agent alive everywhere", allAlive)
}

// TestSetCert renews a node's certificate with no restart: the new one is
// taken and carried by the node's next document; one for another key,
// name or site is refused.
func TestSetCert(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	network := &meshtest.Network{}
	aid, bid := identity(t), identity(t)
	a := startTrustNode(t, network, "a", mesh.TierEdge, aid, ca.trust(t, aid, "a", "s", mesh.TierEdge, false, nil), "")
	b := startTrustNode(t, network, "b", mesh.TierEdge, bid, ca.trust(t, bid, "b", "s", mesh.TierEdge, false, nil), a.m.GossipAddr())
	meshtest.WaitFor(t, 20*time.Second, "b knows a", func() bool { _, err := b.m.Node("a"); return err == nil })
	first, v := mesh.CertDER(a.m), a.m.Local().Version
	for _, tt := range []struct {
		name string
		cert []byte
	}{
		{"another node's", ca.trust(t, bid, "a", "s", mesh.TierEdge, false, nil).Cert},
		{"another name", ca.trust(t, aid, "x", "s", mesh.TierEdge, false, nil).Cert},
		{"another site", ca.trust(t, aid, "a", "elsewhere", mesh.TierEdge, false, nil).Cert},
		{"another CA's", newTestCA(t).trust(t, aid, "a", "s", mesh.TierEdge, false, nil).Cert},
	} {
		if err := a.m.SetCert(tt.cert); err == nil {
			t.Errorf("SetCert took %s certificate", tt.name)
		}
	}
	if err := a.m.SetCert(ca.trust(t, aid, "a", "s", mesh.TierEdge, false, nil).Cert); err != nil {
		t.Fatal(err)
	}
	renewed := mesh.CertDER(a.m)
	if bytes.Equal(renewed, first) || a.m.Local().Version <= v {
		t.Fatalf("after SetCert: certificate changed %v, document version %d (was %d)", !bytes.Equal(renewed, first), a.m.Local().Version, v)
	}
	meshtest.WaitFor(t, 20*time.Second, "b holds a's new certificate", func() bool {
		return bytes.Equal(mesh.PeerCertDER(b.m, aid.ID()), renewed)
	})
}
