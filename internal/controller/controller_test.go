package controller

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
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

// controllerNode is an alive controller-capable node of site cloud.
func controllerNode(name string) mesh.Node {
	n := node(name, "cloud", mesh.StatusAlive, "", 0)
	n.Controller = true
	return n
}

// webSource is a one-replica service named web.
const webSource = "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: web}\nspec:\n  model: {name: m, version: \"1\"}\n  replicas: 1\n  resources: {cpu: 10m, memory: 16Mi}\n"

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
	keep, _ := kept(p, nil, rec, true, nodes, cut, nil)
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
	keep, _ = kept(p, nil, rec, true, nodes, cut, nil)
	if got := names(keep); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("kept %v, want a1", got)
	}
	// The fresh decision moved edge-a's replica to c1 and put edge-b's on
	// b2: a1 stays, b2 is added, c1 is not taken.
	fresh := []catalog.PlacedNode{{Name: "c1", Client: "edge-a"}, {Name: "b2", Client: "edge-b"}}
	if got := names(mergeKept(keep, fresh, 2)); !slices.Equal(got, []string{"a1", "b2"}) {
		t.Errorf("merged %v, want a1 b2", got)
	}
	// Two replicas for edge-a, the kept one second in the decision: it
	// counts for itself, and the other is added, not the kept one twice.
	fresh = []catalog.PlacedNode{{Name: "a2", Client: "edge-a"}, {Name: "a1", Client: "edge-a"}}
	if got := names(mergeKept(keep, fresh, 2)); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("merged %v, want a1 a2", got)
	}
	// Without clients: count-based.
	if got := names(mergeKept([]catalog.PlacedNode{{Name: "a1"}}, []catalog.PlacedNode{{Name: "c1"}, {Name: "a1"}, {Name: "b2"}}, 2)); !slices.Equal(got, []string{"a1", "c1"}) {
		t.Errorf("merged %v, want a1 c1", got)
	}
	// A new generation keeps nothing.
	p.Generation++
	if keep, _ := kept(p, nil, rec, true, nodes, cut, nil); len(keep) != 0 {
		t.Errorf("kept %v across a policy change", names(keep))
	}
}

// TestCutSiteReplicaForOthersMoves: a replica whose node's whole site has
// answered nothing for SiteLostAfter, placed for clients elsewhere (or
// for none named), is placed again where they are served: from outside,
// a site cut off and a site whose every node died look the same, and
// neither serves those clients. It is kept only where nothing outside
// takes its place. Before that, and for the site's own clients, it stays.
func TestCutSiteReplicaForOthersMoves(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	// b1 is edge-b's only node: the mesh reports it unreachable.
	nodes := []mesh.Node{node("a1", "edge-a", mesh.StatusAlive, key, 0), node("b1", "edge-b", mesh.StatusUnreachable, key, 7)}
	nodes[1].Region = "north"
	byName := map[string]mesh.Node{"a1": nodes[0], "b1": nodes[1]}
	cut := mesh.UnreachableSites(nodes)
	rec := catalog.Placement{Key: key, Kind: policy.KindInferenceService, Name: "web", Generation: 1, Epoch: 7, Wanted: 1, State: catalog.StatePlaced,
		Nodes: []catalog.PlacedNode{{Name: "b1", Site: "edge-b"}}}
	for _, tc := range []struct {
		spec  string
		moves bool
	}{
		{"", true}, // no clients named
		{"  latency: {p99: 50ms, clients: [edge-a]}\n", true},
		{"  latency: {p99: 50ms, clients: [edge-a, edge-b]}\n", false},
		{"  latency: {p99: 50ms, clients: [north]}\n", false}, // edge-b's region
	} {
		p := catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Generation: 1,
			Source: "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: web}\nspec:\n  model: {name: m, version: \"1\"}\n" + tc.spec}
		c := New(Config{SiteLostAfter: time.Minute})
		// Unreachable for less than SiteLostAfter: it stays, whatever
		// its clients.
		start := time.Now()
		c.noteCut(cut, start)
		if need, why := c.needsPlacement(p, rec, true, byName, cut); need {
			t.Errorf("clients %q: placed again (%s) as soon as edge-b stopped answering", tc.spec, why)
		}
		c.noteCut(cut, start.Add(time.Minute))
		need, why := c.needsPlacement(p, rec, true, byName, cut)
		firm, spare := kept(p, c.facts(p).clients, rec, true, nodes, cut, c.lost)
		if need != tc.moves || (len(firm) == 0) != tc.moves || (len(spare) == 1) != tc.moves {
			t.Errorf("clients %q: placed again %v (%s), kept %v, spare %v; want placed again %v", tc.spec, need, why, names(firm), names(spare), tc.moves)
		}
		// A job stays: it may still be running there.
		job := catalog.Policy{Kind: policy.KindTrainingJob, Name: "web", Generation: 1}
		jrec := rec
		jrec.Kind = policy.KindTrainingJob
		if need, why := c.needsPlacement(job, jrec, true, byName, cut); need {
			t.Errorf("a training job on a lost site's node is placed again: %s", why)
		}
	}
}

func names(ns []catalog.PlacedNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

// fakeArtifacts holds model manifests by name and version.
type fakeArtifacts map[string]storage.Manifest

func (f fakeArtifacts) Lookup(_ storage.Kind, name, version string) (storage.Manifest, error) {
	m, ok := f[name+"@"+version]
	if !ok {
		return storage.Manifest{}, mesh.ErrNotFound
	}
	return m, nil
}
func (f fakeArtifacts) ByDigest(string, ...storage.Kind) (storage.Manifest, error) {
	return storage.Manifest{}, mesh.ErrNotFound
}
func (f fakeArtifacts) NextVersion(string, string) string { return "" }

// fakeMesh is a fixed set of nodes seen from the first one.
type fakeMesh struct{ nodes []mesh.Node }

func (f *fakeMesh) Name() string                       { return f.nodes[0].Name }
func (f *fakeMesh) Nodes() []mesh.Node                 { return f.nodes }
func (f *fakeMesh) Local() mesh.NodeState              { return f.nodes[0].NodeState }
func (f *fakeMesh) Update(func(*mesh.NodeState)) error { return nil }
func (f *fakeMesh) Changed() <-chan struct{}           { return nil }

// gpuNode is an alive on-prem node with one free GPU per model given.
func gpuNode(name string, cpu int64, models ...string) mesh.Node {
	n := mesh.Node{NodeState: mesh.NodeState{Name: name, ID: "id-" + name, Tier: "onprem", Site: "dc", Region: "dc", Controller: true}, Status: mesh.StatusAlive}
	n.Capabilities.CPU.Millicores, n.Load.FreeCPU = cpu, cpu
	n.Capabilities.Memory.Total, n.Load.FreeMemory = 64<<30, 64<<30
	for i, m := range models {
		n.Capabilities.GPUs = append(n.Capabilities.GPUs, mesh.GPU{Index: i, Model: m, Memory: 80 << 30, Healthy: true})
	}
	return n
}

// TestOneRoundReserves applies two one-GPU services at once to a mesh
// where one node is the better place for both: the pass that places them
// counts the first one's GPU as taken, so the second goes elsewhere
// instead of being refused at admission and placed again.
func TestOneRoundReserves(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("big", 64000, "A100"), gpuNode("small", 8000, "A100")}}
	m.nodes[1].Controller = false // big owns both policies
	c := New(Config{Mesh: m, Catalog: cat, Compile: func(p catalog.Policy) (*placement.Request, error) {
		return &placement.Request{Kind: placement.Inference, Key: p.Key(), Replicas: 1,
			Resources: placement.Resources{CPU: 1000, Memory: 1 << 30, GPUs: 1}}, nil
	}})
	for _, name := range []string{"one", "two"} {
		if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: name, Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	c.reconcile()
	recs := c.placements()
	var got []string
	for _, name := range []string{"one", "two"} {
		rec := recs["InferenceService/"+name]
		if rec.State != catalog.StatePending || len(rec.Nodes) != 1 {
			t.Fatalf("%s: %s %q %v, want pending on one node", name, rec.State, rec.Message, rec.NodeNames())
		}
		got = append(got, rec.Nodes[0].Name)
	}
	if got[0] == got[1] {
		t.Fatalf("both services placed on %s's one GPU in one pass", got[0])
	}
	if st := c.SnapshotStats(); st.Builds != 1 {
		t.Errorf("snapshot stats %+v: want the mesh indexed once for the pass", st)
	}
}

// TestRemoteClientSites: in a federated mesh a policy may name the clients
// of another site, which this site sees only through federation: they
// are that site's estimated RTT further away, so a service within its
// bound of them is placed here, and one beyond it is offered to HandOff.
func TestRemoteClientSites(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("dc-1", 8000), gpuNode("dc-2", 8000)}}
	for i := range m.nodes {
		m.nodes[i].Coord = &coordinate.Coordinate{Vec: []float64{float64(i) / 1e3, 0}}
	}
	m.nodes[1].Controller = false // dc-1 owns every policy
	rtt := 20.0
	var offered []string
	c := New(Config{Mesh: m, Catalog: cat, Federated: true,
		RemoteSites: func() []mesh.Site {
			return []mesh.Site{{Name: "edge-b", RTTMillis: &rtt}, {Name: "edge-c"}, {Name: "edge-d", Status: mesh.SiteUnreachable}}
		},
		HandOff: func(p catalog.Policy, req *placement.Request) (string, string) {
			offered = append(offered, p.Name)
			return "", ""
		},
		Compile: func(p catalog.Policy) (*placement.Request, error) {
			p99 := map[string]time.Duration{"near": 30 * time.Millisecond, "far": 10 * time.Millisecond, "unknown": time.Second}[p.Name]
			client := map[string]string{"unknown": "edge-c", "cut": "edge-d", "held": "edge-d"}[p.Name]
			return &placement.Request{Kind: placement.Inference, Key: p.Key(), Replicas: 1, Resources: placement.Resources{CPU: 100},
				Latency: placement.Latency{P99: p99, Clients: []string{cmp.Or(client, "edge-b")}}}, nil
		}})
	for _, name := range []string{"near", "far", "unknown", "cut"} {
		if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: name, Generation: 1, Site: "dc"}); err != nil {
			t.Fatal(err)
		}
	}
	c.reconcile()
	recs := c.placements()
	if r := recs["InferenceService/cut"]; r.State != catalog.StatePending || len(r.Nodes) != 0 || !strings.Contains(r.Message, "unreachable") || slices.Contains(offered, "cut") {
		t.Errorf("cut: %s %q on %v, offered to HandOff: %v; want pending, nowhere: its client site edge-d is cut off", r.State, r.Message, r.NodeNames(), offered)
	}
	// It is tried again, as anything placed in part is.
	c.lastTry["InferenceService/cut"] = time.Now().Add(-time.Hour)
	if need, why := c.needsPlacement(catalog.Policy{Kind: policy.KindInferenceService, Name: "cut", Generation: 1}, recs["InferenceService/cut"], true, nil, nil); !need {
		t.Error("cut: not tried again while it waits for its client site")
	} else {
		t.Logf("cut: placed again: %s", why)
	}
	// One placed before the cut stays as it is: its owner does not
	// rewrite a placement for clients it cannot see.
	held := catalog.Policy{Kind: policy.KindInferenceService, Name: "held", Generation: 1, Site: "dc"}
	old := catalog.Placement{Key: held.Key(), Kind: held.Kind, Name: "held", Generation: 1, Epoch: 4, Wanted: 1, State: catalog.StatePlaced,
		Nodes: []catalog.PlacedNode{{Name: "dc-2", Site: "dc"}}}
	c.place(held, old, true, &round{c: c, nodes: m.nodes, byName: map[string]mesh.Node{}}, nil, "test")
	if r, ok := c.placements()[held.Key()]; ok {
		t.Errorf("held: rewritten as %s e%d %v %q while its client site is cut off", r.State, r.Epoch, r.NodeNames(), r.Message)
	}
	if r := recs["InferenceService/near"]; r.State != catalog.StatePending || len(r.Nodes) != 1 {
		t.Errorf("near: %s %q, want placed here within 30ms of edge-b (20ms away)", r.State, r.Message)
	}
	if r := recs["InferenceService/far"]; r.State != catalog.StateFailed || !slices.Equal(offered, []string{"far"}) {
		t.Errorf("far: %s %q, offered to HandOff: %v; want failed here and offered", r.State, r.Message, offered)
	}
	if r := recs["InferenceService/unknown"]; r.State != catalog.StateFailed || !strings.Contains(r.Message, "unknown client") {
		t.Errorf("unknown: %s %q; want failed: edge-c has no RTT estimate", r.State, r.Message)
	}
}

// TestPlacementBeforeItsPolicyStays: a placement that reaches the owner
// before the policy it placed (a sync after a cut) is not taken for the
// placement of a deleted policy; once the policy is deleted, it is.
func TestPlacementBeforeItsPolicyStays(t *testing.T) {
	t.Parallel()
	writer, here := catalogtest.NewStore(), catalogtest.NewStore()
	wcat, cat := catalog.New(writer, nil), catalog.New(here, nil)
	pol, err := wcat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: webSource, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	const key = "InferenceService/web"
	if _, err := wcat.Placements.Put(catalog.Placement{Key: key, Kind: policy.KindInferenceService, Name: "web", Epoch: 1, Generation: 1, State: catalog.StatePlaced,
		Nodes: []catalog.PlacedNode{{Name: "e1"}}}, pol.Ref()); err != nil {
		t.Fatal(err)
	}
	writer.Deliver(here, "placements/"+key)
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("c1"), node("e1", "edge", mesh.StatusAlive, key, 1)}}, Catalog: cat, Compile: meshview.Compile})
	c.reconcile()
	if cat.Placements.Deleted(key) {
		t.Fatal("the placement was deleted before its policy arrived")
	}
	writer.Deliver(here, "policies/"+key)
	if err := cat.Policies.Delete(key); err != nil {
		t.Fatal(err)
	}
	c.reconcile()
	if !cat.Placements.Deleted(key) {
		t.Fatal("the placement of a deleted policy is still held")
	}
}

// TestNewEpochAfterTheLastRun: a training job placed anew (its placement
// deleted, or never received) takes an epoch after its last run's, so the
// failure recorded by that run does not end the new placement.
func TestNewEpochAfterTheLastRun(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	const src = "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: train}\nspec:\n  resources: {cpu: 10m, memory: 16Mi}\n  launcher: exec\n  command: [sh, -c, 'true']\n"
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindTrainingJob, Name: "train", Source: src, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Jobs.Put(catalog.Job{Name: "train", Key: "TrainingJob/train", Generation: 1, Epoch: 4, State: catalog.JobFailed, Error: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{gpuNode("c1", 8000)}}, Catalog: cat, Compile: meshview.Compile})
	c.reconcile()
	rec, err := cat.Placements.Value("TrainingJob/train")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Epoch != 5 {
		t.Errorf("placed at epoch %d (%s), want 5: after the last run's", rec.Epoch, rec.Message)
	}
}

// TestPartlyPlacedIsStable: a service that only one node can take, of the
// two replicas it asks for, is placed in part and stays so: retries that
// come to the same node write no new epoch (its node would admit the same
// work again, and the service would flip between pending and placed),
// they back off, and it says why the second replica is missing. A node
// that can take it, when it joins, is used at the next retry.
func TestPartlyPlacedIsStable(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: webSource, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("big", 64000, "A100"), gpuNode("small", 8000)}}
	c := New(Config{Mesh: m, Catalog: cat, Compile: func(p catalog.Policy) (*placement.Request, error) {
		return &placement.Request{Kind: placement.Inference, Key: p.Key(), Replicas: 2,
			Resources: placement.Resources{CPU: 1000, Memory: 1 << 30, GPUs: 1}}, nil
	}})
	c.reconcile()
	rec, err := cat.Placements.Value(key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.NodeNames() != "big" || rec.Epoch != 1 {
		t.Fatalf("placed on %q at epoch %d (%s), want big at 1", rec.NodeNames(), rec.Epoch, rec.Message)
	}
	m.nodes[0].Assignments = []mesh.Assignment{{Key: key, Epoch: 1, Accepted: true}}
	var delays []time.Duration
	for range 6 {
		c.lastTry[key] = time.Now().Add(-time.Hour) // the retry is due
		c.reconcile()
		rec, _ = cat.Placements.Value(key)
		if rec.Epoch != 1 || rec.State != catalog.StatePlaced || rec.NodeNames() != "big" {
			t.Fatalf("retry: epoch %d, %s on %q (%s); want epoch 1, placed on big", rec.Epoch, rec.State, rec.NodeNames(), rec.Message)
		}
		delays = append(delays, retryDelay(c.tries[key]))
	}
	if !strings.HasPrefix(rec.Message, "placed 1 of 2: ") || !strings.Contains(rec.Message, string(placement.ReasonNoGPU)) {
		t.Errorf("message %q; want it to say 1 of 2 and why", rec.Message)
	}
	if !slices.IsSorted(delays) || delays[len(delays)-1] != retryMax || delays[0] <= retryEvery {
		t.Errorf("retry delays %v; want them to grow to %v", delays, retryMax)
	}

	// A node that can take the second replica joins: the next retry
	// places it there and keeps big's.
	m.nodes = append(m.nodes, gpuNode("fresh", 8000, "A100"))
	m.nodes[2].Controller = false // big stays the owner
	c.lastTry[key] = time.Now().Add(-retryEvery - time.Second)
	c.reconcile()
	rec, _ = cat.Placements.Value(key)
	if rec.Epoch != 2 || !sameNodes(rec.Nodes, []catalog.PlacedNode{{Name: "big"}, {Name: "fresh"}}) {
		t.Errorf("after a join: epoch %d on %q (%s); want epoch 2 on big and fresh", rec.Epoch, rec.NodeNames(), rec.Message)
	}
}

// TestOlderRecordKeepsServing: a node that admitted a placement's epoch 5
// and then receives epoch 4 of it (a lagging owner's record) goes on with
// epoch 5; it neither drops the replica nor refuses epoch 4 as stale,
// which would keep the policy off the one node that serves it.
func TestOlderRecordKeepsServing(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("e1", 8000)}}
	c := New(Config{Mesh: m, Catalog: cat})
	put := func(epoch uint64) {
		t.Helper()
		if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: policy.KindInferenceService, Name: "web", Epoch: epoch, Generation: 1,
			State: catalog.StatePending, Nodes: []catalog.PlacedNode{{Name: "e1"}}, Resources: catalog.Resources{CPU: 100}}); err != nil {
			t.Fatal(err)
		}
	}
	put(5)
	c.admit()
	put(4)
	c.admit()
	if as := c.held[key]; as.Epoch != 5 || !as.Accepted {
		t.Errorf("holds epoch %d accepted=%v (%s); want epoch 5 still admitted", as.Epoch, as.Accepted, as.Reason)
	}
	// A replica that serves a newer epoch than the owner's record is kept
	// when the owner places the service again.
	m.nodes[0].Assignments = []mesh.Assignment{{Key: key, Epoch: 5, Accepted: true}}
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Generation: 1}
	old := catalog.Placement{Key: key, Generation: 1, Epoch: 4, Nodes: []catalog.PlacedNode{{Name: "e1"}}}
	if got, _ := kept(p, nil, old, true, m.nodes, nil, nil); !slices.Equal(names(got), []string{"e1"}) {
		t.Errorf("kept %v, want e1, which serves a newer epoch", got)
	}
}

// TestSiteBeingCutKeepsItsReplicas: a site cut off stops answering as a
// whole, but its nodes are declared failed one at a time. While one is
// failed and the others are only suspect, the failed node's replica
// stays; when another node of the site answers, it was a node failure
// and the replica moves.
func TestSiteBeingCutKeepsItsReplicas(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Generation: 1}
	rec := catalog.Placement{Key: key, Kind: p.Kind, Name: "web", Generation: 1, Epoch: 3, Wanted: 1, State: catalog.StatePlaced,
		Nodes: []catalog.PlacedNode{{Name: "b1", Site: "edge-b", Client: "edge-b"}}}
	c := New(Config{})
	nodes := []mesh.Node{node("a1", "edge-a", mesh.StatusAlive, key, 0), node("b1", "edge-b", mesh.StatusFailed, key, 3), node("b2", "edge-b", mesh.StatusSuspect, key, 0)}
	byName := map[string]mesh.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	cut := cutOrCutting(nodes)
	if need, why := c.needsPlacement(p, rec, true, byName, cut); need {
		t.Errorf("placed again (%s) while edge-b is being cut", why)
	}
	if got, _ := kept(p, nil, rec, true, nodes, cut, nil); !slices.Equal(names(got), []string{"b1"}) {
		t.Errorf("kept %v, want b1", names(got))
	}
	byName["b2"] = node("b2", "edge-b", mesh.StatusAlive, key, 0)
	nodes[2] = byName["b2"]
	if need, _ := c.needsPlacement(p, rec, true, byName, cutOrCutting(nodes)); !need {
		t.Error("not placed again though b1 failed and b2 answers")
	}
}

// TestReplicaStatesTravel: the owner of a placed service records in its
// placement what each node reports of its replica, once per change, so an
// agent of another site (which sees none of the nodes) can tell whether
// the service serves.
func TestReplicaStatesTravel(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	pol, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: webSource, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMesh{nodes: []mesh.Node{controllerNode("c1"), node("e1", "edge", mesh.StatusAlive, key, 2)}}
	if _, err := cat.Placements.Put(catalog.Placement{Key: key, Kind: policy.KindInferenceService, Name: "web", Owner: "c1", Epoch: 2, Generation: 1, Wanted: 1,
		State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "e1", Site: "edge"}}}, pol.Ref()); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile})
	version := func() uint64 {
		r, err := cat.Placements.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		return r.Version
	}
	for _, st := range []string{mesh.ReplicaLoading, mesh.ReplicaServing} {
		m.nodes[1].Replicas = []mesh.Replica{{Policy: key, Model: "m@1", State: st}}
		c.reconcile()
		rec, _ := cat.Placements.Value(key)
		if rec.Nodes[0].Replica != st || rec.Epoch != 2 {
			t.Fatalf("replica %q at epoch %d; want %q at epoch 2", rec.Nodes[0].Replica, rec.Epoch, st)
		}
	}
	before := version()
	c.reconcile()
	if version() != before {
		t.Error("written again though no replica changed")
	}
}

// placements returns every placement record c's catalog holds, by key.
func (c *Controller) placements() map[string]catalog.Placement {
	out, _ := c.cfg.Catalog.Placements.Map()
	return out
}

// TestAdmitFollowsARelisting: admission over listings afresh releases
// what a listing no longer names here: a placement deleted, and one
// placed elsewhere.
func TestAdmitFollowsARelisting(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.Relisting{S: catalogtest.NewStore()}, nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("e1", 8000), gpuNode("e2", 8000)}}
	c := New(Config{Mesh: m, Catalog: cat})
	put := func(name, node string) {
		t.Helper()
		if _, err := cat.Placements.Put(catalog.Placement{Key: "InferenceService/" + name, Kind: policy.KindInferenceService, Name: name, Epoch: 1, Generation: 1,
			State: catalog.StatePending, Nodes: []catalog.PlacedNode{{Name: node}}, Resources: catalog.Resources{CPU: 100}}); err != nil {
			t.Fatal(err)
		}
	}
	held := func() []string { return slices.Sorted(maps.Keys(c.held)) }
	put("a", "e1")
	put("b", "e1")
	put("c", "e2")
	c.admit()
	if got := held(); !slices.Equal(got, []string{"InferenceService/a", "InferenceService/b"}) {
		t.Fatalf("holds %v, want a and b", got)
	}
	if err := cat.Placements.Delete("InferenceService/b"); err != nil {
		t.Fatal(err)
	}
	put("a", "e2") // a moves away
	c.admit()
	if got := held(); len(got) != 0 {
		t.Errorf("holds %v once b is deleted and a placed on e2, want nothing", got)
	}
}
