package serving

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
)

// localMesh is this node's document and the other nodes', in memory.
type localMesh struct {
	mu     sync.Mutex
	self   mesh.NodeState
	others map[string]mesh.Node
}

func (m *localMesh) Name() string { return m.self.Name }
func (m *localMesh) Local() mesh.NodeState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self.Clone()
}
func (m *localMesh) Node(name string) (mesh.Node, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if name == m.self.Name {
		return mesh.Node{NodeState: m.self.Clone(), Status: mesh.StatusAlive}, nil
	}
	n, ok := m.others[name]
	if !ok {
		return mesh.Node{}, mesh.ErrUnknownNode
	}
	return n, nil
}
func (m *localMesh) Update(fn func(*mesh.NodeState)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(&m.self)
	return nil
}
func (m *localMesh) Changed() <-chan struct{} { return make(chan struct{}) }

// oneModel is an artifact store that holds one model's bytes.
type oneModel struct{ m storage.Manifest }

func (a oneModel) Enabled() bool { return true }
func (a oneModel) Lookup(kind storage.Kind, name, version string) (storage.Manifest, error) {
	return a.m, nil
}
func (a oneModel) ByDigest(string, ...storage.Kind) (storage.Manifest, error) { return a.m, nil }
func (a oneModel) Has(string) bool                                            { return true }
func (a oneModel) Pull(context.Context, storage.Manifest, func(dataplane.TransferStatus)) (dataplane.PullResult, error) {
	return dataplane.PullResult{}, nil
}
func (a oneModel) Bytes(storage.Manifest) ([]byte, error) { return []byte("onnx"), nil }

type loads struct {
	mu       sync.Mutex
	loaded   []string
	standbys []string
	promoted int
	// loadCalls counts Load's calls (a promoted standby makes none).
	loadCalls int
}

func (l *loads) snapshot() (loaded, standbys []string, loadCalls, promoted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.loaded), slices.Clone(l.standbys), l.loadCalls, l.promoted
}

func (l *loads) Load(_ context.Context, name, version string, _ []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loaded = append(l.loaded, name+"@"+version)
	l.loadCalls++
	return nil
}
func (l *loads) Unload(name, version string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loaded = slices.DeleteFunc(l.loaded, func(s string) bool { return s == name+"@"+version })
	return nil
}

// TestReplicaReassignedWhileKept: a model kept serving after its
// assignment moved away (make before break, while the new node still
// loads) and then assigned here again reports its replica serving. It
// reported nothing, and the placement waited on "1 of 2 replicas serving"
// for good (found by the rolling-upgrade test: a node restarted, the
// service was placed around it and back).
func TestReplicaReassignedWhileKept(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/scorer"
	cat := catalog.New(catalogtest.NewStore(), nil)
	if _, err := cat.Policies.Put(catalog.Policy{Kind: "InferenceService", Name: "scorer", Generation: 1,
		Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: scorer}\nspec:\n  model: {name: scorer, version: \"1\"}\n  replicas: 2\n"}); err != nil {
		t.Fatal(err)
	}
	// The other replica's node has not loaded the model yet.
	if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: "InferenceService", Name: "scorer", State: catalog.StatePlaced,
		Nodes: []catalog.PlacedNode{{Name: "a"}, {Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	m := &localMesh{self: mesh.NodeState{Name: "a"}, others: map[string]mesh.Node{"b": {NodeState: mesh.NodeState{Name: "b"}, Status: mesh.StatusAlive}}}
	assign := func(on bool) {
		m.Update(func(s *mesh.NodeState) {
			s.Assignments = nil
			if on {
				s.Assignments = []mesh.Assignment{{Key: key, Accepted: true}}
			}
		})
	}
	inf := &loads{}
	l := NewLoader(LoaderConfig{Mesh: m, Catalog: cat, Inference: inf,
		Artifacts: oneModel{storage.Manifest{Kind: storage.KindModel, Name: "scorer", Version: "1", Digest: "d1"}}})
	ctx := context.Background()
	replica := func() (mesh.Replica, bool) {
		for _, r := range m.Local().Replicas {
			if r.Policy == key {
				return r, true
			}
		}
		return mesh.Replica{}, false
	}
	assign(true)
	// The load runs in a goroutine of its own; reconcile publishes it.
	meshtest.WaitFor(t, 10*time.Second, "the assigned replica serving", func() bool {
		l.reconcile(ctx)
		r, ok := replica()
		return ok && r.State == mesh.ReplicaServing
	})
	assign(false)
	l.reconcile(ctx)
	if r, ok := replica(); ok {
		t.Fatalf("unassigned: replica %+v still reported", r)
	}
	if !slices.Contains(m.Local().Models, "scorer@1") {
		t.Fatalf("unassigned while b loads: models %v, want scorer@1 kept serving", m.Local().Models)
	}
	assign(true)
	l.reconcile(ctx)
	if r, ok := replica(); !ok || r.State != mesh.ReplicaServing {
		t.Fatalf("assigned again: replica %+v (reported %v), want serving", r, ok)
	}
	if len(inf.loaded) != 1 {
		t.Errorf("ONNX Runtime loads: %v, want the one kept", inf.loaded)
	}
}

// panicky is a loader's mesh and artifacts that panic where a forged
// peer document made them panic: the first reading of this node's
// document (a pass of Run), or every pull (ranking holders by a
// coordinate of other dimensions).
type panicky struct {
	*localMesh
	oneModel
	localPanics atomic.Int32 // Local panics while above zero
	pullPanics  bool
}

func (p *panicky) Local() mesh.NodeState {
	if p.localPanics.Add(-1) >= 0 {
		var c *coordinate.Coordinate
		_ = c.DistanceTo(&coordinate.Coordinate{Vec: []float64{1, 2}})
	}
	return p.localMesh.Local()
}

func (p *panicky) Has(string) bool { return !p.pullPanics }

func (p *panicky) Pull(context.Context, storage.Manifest, func(dataplane.TransferStatus)) (dataplane.PullResult, error) {
	_ = coordinate.NewCoordinate(coordinate.DefaultConfig()).DistanceTo(&coordinate.Coordinate{Vec: []float64{1, 2}})
	return dataplane.PullResult{}, nil
}

// TestLoaderSurvivesPanics: a pass of the loader that panics is
// recovered, logged and counted, and the next pass runs; a load that
// panics fails that replica with the reason (retried with backoff) and
// takes nothing else down.
func TestLoaderSurvivesPanics(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/scorer"
	for _, c := range []struct {
		name        string
		localPanics int32
		pullPanics  bool
		state       string // the replica's state at the end
		reason      string // in its reason
	}{
		{name: "pass", localPanics: 1, state: mesh.ReplicaServing},
		{name: "load", pullPanics: true, state: mesh.ReplicaFailed, reason: "serving: recovered panic: coordinate dimensionality does not match"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cat := catalog.New(catalogtest.NewStore(), nil)
			if _, err := cat.Policies.Put(catalog.Policy{Kind: "InferenceService", Name: "scorer", Generation: 1,
				Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: scorer}\nspec:\n  model: {name: scorer, version: \"1\"}\n"}); err != nil {
				t.Fatal(err)
			}
			p := &panicky{localMesh: &localMesh{self: mesh.NodeState{Name: "a", Assignments: []mesh.Assignment{{Key: key, Accepted: true}}}},
				oneModel: oneModel{storage.Manifest{Kind: storage.KindModel, Name: "scorer", Version: "1", Digest: "d1"}}, pullPanics: c.pullPanics}
			p.localPanics.Store(c.localPanics)
			guard := safe.New(safe.Config{Pause: time.Millisecond})
			l := NewLoader(LoaderConfig{Mesh: p, Catalog: cat, Artifacts: p, Inference: &loads{}, Guard: guard})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); l.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			var got mesh.Replica
			meshtest.WaitFor(t, 10*time.Second, "the replica "+c.state, func() bool {
				for _, r := range p.localMesh.Local().Replicas {
					got = r
					return r.State == c.state
				}
				return false
			})
			if !strings.Contains(got.Reason, c.reason) {
				t.Errorf("replica reason %q, want it to say %q", got.Reason, c.reason)
			}
			if n := guard.Recovered("serving"); n != 1 {
				t.Errorf("recovered %d panics, want 1", n)
			}
		})
	}
}
func (l *loads) LoadStandby(_ context.Context, name, version string, _ []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.standbys = append(l.standbys, name+"@"+version)
	return nil
}
func (l *loads) UnloadStandby(name, version string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.standbys = slices.DeleteFunc(l.standbys, func(s string) bool { return s == name+"@"+version })
	return nil
}
func (l *loads) Promote(name, version string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.standbys)
	l.standbys = slices.DeleteFunc(l.standbys, func(s string) bool { return s == name+"@"+version })
	if len(l.standbys) == n {
		return false
	}
	l.loaded = append(l.loaded, name+"@"+version)
	l.promoted++
	return true
}

// TestWarmStandby: the standby of a service with prestage and warm loads
// the model as a standby where its unreserved memory holds it (the
// replicas' memory request), not where it does not; when the replica is
// assigned to it, the standby serves without loading again; a standby no
// longer named is unloaded.
func TestWarmStandby(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/scorer"
	ctx := context.Background()
	setup := func(t *testing.T, free int64, store ...catalog.Store) (*Loader, *loads, *localMesh, *catalog.Catalog) {
		var st catalog.Store = catalogtest.NewStore()
		if len(store) > 0 {
			st = store[0]
		}
		cat := catalog.New(st, nil)
		if _, err := cat.Policies.Put(catalog.Policy{Kind: "InferenceService", Name: "scorer", Generation: 1,
			Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: scorer}\nspec:\n  model: {name: scorer, version: \"1\"}\n  prestage: true\n  warm: true\n  resources: {memory: 1Gi}\n"}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: "InferenceService", Name: "scorer", State: catalog.StatePlaced,
			Nodes: []catalog.PlacedNode{{Name: "b", Standby: "a"}}}); err != nil {
			t.Fatal(err)
		}
		m := &localMesh{self: mesh.NodeState{Name: "a", Load: mesh.Load{FreeMemory: free}},
			others: map[string]mesh.Node{"b": {NodeState: mesh.NodeState{Name: "b", Models: []string{"scorer@1"}}, Status: mesh.StatusAlive}}}
		inf := &loads{}
		l := NewLoader(LoaderConfig{Mesh: m, Catalog: cat, Inference: inf,
			Artifacts: oneModel{storage.Manifest{Kind: storage.KindModel, Name: "scorer", Version: "1", Digest: "d1", Size: 100 << 20}}})
		return l, inf, m, cat
	}
	t.Run("room", func(t *testing.T) {
		t.Parallel()
		l, inf, m, cat := setup(t, 4<<30)
		// The loader records the standby after ONNX Runtime loaded it.
		meshtest.WaitFor(t, 10*time.Second, "the standby loaded", func() bool {
			l.reconcile(ctx)
			_, sb, _, _ := inf.snapshot()
			return slices.Equal(sb, []string{"scorer@1"}) && l.Serves("d1")
		})
		// b failed: the replica moves here.
		if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: "InferenceService", Name: "scorer", State: catalog.StatePlaced,
			Nodes: []catalog.PlacedNode{{Name: "a"}}}); err != nil {
			t.Fatal(err)
		}
		// The placement moved the replica here; the assignment is not
		// admitted yet: the standby waits for it.
		l.reconcile(ctx)
		if _, sb, _, _ := inf.snapshot(); len(sb) != 1 {
			t.Fatalf("standbys %v once the replica was placed here, before its assignment; want the standby kept", sb)
		}
		m.Update(func(s *mesh.NodeState) { s.Assignments = []mesh.Assignment{{Key: key, Accepted: true}} })
		l.reconcile(ctx)
		loaded, sb, calls, promoted := inf.snapshot()
		if promoted != 1 || calls != 0 || !slices.Equal(loaded, []string{"scorer@1"}) || len(sb) != 0 {
			t.Fatalf("after the move: loaded %v, standbys %v, %d loads, %d promoted; want the standby promoted, nothing loaded", loaded, sb, calls, promoted)
		}
		if !slices.Contains(m.Local().Models, "scorer@1") {
			t.Errorf("models published %v, want scorer@1 served", m.Local().Models)
		}
	})
	t.Run("unloaded when no longer the standby", func(t *testing.T) {
		t.Parallel()
		l, inf, _, cat := setup(t, 4<<30)
		meshtest.WaitFor(t, 10*time.Second, "the standby loaded", func() bool {
			l.reconcile(ctx)
			_, sb, _, _ := inf.snapshot()
			return len(sb) == 1 && l.Serves("d1")
		})
		if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: "InferenceService", Name: "scorer", State: catalog.StatePlaced,
			Nodes: []catalog.PlacedNode{{Name: "b", Standby: "c"}}}); err != nil {
			t.Fatal(err)
		}
		l.reconcile(ctx)
		if _, sb, _, _ := inf.snapshot(); len(sb) != 0 || l.Serves("d1") {
			t.Errorf("standbys %v after another node became the standby; want none", sb)
		}
	})
	t.Run("unloaded when its placement is gone, in a store that relists", func(t *testing.T) {
		t.Parallel()
		// A store without a change log: every read of the placements
		// lists them afresh, and names no key gone.
		l, inf, _, cat := setup(t, 4<<30, catalogtest.Relisting{S: catalogtest.NewStore()})
		meshtest.WaitFor(t, 10*time.Second, "the standby loaded", func() bool {
			l.reconcile(ctx)
			_, sb, _, _ := inf.snapshot()
			return len(sb) == 1 && l.Serves("d1")
		})
		if err := cat.Placements.Delete(key); err != nil {
			t.Fatal(err)
		}
		l.reconcile(ctx)
		if _, sb, _, _ := inf.snapshot(); len(sb) != 0 || l.Serves("d1") {
			t.Errorf("standbys %v after the placement was deleted; want none", sb)
		}
	})
	t.Run("no room", func(t *testing.T) {
		t.Parallel()
		l, inf, _, _ := setup(t, 512<<20) // less than the 1 GiB request
		for range 3 {
			l.reconcile(ctx)
		}
		l.mu.Lock()
		warming := l.warming
		l.mu.Unlock()
		if _, sb, _, _ := inf.snapshot(); len(sb) != 0 || warming != "" {
			t.Errorf("standbys %v (loading %q) with 512 MiB unreserved for a 1 GiB request; want none", sb, warming)
		}
	})
}

// TestColdStandbyLoadsWhenItsReplicaIsDown: a standby of a service that
// prestages without warm holds the model unloaded while its replica's
// node is alive; once that node is suspect it loads the model, keeps it
// while the node flaps back to alive, and drops it downHold after the
// node was last seen down.
func TestColdStandbyLoadsWhenItsReplicaIsDown(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/scorer"
	ctx := context.Background()
	cat := catalog.New(catalogtest.NewStore(), nil)
	if _, err := cat.Policies.Put(catalog.Policy{Kind: "InferenceService", Name: "scorer", Generation: 1,
		Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: scorer}\nspec:\n  model: {name: scorer, version: \"1\"}\n  prestage: true\n  resources: {memory: 1Gi}\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: "InferenceService", Name: "scorer", State: catalog.StatePlaced,
		Nodes: []catalog.PlacedNode{{Name: "b", Standby: "a"}}}); err != nil {
		t.Fatal(err)
	}
	m := &localMesh{self: mesh.NodeState{Name: "a", Load: mesh.Load{FreeMemory: 4 << 30}},
		others: map[string]mesh.Node{"b": {NodeState: mesh.NodeState{Name: "b", Models: []string{"scorer@1"}}, Status: mesh.StatusAlive}}}
	inf := &loads{}
	l := NewLoader(LoaderConfig{Mesh: m, Catalog: cat, Inference: inf,
		Artifacts: oneModel{storage.Manifest{Kind: storage.KindModel, Name: "scorer", Version: "1", Digest: "d1", Size: 100 << 20}}})
	status := func(st mesh.Status) {
		m.mu.Lock()
		b := m.others["b"]
		b.Status = st
		m.others["b"] = b
		m.mu.Unlock()
	}
	for range 3 {
		l.reconcile(ctx)
	}
	if _, sb, _, _ := inf.snapshot(); len(sb) != 0 {
		t.Fatalf("standbys %v while the replica's node is alive; want the model held cold", sb)
	}
	status(mesh.StatusSuspect)
	meshtest.WaitFor(t, 10*time.Second, "the standby loaded once b is suspect", func() bool {
		l.reconcile(ctx)
		_, sb, _, _ := inf.snapshot()
		return slices.Equal(sb, []string{"scorer@1"}) && l.Serves("d1")
	})
	status(mesh.StatusAlive)
	l.reconcile(ctx)
	if _, sb, _, _ := inf.snapshot(); len(sb) != 1 {
		t.Fatalf("standbys %v right after b answered again; want it kept for %s", sb, downHold)
	}
	l.mu.Lock()
	l.downSeen["d1"] = time.Now().Add(-downHold)
	l.mu.Unlock()
	l.reconcile(ctx)
	if _, sb, _, _ := inf.snapshot(); len(sb) != 0 || l.Serves("d1") {
		t.Errorf("standbys %v %s after b was last seen down; want it unloaded", sb, downHold)
	}
}

// TestCannotServe: an agent that cannot serve (no ONNX Runtime here)
// reports each inference service assigned to it and accepted as a
// failed replica, saying why, and forgets one no longer assigned.
func TestCannotServe(t *testing.T) {
	t.Parallel()
	m := &localMesh{self: mesh.NodeState{Name: "a"}}
	l := NewLoader(LoaderConfig{Mesh: m, Catalog: catalog.New(catalogtest.NewStore(), nil), InferenceErr: errors.New("libonnxruntime.so: not found")})
	assign := func(as ...mesh.Assignment) {
		m.Update(func(s *mesh.NodeState) { s.Assignments = as })
		l.cannotServe()
	}
	reported := func() []string {
		var out []string
		for _, r := range m.Local().Replicas {
			out = append(out, r.Policy+" "+r.State+": "+r.Reason)
		}
		slices.Sort(out)
		return out
	}
	assign(mesh.Assignment{Key: "InferenceService/a", Accepted: true}, mesh.Assignment{Key: "InferenceService/b"},
		mesh.Assignment{Key: "TrainingJob/c", Accepted: true}, mesh.Assignment{Key: "InferenceService/d", Accepted: true})
	why := "failed: this agent serves no models: ONNX Runtime is not loaded (libonnxruntime.so: not found)"
	if got, want := reported(), []string{"InferenceService/a " + why, "InferenceService/d " + why}; !slices.Equal(got, want) {
		t.Errorf("replicas %q, want %q", got, want)
	}
	assign(mesh.Assignment{Key: "InferenceService/d", Accepted: true})
	if got, want := reported(), []string{"InferenceService/d " + why}; !slices.Equal(got, want) {
		t.Errorf("replicas %q once a is no longer assigned, want %q", got, want)
	}
}
