package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// TestTrainingJobWaits: a training job is not placed by an agent that owns
// it only because every controller-capable agent is unreachable, nor while
// a node that may still run it admitted an epoch of it that this agent has
// no record of; a new placement takes an epoch after every answered one.
func TestTrainingJobWaits(t *testing.T) {
	t.Parallel()
	const key = "TrainingJob/train"
	c := New(Config{})
	held := catalog.Placement{Key: key, Epoch: 1, Nodes: []catalog.PlacedNode{{Name: "e1"}}}

	// The controllers are cut off: the edge agents own the job in their
	// stead, and do not place it.
	nodes := []mesh.Node{controllerNode("c1"), node("e1", "edge", mesh.StatusAlive, key, 0), node("e2", "edge", mesh.StatusAlive, key, 0)}
	nodes[0].Status = mesh.StatusFailed
	if owners := meshview.Owners(nodes); !slices.Equal(owners, []string{"e1", "e2"}) {
		t.Fatalf("owners %v, want the live edge agents in the controller's stead", owners)
	}
	if why := c.holdJob(key, catalog.Placement{}, false, nodes, nil); !strings.Contains(why, "(c1)") {
		t.Errorf("placed by a stand-in owner (%q); want it held, naming c1", why)
	}
	// One that left does not count: none is known any more.
	nodes[0].Status = mesh.StatusLeft
	if why := c.holdJob(key, catalog.Placement{}, false, nodes, nil); why != "" {
		t.Errorf("held (%q) though no controller-capable agent is known", why)
	}

	// A controller is back; e2 admitted epoch 2, which this agent never
	// received: the job waits while e2 may run it.
	nodes[0].Status = mesh.StatusAlive
	nodes[2] = node("e2", "edge", mesh.StatusAlive, key, 2)
	for _, st := range []mesh.Status{mesh.StatusAlive, mesh.StatusSuspect, mesh.StatusUnreachable} {
		nodes[2].Status = st
		if why := c.holdJob(key, held, true, nodes, nil); !strings.Contains(why, "e2 admitted epoch 2") {
			t.Errorf("e2 %s: placed (%q) while it may run epoch 2", st, why)
		}
	}
	nodes[2].Status = mesh.StatusFailed
	c.failedSince["e2"] = time.Now()
	if why := c.holdJob(key, held, true, nodes, nil); why == "" {
		t.Error("placed while e2 failed within its job grace")
	}
	c.failedSince["e2"] = time.Now().Add(-JobGrace - time.Second)
	if why := c.holdJob(key, held, true, nodes, nil); why != "" {
		t.Errorf("held (%q) though e2 failed longer ago than its lease", why)
	}
	if e := lastEpoch(nodes, key); e != 2 {
		t.Errorf("last epoch %d, want 2: a new placement must not reuse e2's", e)
	}
	// The record of epoch 2 arrived: nothing waits for it.
	nodes[2].Status = mesh.StatusAlive
	held.Epoch = 2
	if why := c.holdJob(key, held, true, nodes, nil); why != "" {
		t.Errorf("held (%q) by the epoch this agent holds", why)
	}
}

// webController is a catalog holding the service "web" and a controller,
// c1, of a mesh with one edge node, e1, in status.
func webController(t *testing.T, status mesh.Status) (*catalog.Catalog, *Controller) {
	t.Helper()
	cat := catalog.New(catalogtest.NewStore(), nil)
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: webSource, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	return cat, New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{controllerNode("c1"), node("e1", "edge", status, "", 0)}}, Catalog: cat, Compile: meshview.Compile})
}

// TestSettlingPlacesNothing: a controller that has just started or resumed
// from a pause, and knows other nodes, places nothing until its view of
// the mesh is current; then it places.
func TestSettlingPlacesNothing(t *testing.T) {
	t.Parallel()
	cat, c := webController(t, mesh.StatusFailed)
	c.settleUntil = time.Now().Add(time.Hour)
	c.reconcile()
	if _, err := cat.Placements.Get("InferenceService/web"); err == nil {
		t.Fatal("placed while settling")
	}
	c.settleUntil = time.Now()
	c.reconcile()
	if _, err := cat.Placements.Value("InferenceService/web"); err != nil {
		t.Fatalf("not placed once settled: %v", err)
	}
}

// TestDeletedDuringPassIsCleanedUp: a policy deleted while a pass places
// others is still in the policies that pass listed; its placement is
// removed by the next pass, not left for good because the clean-up that
// saw it applied noted the table's version after the delete.
func TestDeletedDuringPassIsCleanedUp(t *testing.T) {
	t.Parallel()
	cat, c := webController(t, mesh.StatusAlive)
	c.settleUntil = time.Now()
	c.reconcile()
	key := "InferenceService/web"
	if _, err := cat.Placements.Value(key); err != nil {
		t.Fatalf("not placed: %v", err)
	}
	ps, at, versioned := c.policiesAt()              // a pass lists the policies...
	if err := cat.Policies.Delete(key); err != nil { // ...one is deleted meanwhile...
		t.Fatal(err)
	}
	c.cleanUp(ps, at, versioned) // ...and its clean-up sees it applied
	if _, err := cat.Placements.Value(key); err != nil {
		t.Fatalf("placement removed by a clean-up whose listing still held its policy: %v", err)
	}
	c.reconcile()
	if _, err := cat.Placements.Value(key); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("placement of a deleted policy still held after the next pass: %v", err)
	}
}

// TestNewOwnerWaits: when the set of owners changes (a controller is
// declared failed), the agent that now owns its policies waits
// ownerSettle before it places them: the other may be a busy host that
// refutes its failure within seconds, and has placed them meanwhile. A
// suspect controller is still an owner.
func TestNewOwnerWaits(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{controllerNode("c1"), controllerNode("c2")}}
	// A policy that c2 owns while both are live.
	name := ""
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("web-%d", i); placement.Owner(policy.KindInferenceService+"/"+n, []string{"c1", "c2"}) == "c2" {
			name = n
		}
	}
	key := policy.KindInferenceService + "/" + name
	src := strings.Replace(webSource, "{name: web}", "{name: "+name+"}", 1)
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: name, Source: src, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile})
	c.reconcile()
	m.nodes[1].Status = mesh.StatusSuspect
	c.reconcile()
	if _, err := cat.Placements.Get(key); err == nil {
		t.Fatal("placed by c1 although its owner c2 is only suspect")
	}
	m.nodes[1].Status = mesh.StatusFailed
	c.reconcile()
	if _, err := cat.Placements.Get(key); err == nil {
		t.Fatal("placed by c1 at once when c2 was declared failed")
	}
	c.serviceOwners.changed = time.Now().Add(-ownerSettle)
	c.reconcile()
	if _, err := cat.Placements.Value(key); err != nil {
		t.Fatalf("not placed by c1 once owners settled: %v", err)
	}
}

// TestJobOwnerGrace: a training job stays its owner's while that
// controller has been failed for less than JobGrace (a busy host declared
// failed for seconds goes on placing its jobs), and a placement is written
// only while its writer owns the job by the view read as it writes: a
// pass that read the owner failed does not write after it came back.
func TestJobOwnerGrace(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{controllerNode("c1"), controllerNode("c2")}}
	name := ""
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("train-%d", i); placement.Owner(policy.KindTrainingJob+"/"+n, []string{"c1", "c2"}) == "c2" {
			name = n
		}
	}
	key := policy.KindTrainingJob + "/" + name
	src := "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: " + name + "}\nspec:\n  resources: {cpu: 10m, memory: 16Mi}\n  launcher: exec\n  command: [sh, -c, 'true']\n"
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindTrainingJob, Name: name, Source: src, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile})
	c.reconcile()
	m.nodes[1].Status = mesh.StatusFailed
	c.reconcile()
	// Settled, but c2 has been failed for less than JobGrace: it still
	// owns its jobs.
	c.serviceOwners.changed = time.Now().Add(-ownerSettle)
	c.trainingOwners.changed = time.Now().Add(-ownerSettle)
	c.reconcile()
	if _, err := cat.Placements.Get(key); err == nil {
		t.Fatal("placed by c1 while its owner c2 has been failed for less than JobGrace")
	}
	// c2 failed for longer than JobGrace: c1 owns the job once settled.
	c.downSince["c2"] = time.Now().Add(-JobGrace)
	c.reconcile()
	if _, err := cat.Placements.Get(key); err == nil {
		t.Fatal("placed by c1 at once when c2's grace ended")
	}
	c.trainingOwners.changed = time.Now().Add(-ownerSettle)
	c.reconcile()
	rec, err := cat.Placements.Value(key)
	if err != nil {
		t.Fatalf("not placed by c1 once c2's grace ended and owners settled: %v", err)
	}
	// A pass read c2 failed; c2 is back before the pass writes.
	m.nodes[1].Status = mesh.StatusAlive
	rec.Epoch++
	c.write(rec)
	if got, _ := cat.Placements.Value(key); got.Epoch != rec.Epoch-1 {
		t.Fatalf("epoch %d written by c1 after its owner c2 came back", got.Epoch)
	}
}

// controllerPair is two controllers, c1 and c2, each with its own store
// and its own view of the mesh: itself, the other (views[i].nodes[1], whose
// status a test flaps) and three workers. A test applies policies to both
// stores and hands each placement to the other store after each round.
type controllerPair struct {
	stores []*catalogtest.Store
	ctls   []*Controller
	views  []*fakeMesh
	// placedBy lists, by policy key, every owner a placement was seen
	// written by (see pass).
	placedBy map[string]map[string]bool
}

// newControllerPair makes a pair whose controllers are ctl(name) and whose
// workers have cpu millicores each.
func newControllerPair(ctl func(name string) mesh.Node, cpu int64) *controllerPair {
	p := &controllerPair{stores: []*catalogtest.Store{catalogtest.NewStore(), catalogtest.NewStore()}, placedBy: map[string]map[string]bool{}}
	workers := []mesh.Node{gpuNode("w1", cpu), gpuNode("w2", cpu), gpuNode("w3", cpu)}
	for i := range workers {
		workers[i].Controller = false
	}
	for i, name := range []string{"c1", "c2"} {
		other := map[string]string{"c1": "c2", "c2": "c1"}[name]
		v := &fakeMesh{nodes: append([]mesh.Node{ctl(name), ctl(other)}, workers...)}
		p.views = append(p.views, v)
		p.ctls = append(p.ctls, New(Config{Mesh: v, Catalog: catalog.New(p.stores[i], nil), Compile: meshview.Compile}))
	}
	return p
}

// apply applies a policy at generation 1 to both stores.
func (p *controllerPair) apply(t *testing.T, kind, name, src string) {
	t.Helper()
	for _, s := range p.stores {
		if _, err := catalog.New(s, nil).Policies.Put(catalog.Policy{Kind: kind, Name: name, Source: src, Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// pass runs controller i's reconcile pass and notes the owner of every
// placement its store holds.
func (p *controllerPair) pass(t *testing.T, i int) {
	t.Helper()
	p.ctls[i].reconcile()
	for _, rec := range placementsIn(t, p.stores[i]) {
		if p.placedBy[rec.Key] == nil {
			p.placedBy[rec.Key] = map[string]bool{}
		}
		p.placedBy[rec.Key][rec.Owner] = true
	}
}

// replicate hands each placement to the other store, where it is missing.
func (p *controllerPair) replicate() {
	for i, s := range p.stores {
		for _, e := range s.List("placements/") {
			if _, ok := p.stores[1-i].Lookup(e.Key); !ok {
				s.Deliver(p.stores[1-i], e.Key)
			}
		}
	}
}

// twice reports each policy placed by both controllers, and counts them.
func (p *controllerPair) twice(t *testing.T) int {
	t.Helper()
	n := 0
	for key, by := range p.placedBy {
		if len(by) > 1 {
			n++
			t.Errorf("%s placed by %d owners", key, len(by))
		}
	}
	return n
}

// placementsIn decodes every placement s holds.
func placementsIn(t *testing.T, s *catalogtest.Store) []catalog.Placement {
	t.Helper()
	var out []catalog.Placement
	for _, e := range s.List("placements/") {
		var rec catalog.Placement
		if err := json.Unmarshal(e.Value, &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// TestFlappingMembersPlaceOnce: two controllers whose views of each other
// flap (each sees the other failed in some passes, as a busy host's
// probes time out) while 300 policies are applied in batches. No policy
// is placed by both: a controller that sees the other fail waits
// ownerSettle before it takes the other's policies, and the flaps are
// shorter than that.
func TestFlappingMembersPlaceOnce(t *testing.T) {
	t.Parallel()
	p := newControllerPair(controllerNode, 64000)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 30 {
		for j := range 10 {
			name := fmt.Sprintf("svc-%d-%d", round, j)
			p.apply(t, policy.KindInferenceService, name, strings.Replace(webSource, "{name: web}", "{name: "+name+"}", 1))
		}
		for i := range p.ctls {
			// In about one pass in three, this controller sees the other
			// failed.
			p.views[i].nodes[1].Status = mesh.StatusAlive
			if rng.IntN(3) == 0 {
				p.views[i].nodes[1].Status = mesh.StatusFailed
			}
			p.pass(t, i)
		}
		p.replicate() // each placement reaches the other controller
	}
	if twice := p.twice(t); len(p.placedBy) != 300 || twice > 0 {
		t.Errorf("%d of 300 policies placed, %d by two owners", len(p.placedBy), twice)
	}
}

// TestFlappingControllersPlaceJobsOnce: two controllers whose views of
// each other flap for longer than ownerSettle (each sees the other failed
// for up to four passes in a row, a pass every 3 s) while 300 training
// jobs are applied in batches. No job is placed by both: a controller
// failed for less than JobGrace keeps its jobs.
func TestFlappingControllersPlaceJobsOnce(t *testing.T) {
	t.Parallel()
	p := newControllerPair(func(name string) mesh.Node { return gpuNode(name, 1000) }, 640000)
	// age moves c's clock-dependent state back by one pass, as if a pass
	// took that long.
	const pass = 3 * time.Second
	age := func(c *Controller) {
		c.serviceOwners.changed = c.serviceOwners.changed.Add(-pass)
		c.trainingOwners.changed = c.trainingOwners.changed.Add(-pass)
		for k, v := range c.downSince {
			c.downSince[k] = v.Add(-pass)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	down := []int{0, 0} // passes left in each controller's flap
	for round := range 30 {
		for j := range 10 {
			name := fmt.Sprintf("job-%d-%d", round, j)
			p.apply(t, policy.KindTrainingJob, name, "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: "+name+"}\nspec:\n  resources: {cpu: 10m, memory: 16Mi}\n  launcher: exec\n  command: [sh, -c, 'true']\n")
		}
		for i := range p.ctls {
			// A flap: the other seen failed for 1 to 4 passes, then alive
			// for at least one.
			switch {
			case down[i] == 0 && rng.IntN(3) == 0:
				down[i] = 1 + rng.IntN(4)
				fallthrough
			case down[i] > 0:
				p.views[i].nodes[1].Status = mesh.StatusFailed
				if down[i]--; down[i] == 0 {
					down[i] = -1
				}
			default:
				p.views[i].nodes[1].Status = mesh.StatusAlive
				down[i] = 0
			}
			p.pass(t, i)
			age(p.ctls[i])
		}
		p.replicate()
	}
	twice := p.twice(t)
	placed := 0
	for _, rec := range placementsIn(t, p.stores[0]) {
		if len(rec.Nodes) > 0 {
			placed++
		}
	}
	if len(p.placedBy) != 300 || placed != 300 || twice > 0 {
		t.Errorf("%d of 300 jobs placed (%d on nodes), %d by two owners", len(p.placedBy), placed, twice)
	}
}

// TestSlowPassIsNoPause: a pass that takes longer than pauseGap (thousands
// of records on a busy host) is not a pause: the controller does not
// settle after it, which would stop it placing anything while its passes
// stay that slow.
func TestSlowPassIsNoPause(t *testing.T) {
	t.Parallel()
	c := New(Config{Mesh: &fakeMesh{nodes: []mesh.Node{gpuNode("a", 1000), gpuNode("b", 1000)}}, Catalog: catalog.New(catalogtest.NewStore(), nil), Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := 0
	c.steps = c.steps[:0]
	c.steps = append(c.steps, struct {
		name string
		run  func()
	}{"slow", func() {
		passes++
		switch passes {
		case 1:
			// The behaviour under test is a pass that takes wall time:
			// this sleep is that pass, not a wait for something.
			time.Sleep(pauseGap + 500*time.Millisecond)
		case 2:
			cancel()
		}
	}})
	start := time.Now()
	c.Run(ctx)
	var m dto.Metric
	if err := c.pauses.Write(&m); err != nil {
		t.Fatal(err)
	}
	// Only the settle of its start (a mesh of two nodes it knew).
	if n := m.GetCounter().GetValue(); n != 0 || c.settleUntil.After(start.Add(settle+time.Second)) {
		t.Errorf("after a pass of %v: %v pauses counted, settling %v after the start; want none, and only the start's %v", pauseGap+500*time.Millisecond, n, c.settleUntil.Sub(start), settle)
	}
}

// TestNoteReplicas: a placement takes what each of its nodes reports of
// the service's replica (the last entry a node lists for the policy),
// says whether that changed, and leaves nodes that report none alone; the
// list it was read with stays as it was.
func TestNoteReplicas(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	a := node("a", "edge", mesh.StatusAlive, "", 0)
	a.Replicas = []mesh.Replica{{Policy: "InferenceService/other", State: mesh.ReplicaFailed, Reason: "not this one"},
		{Policy: key, State: mesh.ReplicaLoading}, {Policy: key, State: mesh.ReplicaServing}}
	b := node("b", "edge", mesh.StatusAlive, "", 0)
	byName := map[string]mesh.Node{"a": a, "b": b}
	rec := catalog.Placement{Key: key, Nodes: []catalog.PlacedNode{{Name: "a"}, {Name: "b", Replica: mesh.ReplicaLoading}, {Name: "gone"}}}
	held := rec.Nodes // as the catalog keeps it: reconcile reads its records shared
	if !noteReplicas(&rec, byName) {
		t.Fatal("no change noted")
	}
	if held[0].Replica != "" {
		t.Errorf("the list read was changed (a's replica %q): it may be the catalog's own", held[0].Replica)
	}
	if got := []string{rec.Nodes[0].Replica, rec.Nodes[1].Replica, rec.Nodes[2].Replica}; !slices.Equal(got, []string{mesh.ReplicaServing, mesh.ReplicaLoading, ""}) {
		t.Errorf("replicas %q, want a serving (its last entry), b and gone as they were", got)
	}
	if noteReplicas(&rec, byName) {
		t.Error("a change noted the second time")
	}
}

// TestPassWritesBounded: a burst of policies is placed over several
// passes of at most maxPassWrites records each, every one placed in the
// end, none twice.
func TestPassWritesBounded(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("big", 1<<20)}}
	c := New(Config{Mesh: m, Catalog: cat, Compile: func(p catalog.Policy) (*placement.Request, error) {
		return &placement.Request{Kind: placement.Inference, Key: p.Key(), Replicas: 1, Resources: placement.Resources{CPU: 1, Memory: 1 << 20}}, nil
	}})
	const n = 3*maxPassWrites + 10
	for i := range n {
		if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: fmt.Sprintf("s-%03d", i), Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	epochs := map[string]uint64{}
	for pass := 1; len(epochs) < n; pass++ {
		if pass > 2*n/maxPassWrites+2 {
			t.Fatalf("%d of %d placed after %d passes", len(epochs), n, pass-1)
		}
		before := len(epochs)
		c.reconcile()
		for key, rec := range c.placements() {
			if e, ok := epochs[key]; ok && e != rec.Epoch {
				t.Errorf("%s placed again in pass %d: epoch %d → %d", key, pass, e, rec.Epoch)
			}
			epochs[key] = rec.Epoch
		}
		if c.passWrites > maxPassWrites {
			t.Errorf("pass %d wrote %d records, over %d", pass, c.passWrites, maxPassWrites)
		}
		if len(epochs) == before {
			t.Fatalf("pass %d placed nothing: %d of %d placed", pass, len(epochs), n)
		}
	}
}

// TestControllerDecodesWhatItOwns: a controller reads, and keeps facts
// of, only the policies it owns: two controllers split 40 services
// between them, and one that sees the other gone (once owners settle)
// takes all 40. What it keeps per policy outlives its ownership.
func TestControllerDecodesWhatItOwns(t *testing.T) {
	t.Parallel()
	p := newControllerPair(controllerNode, 64000)
	for j := range 40 {
		name := fmt.Sprintf("svc-%d", j)
		p.apply(t, policy.KindInferenceService, name, strings.Replace(webSource, "{name: web}", "{name: "+name+"}", 1))
	}
	listed := func(c *Controller) map[string]bool {
		out := map[string]bool{}
		for _, pol := range c.policies() {
			out[pol.Key()] = true
		}
		return out
	}
	seen := map[string]int{}
	for i, c := range p.ctls {
		p.pass(t, i)
		mine := listed(c)
		if len(mine) == 0 || len(mine) == 40 {
			t.Errorf("%s lists %d of 40 policies: want its share", p.views[i].nodes[0].Name, len(mine))
		}
		for key := range mine {
			seen[key]++
			if owner := c.ownerOf(key); owner != p.views[i].nodes[0].Name {
				t.Errorf("%s lists %s, owned by %s", p.views[i].nodes[0].Name, key, owner)
			}
		}
		c.mu.Lock()
		facts := len(c.docs)
		c.mu.Unlock()
		if facts > len(mine) {
			t.Errorf("%s keeps facts of %d policies, owns %d", p.views[i].nodes[0].Name, facts, len(mine))
		}
	}
	if len(seen) != 40 {
		t.Errorf("the two list %d distinct policies, want all 40", len(seen))
	}
	for key, n := range seen {
		if n != 1 {
			t.Errorf("%s listed by %d controllers", key, n)
		}
	}
	c1 := p.ctls[0]
	// What c1 keeps of a policy it does not own (a retry's backoff, from
	// when it did) stays while the policy does: its owner may flap back.
	var other string
	for key := range seen {
		if c1.ownerOf(key) != "c1" {
			other = key
			break
		}
	}
	c1.tries[other] = 3
	c1.ownersSeen++ // lists again
	if c1.policies(); c1.tries[other] != 3 {
		t.Errorf("c1 forgot its retries of %s, which c2 owns", other)
	}
	p.views[0].nodes[1].Status = mesh.StatusFailed
	p.pass(t, 0)
	if n := len(listed(c1)); n != 40 {
		t.Errorf("c1 with c2 failed lists %d policies, want 40", n)
	}
}
