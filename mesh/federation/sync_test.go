package federation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// memCatalog is a global catalog in memory that keeps the newer version of
// each key, as the mesh does.
type memCatalog map[string]mesh.Entry

func (c memCatalog) GlobalEntries() []mesh.Entry {
	var out []mesh.Entry
	for _, k := range slices.Sorted(maps.Keys(c)) {
		out = append(out, c[k])
	}
	return out
}

func (c memCatalog) merge(es []mesh.Entry) {
	for _, e := range es {
		h, ok := c[e.Key]
		if !ok || e.Version > h.Version || e.Version == h.Version && e.Origin > h.Origin {
			c[e.Key] = e
		}
	}
}

func entry(key string, version uint64, origin string) mesh.Entry {
	return mesh.Entry{Key: key, Version: version, Origin: origin, Scope: mesh.ScopeGlobal, Value: []byte(`"` + strings.Repeat("x", 200) + `"`)}
}

// counted counts the bytes written through it.
type counted struct {
	net.Conn
	n *atomic.Int64
}

func (c counted) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return c.Conn.Write(b)
}

// exchange runs one sync between two catalogs over a pipe, the dialer's
// side dial and the other serve, merges what each received, and returns
// the bytes both sent.
func exchange(t testing.TB, dialer, server memCatalog, dial, serve func(io.ReadWriter, catalog) ([]mesh.Entry, error)) int64 {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var n atomic.Int64
	done := make(chan error, 1)
	var served []mesh.Entry
	go func() {
		var err error
		served, err = serve(counted{b, &n}, server)
		done <- err
	}()
	got, err := dial(counted{a, &n}, dialer)
	if err != nil {
		t.Fatalf("dialer: %v", err)
	}
	a.Close()
	if err := <-done; err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("server: %v", err)
	}
	dialer.merge(got)
	server.merge(served)
	return n.Load()
}

// TestSyncDelta: the sync that sends what differs leaves both sides with
// the newer version of every record, as the whole exchange does, and
// sends nothing but the bucket digests when they agree.
func TestSyncDelta(t *testing.T) {
	t.Parallel()
	for _, impl := range []struct {
		name        string
		dial, serve func(io.ReadWriter, catalog) ([]mesh.Entry, error)
	}{{"delta", syncDelta, serveDelta}, {"whole", syncWhole, serveWhole}} {
		a, b := memCatalog{}, memCatalog{}
		for i := range 500 {
			e := entry(fmt.Sprintf("policies/p%03d", i), 10, "n1")
			a[e.Key], b[e.Key] = e, e
		}
		a["policies/p001"] = entry("policies/p001", 11, "n1") // a newer
		b["policies/p002"] = entry("policies/p002", 12, "n2") // b newer
		a["policies/p003"] = entry("policies/p003", 10, "n9") // the same version from another writer
		a["jobs/only-a"] = entry("jobs/only-a", 1, "n1")      // b lacks it
		b["jobs/only-b"] = entry("jobs/only-b", 1, "n2")      // a lacks it
		del := entry("policies/p004", 13, "n2")
		del.Deleted, del.Value = true, nil
		b[del.Key] = del // a tombstone
		exchange(t, a, b, impl.dial, impl.serve)
		if !slices.EqualFunc(a.GlobalEntries(), b.GlobalEntries(), func(x, y mesh.Entry) bool { return versionOfEntry(x) == versionOfEntry(y) && x.Key == y.Key }) {
			t.Errorf("%s: the catalogs differ after a sync", impl.name)
		}
		for k, want := range map[string]versionOf{"policies/p001": {11, "n1"}, "policies/p002": {12, "n2"}, "policies/p003": {10, "n9"}, "policies/p004": {13, "n2"}} {
			if got := versionOfEntry(a[k]); got != want {
				t.Errorf("%s: %s at %v, want %v", impl.name, k, got, want)
			}
		}
		if n := exchange(t, a, b, impl.dial, impl.serve); impl.name == "delta" && n > 4000 {
			t.Errorf("%s: %d bytes to find two equal catalogs equal", impl.name, n)
		}
	}
	// A dialer that sends other than syncBuckets digests is refused.
	a, b := net.Pipe()
	defer a.Close()
	go func() { _ = writeMsg(a, syncMsg{Buckets: []string{"x"}}) }()
	if _, err := serveDelta(b, memCatalog{}); !errors.Is(err, errMalformed) {
		t.Errorf("three digests: %v, want errMalformed", err)
	}
}

// BenchmarkSync: the bytes one sync between two gateways costs when their
// catalogs of 5,000 records (200-byte values) differ in one record:
// impl=strata sends what differs (protoSync2), impl=whole-catalog both
// catalogs (protoSync, as agents did before). Its time per op includes
// building the two catalogs.
func BenchmarkSync(b *testing.B) {
	for _, impl := range []struct {
		name        string
		dial, serve func(io.ReadWriter, catalog) ([]mesh.Entry, error)
	}{{"strata", syncDelta, serveDelta}, {"whole-catalog", syncWhole, serveWhole}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			var total int64
			for b.Loop() {
				x, y := memCatalog{}, memCatalog{}
				for i := range 5000 {
					e := entry(fmt.Sprintf("placements/InferenceService/svc-%04d", i), 10, "n1")
					x[e.Key], y[e.Key] = e, e
				}
				x["placements/InferenceService/svc-0042"] = entry("placements/InferenceService/svc-0042", 11, "n1")
				total += exchange(b, x, y, impl.dial, impl.serve)
			}
			b.ReportMetric(float64(total)/float64(b.N)/1024, "KiB/sync")
		})
	}
}

// TestSyncWithAgentBeforeDelta: a gateway syncs with one of an agent that
// serves only the whole-catalog protocol by that protocol, and the two
// catalogs end equal.
func TestSyncWithAgentBeforeDelta(t *testing.T) {
	t.Parallel()
	newFed := func(name, site string) *Federation {
		id, err := mesh.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		m, err := mesh.New(mesh.Config{Name: name, Identity: id, Transport: (&meshtest.Network{}).NewTransport(name),
			Local: mesh.NodeState{Tier: mesh.TierEdge, Site: site}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(); m.Close() })
		if _, err := m.Put("policies/from-"+site, []byte(`"`+site+`"`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
			t.Fatal(err)
		}
		return &Federation{cfg: Config{Mesh: m, Logger: slog.New(slog.DiscardHandler)}, h: h, metrics: newMetrics(nil)}
	}
	a, old := newFed("a-1", "a"), newFed("b-1", "b")
	old.h.SetStreamHandler(protoSync, old.serveSync) // and not protoSync2
	if err := a.h.Connect(context.Background(), peer.AddrInfo{ID: old.h.ID(), Addrs: old.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	if err := a.sync(context.Background(), old.h.ID()); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 5*time.Second, "each side's record at the other", func() bool {
		_, errA := a.cfg.Mesh.Get("policies/from-b")
		_, errB := old.cfg.Mesh.Get("policies/from-a")
		return errA == nil && errB == nil
	})
}
