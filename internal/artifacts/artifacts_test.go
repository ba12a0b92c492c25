package artifacts

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/storage"
)

// oneNode is the mesh as one agent alone sees it: its own document.
type oneNode struct {
	mu   sync.Mutex
	self mesh.NodeState
}

func (m *oneNode) ID() string         { return m.self.ID }
func (m *oneNode) Name() string       { return m.self.Name }
func (m *oneNode) Nodes() []mesh.Node { return nil }
func (m *oneNode) Local() mesh.NodeState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self.Clone()
}
func (m *oneNode) Update(fn func(*mesh.NodeState)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(&m.self)
	return nil
}
func (m *oneNode) RTT(a, b string) (time.Duration, error) { return 0, mesh.ErrNoCoordinate }

// testMesh is the keys of a mesh: its CA and the one signing key.
type testMesh struct {
	caCert, caKey []byte
	signer        ed25519.PrivateKey
}

func newTestMesh(tb testing.TB) testMesh {
	tb.Helper()
	c, k, err := pki.NewCA("test mesh")
	if err != nil {
		tb.Fatal(err)
	}
	s, err := pki.NewSigningKey()
	if err != nil {
		tb.Fatal(err)
	}
	return testMesh{c, k, s}
}

// agent is one agent's artifact service over its own store, data plane
// and copy of the catalog.
type agent struct {
	svc   *Service
	store *storage.Store
	cat   *catalogtest.Store
	cfg   Config
}

// newAgent starts an agent's service; dir "" is a fresh one (a dir used
// before is a restart).
func newAgent(tb testing.TB, tm testMesh, name, dir string, cat *catalogtest.Store) *agent {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	log := slog.New(slog.DiscardHandler)
	db, err := storage.Open(storage.Options{Dir: filepath.Join(dir, "db")})
	if err != nil {
		tb.Fatal(err)
	}
	store, err := storage.OpenStore(storage.StoreOptions{Dir: filepath.Join(dir, "artifacts"), DB: db,
		Trusted: []ed25519.PublicKey{tm.signer.Public().(ed25519.PublicKey)}, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := pki.IssueNodeCert(tm.caCert, tm.caKey, key, name, []string{"127.0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	dc := dataplane.DefaultConfig()
	dc.ListenAddr, dc.Store, dc.Logger = "127.0.0.1:0", store, log
	if dc.ServerTLS, err = pki.ServerTLSConfig(tm.caCert, cert, key); err != nil {
		tb.Fatal(err)
	}
	if dc.ClientTLS, err = pki.ClientTLSConfig(tm.caCert, cert, key); err != nil {
		tb.Fatal(err)
	}
	node, err := dataplane.New(dc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		node.Close()
		store.Close()
		db.Close()
	})
	cfg := Config{Mesh: &oneNode{self: mesh.NodeState{ID: name, Name: name}}, Catalog: catalog.New(cat, nil),
		Store: store, Node: node, Signing: tm.signer, Logger: log}
	return &agent{svc: New(cfg), store: store, cat: cat, cfg: cfg}
}

// publish publishes data as model irisr@1, signed at created.
func (a *agent) publish(tb testing.TB, data string, created time.Time) (storage.Manifest, error) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "model.onnx")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		tb.Fatal(err)
	}
	return a.svc.Publish(tb.Context(), path, storage.PublishSpec{Kind: storage.KindModel, Name: "irisr", Version: "1", Created: created})
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

const irisrKey = "artifacts/model/irisr/1"

// TestVersionImmutableAcrossAgents: once a version's manifest reached
// another agent's catalog, that agent refuses other bytes under the
// version (a ConflictError naming the digest the mesh has, nothing
// announced or kept), and takes the same bytes again as the manifest
// already published.
func TestVersionImmutableAcrossAgents(t *testing.T) {
	t.Parallel()
	tm := newTestMesh(t)
	a := newAgent(t, tm, "a", "", catalogtest.NewStore())
	c := newAgent(t, tm, "c", "", catalogtest.NewStore())
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	first, err := a.publish(t, "model A", t0)
	if err != nil {
		t.Fatal(err)
	}
	a.cat.Deliver(c.cat, irisrKey)

	_, err = c.publish(t, "model B", t0.Add(time.Minute))
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, storage.ErrExists) || ce.Held.Digest != first.Digest || ce.Digest != digestOf("model B") {
		t.Fatalf("other bytes at c: %v; want a ConflictError holding %.12s", err, first.Digest)
	}
	for _, want := range []string{"model/irisr@1 is already published with other bytes", "sha256:" + first.Digest[:12], "push these bytes under a new version"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, _ := c.cat.Lookup(irisrKey); !strings.Contains(string(got.Value), first.Digest) {
		t.Errorf("c's catalog entry changed: %s", got.Value)
	}
	if _, err := c.store.Manifest(storage.KindModel, "irisr", "1"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("c kept a manifest of the refused bytes: %v", err)
	}

	// The same bytes again, at c and at a: the manifest already published.
	for _, at := range []*agent{c, a} {
		got, err := at.publish(t, "model A", t0.Add(2*time.Minute))
		if err != nil || !sameManifest(got, first) || !got.Created.Equal(first.Created) {
			t.Fatalf("same bytes again: %+v, %v; want the first manifest", got, err)
		}
		if held, err := at.store.Manifest(storage.KindModel, "irisr", "1"); err != nil || !sameManifest(held, first) {
			t.Errorf("held manifest %+v, %v; want the first", held, err)
		}
	}
	if !c.svc.Has(first.Digest) {
		t.Error("c does not hold the bytes it was pushed")
	}
}

// TestFirstSignedWins: two manifests of one version with other bytes
// (published at once on two agents) meet in the catalogs, each written
// over the other. Every reader names the version by the first signed: a
// later one arriving does not switch what is served, the earlier one
// arriving does, and a restart remembers.
func TestFirstSignedWins(t *testing.T) {
	t.Parallel()
	tm := newTestMesh(t)
	dirA := t.TempDir()
	a := newAgent(t, tm, "a", dirA, catalogtest.NewStore())
	b := newAgent(t, tm, "b", "", catalogtest.NewStore())
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	early, err := a.publish(t, "model A", t0)
	if err != nil {
		t.Fatal(err)
	}
	late, err := b.publish(t, "model B", t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(tb testing.TB, at *agent) string {
		tb.Helper()
		m, err := at.svc.Lookup(storage.KindModel, "irisr", "1")
		if err != nil {
			tb.Fatal(err)
		}
		return m.Digest
	}
	// b's later manifest overwrites a's catalog entry: a keeps its own.
	b.cat.Deliver(a.cat, irisrKey)
	if got := lookup(t, a); got != early.Digest {
		t.Errorf("a serves %.12s after the later manifest arrived, want the first signed %.12s", got, early.Digest)
	}
	if _, err := a.svc.ByDigest(late.Digest, storage.KindModel); err == nil {
		t.Error("a lists the later manifest's digest")
	}
	if _, err := a.publish(t, "model B", t0.Add(time.Hour)); !errors.Is(err, storage.ErrExists) {
		t.Errorf("a publishing the later bytes: %v; want ErrExists", err)
	}
	// a's earlier manifest reaches b: b converges on it.
	a2 := catalogtest.NewStore()
	if _, err := catalog.New(a2, nil).Manifests.Put(early); err != nil {
		t.Fatal(err)
	}
	a2.Deliver(b.cat, irisrKey)
	if got := lookup(t, b); got != early.Digest {
		t.Errorf("b serves %.12s after the earlier manifest arrived, want %.12s", got, early.Digest)
	}
	// A manifest with an earlier time that does not verify (unsigned
	// here) never wins.
	forged := late.Clone()
	forged.Created, forged.Signature = t0.Add(-time.Hour), nil
	f := catalogtest.NewStore()
	if _, err := catalog.New(f, nil).Manifests.Put(forged); err != nil {
		t.Fatal(err)
	}
	f.Deliver(b.cat, irisrKey)
	if got := lookup(t, b); got != early.Digest {
		t.Errorf("b serves %.12s after an unsigned earlier manifest arrived, want %.12s", got, early.Digest)
	}
	// a restarts with b's later manifest in its catalog: what it
	// published before still names the version.
	restarted := &agent{svc: New(a.cfg), store: a.store, cat: a.cat}
	if got := lookup(t, restarted); got != early.Digest {
		t.Errorf("a after a restart serves %.12s, want %.12s", got, early.Digest)
	}
}

// TestSignedBefore is the order of two manifests of one version.
func TestSignedBefore(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := func(d string, at time.Time) storage.Manifest { return storage.Manifest{Digest: d, Created: at} }
	for _, c := range []struct {
		name string
		a, b storage.Manifest
		want bool
	}{
		{"earlier", m("bb", t0), m("aa", t0.Add(time.Nanosecond)), true},
		{"later", m("aa", t0.Add(time.Second)), m("bb", t0), false},
		{"same-time-lower-digest", m("aa", t0), m("bb", t0), true},
		{"same-time-higher-digest", m("bb", t0), m("aa", t0), false},
		{"same-time-zone-apart", m("bb", t0.In(time.FixedZone("x", 3600))), m("aa", t0), false},
		{"itself", m("aa", t0), m("aa", t0), false},
	} {
		if got := c.a.SignedBefore(c.b); got != c.want {
			t.Errorf("%s: SignedBefore = %v, want %v", c.name, got, c.want)
		}
	}
}
