package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer"
)

type fakeMesh struct {
	local mesh.NodeState
	nodes []mesh.Node
}

func (f fakeMesh) Local() mesh.NodeState    { return f.local }
func (f fakeMesh) Nodes() []mesh.Node       { return f.nodes }
func (f fakeMesh) Changed() <-chan struct{} { return make(chan struct{}) }

// noArtifacts holds nothing: every lookup misses.
type noArtifacts struct{}

func (noArtifacts) Lookup(kind storage.Kind, name, version string) (storage.Manifest, error) {
	return storage.Manifest{}, fmt.Errorf("%w: no %s %s", mesh.ErrNotFound, kind, name)
}
func (noArtifacts) ByDigest(string, ...storage.Kind) (storage.Manifest, error) {
	return storage.Manifest{}, mesh.ErrNotFound
}
func (noArtifacts) Has(string) bool { return false }
func (noArtifacts) Pull(context.Context, storage.Manifest, func(dataplane.TransferStatus)) (dataplane.PullResult, error) {
	return dataplane.PullResult{}, errors.New("no data plane")
}
func (noArtifacts) Open(storage.Manifest) (*os.File, error) { return nil, errors.New("no data plane") }
func (noArtifacts) Publish(context.Context, string, storage.PublishSpec) (storage.Manifest, error) {
	return storage.Manifest{}, errors.New("no data plane")
}
func (noArtifacts) NextVersion(string, string) string { return "1" }

const jobSource = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: retrain-1}
spec:
  resources: {cpu: "1", memory: 1Gi}
  data:
    - dataset: cases
  launcher: builtin
`

// placedJob is a one-node training job placed at epoch 1 in an owner's
// catalog, and the catalog of the node told to run it, which holds
// nothing of it until the test delivers it.
type placedJob struct {
	owner, node       *catalogtest.Store
	ownerCat, nodeCat *catalog.Catalog
	rec               catalog.Placement
}

func newPlacedJob(t *testing.T, name, src, node string) placedJob {
	t.Helper()
	pj := placedJob{owner: catalogtest.NewStore(), node: catalogtest.NewStore()}
	pj.ownerCat, pj.nodeCat = catalog.New(pj.owner, nil), catalog.New(pj.node, nil)
	pol, err := pj.ownerCat.Policies.Put(catalog.Policy{Kind: "TrainingJob", Name: name, Source: src, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	pj.rec = catalog.Placement{Key: "TrainingJob/" + name, Kind: "TrainingJob", Name: name, Epoch: 1, Generation: 1,
		State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: node, Rank: 0, Admitted: true}}}
	if _, err := pj.ownerCat.Placements.Put(pj.rec, pol.Ref()); err != nil {
		t.Fatal(err)
	}
	return pj
}

// runner returns the node's runner, with the job's assignment accepted.
func (pj placedJob) runner(t *testing.T) *Runner {
	return New(Config{Name: pj.rec.Nodes[0].Name, DataDir: t.TempDir(), Catalog: pj.nodeCat, Artifacts: noArtifacts{}, DataLag: 100 * time.Millisecond,
		Mesh: fakeMesh{local: mesh.NodeState{Assignments: []mesh.Assignment{{Key: pj.rec.Key, Epoch: 1, Accepted: true}}}}})
}

// longSource is a two-second exec job named long.
const longSource = "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: long}\nspec:\n  resources: {cpu: 10m, memory: 16Mi}\n  launcher: exec\n  command: [sh, -c, 'sleep 2']\n"

// running delivers the job's policy and placement to the node and returns
// its runner once the job runs there.
func (pj placedJob) running(t *testing.T, ctx context.Context) *Runner {
	t.Helper()
	pj.owner.Deliver(pj.node, "policies/"+pj.rec.Key)
	pj.owner.Deliver(pj.node, "placements/"+pj.rec.Key)
	r := pj.runner(t)
	r.reconcile(ctx)
	meshtest.WaitFor(t, 10*time.Second, "the job to run", func() bool {
		j, err := pj.nodeCat.Jobs.Value(pj.rec.Name)
		return err == nil && j.State == catalog.JobRunning
	})
	return r
}

// place writes rec at the owner, depending on dep, delivers it to the
// node alone and has the node's runner r act on it.
func (pj placedJob) place(t *testing.T, ctx context.Context, r *Runner, rec catalog.Placement, dep mesh.Dep) {
	t.Helper()
	if _, err := pj.ownerCat.Placements.Put(rec, dep); err != nil {
		t.Fatal(err)
	}
	pj.owner.Deliver(pj.node, "placements/"+rec.Key)
	r.reconcile(ctx)
}

// wantSucceeded waits for the node's record of the job to end, and fails
// unless it succeeded.
func (pj placedJob) wantSucceeded(t *testing.T) {
	t.Helper()
	var j catalog.Job
	meshtest.WaitFor(t, 10*time.Second, "the job to end", func() bool {
		var err error
		j, err = pj.nodeCat.Jobs.Value(pj.rec.Name)
		return err == nil && j.Terminal()
	})
	if j.State != catalog.JobSucceeded {
		t.Fatalf("job ended %s (%s), want succeeded", j.State, j.Error)
	}
}

// TestPlacementBeforeItsPolicyWaits: the node told to run a job learns the
// placement before the policy it points to (the demo's replication race).
// The job must not start, and so not fail with "not found: policies/...";
// once the policy arrives it starts.
func TestPlacementBeforeItsPolicyWaits(t *testing.T) {
	t.Parallel()
	pj := newPlacedJob(t, "retrain-1", jobSource, "gpu-2")
	owner, runner, runnerCat := pj.owner, pj.node, pj.nodeCat
	owner.Deliver(runner, "placements/TrainingJob/retrain-1")

	r := pj.runner(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.reconcile(ctx)
	r.mu.Lock()
	started := len(r.runs)
	r.mu.Unlock()
	if started != 0 {
		t.Fatal("the job started before its policy replicated")
	}
	if _, err := runnerCat.Jobs.Get("retrain-1"); err == nil {
		t.Fatal("a job record was written before the policy replicated")
	}

	owner.Deliver(runner, "policies/TrainingJob/retrain-1")
	r.reconcile(ctx)
	// It starts, and ends on its missing dataset: not on its policy.
	var j catalog.Job
	meshtest.WaitFor(t, 10*time.Second, "the job to end", func() bool {
		var err error
		j, err = runnerCat.Jobs.Value("retrain-1")
		return err == nil && j.Terminal()
	})
	if strings.Contains(j.Error, "policies/") || !strings.Contains(j.Error, "data cases") {
		t.Fatalf("job ended with %q; want it to fail on its missing dataset, not its policy", j.Error)
	}
}

// TestRestartWaitsForPlacements: an agent started with a job placed on it
// in its stored catalog (it was down, and the mesh may have placed the
// job elsewhere meanwhile) starts it only after twice its lease, as after
// a lapse; one that stored no such placement starts what it is given at
// once.
func TestRestartWaitsForPlacements(t *testing.T) {
	t.Parallel()
	store := catalogtest.NewStore()
	cat := catalog.New(store, nil)
	pol, err := cat.Policies.Put(catalog.Policy{Kind: "TrainingJob", Name: "retrain-1", Source: jobSource, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := catalog.Placement{Key: "TrainingJob/retrain-1", Kind: "TrainingJob", Name: "retrain-1", Epoch: 1, Generation: 1,
		State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "gpu-2", Rank: 0, Admitted: true}}}
	if _, err := cat.Placements.Put(rec, pol.Ref()); err != nil {
		t.Fatal(err)
	}
	m := fakeMesh{local: mesh.NodeState{Assignments: []mesh.Assignment{{Key: "TrainingJob/retrain-1", Epoch: 1, Accepted: true}}}}
	runner := func(node string) *Runner {
		return New(Config{Name: node, DataDir: t.TempDir(), Catalog: cat, Artifacts: noArtifacts{}, Mesh: m, Lease: time.Hour})
	}
	if got := runner("gpu-2").placedBefore(); !slices.Equal(got, []string{"TrainingJob/retrain-1"}) {
		t.Errorf("gpu-2 placed before: %v, want the job", got)
	}
	if got := runner("gpu-3").placedBefore(); got != nil {
		t.Errorf("gpu-3 placed before: %v, want none", got)
	}
	r := runner("gpu-2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	meshtest.WaitFor(t, 10*time.Second, "the restarted runner to wait as after a lapse", func() bool { return r.lease.restartIn(time.Now()) > 0 })
	r.lease.mu.Lock()
	began := !r.lease.lastTick.IsZero()
	r.lease.mu.Unlock()
	if !began {
		t.Error("Run did not begin the lease before starting jobs")
	}
	r.mu.Lock()
	started := len(r.runs)
	r.mu.Unlock()
	if started != 0 {
		t.Fatal("a job started while the lease had lapsed lately")
	}
	// A job that ran to its end is not waited for.
	if _, err := cat.Jobs.Put(catalog.Job{Name: "retrain-1", Generation: 1, Epoch: 1, State: catalog.JobSucceeded}); err != nil {
		t.Fatal(err)
	}
	if got := runner("gpu-2").placedBefore(); got != nil {
		t.Errorf("after the job's end, placed before: %v, want none", got)
	}
}

const gangSource = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: gang-1}
spec:
  gang: {nodes: 2}
  resources: {cpu: "1", memory: 1Gi}
  data:
    - dataset: cases
  launcher: exec
  command: ["true"]
  retries: 1
`

// TestGangWaitsForEveryAdmission: a member of a two-node gang does nothing
// (no job, no gang record, no rank) while the other node has not admitted
// its share; once it has, the gang starts, and a member that cannot get
// its data fails the attempt, then the retry, then the job.
func TestGangWaitsForEveryAdmission(t *testing.T) {
	t.Parallel()
	store := catalogtest.NewStore()
	cat := catalog.New(store, nil)
	pol, err := cat.Policies.Put(catalog.Policy{Kind: "TrainingJob", Name: "gang-1", Source: gangSource, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := catalog.Placement{Key: "TrainingJob/gang-1", Kind: "TrainingJob", Name: "gang-1", Epoch: 1, Generation: 1,
		State: catalog.StatePending, Nodes: []catalog.PlacedNode{{Name: "n1", Rank: 0}, {Name: "n2", Rank: 1}}}
	if _, err := cat.Placements.Put(rec, pol.Ref()); err != nil {
		t.Fatal(err)
	}
	admitted := mesh.Assignment{Key: rec.Key, Epoch: 1, Accepted: true}
	self := mesh.NodeState{Name: "n1", Addrs: mesh.Addrs{Gossip: "127.0.0.1:7946"}, Assignments: []mesh.Assignment{admitted}}
	other := mesh.Node{NodeState: mesh.NodeState{Name: "n2", Addrs: mesh.Addrs{Gossip: "127.0.0.1:7947"}}, Status: mesh.StatusAlive}
	r := New(Config{Name: "n1", DataDir: t.TempDir(), Catalog: cat, Artifacts: noArtifacts{}, Mesh: fakeMesh{local: self, nodes: []mesh.Node{other}},
		DataLag: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.reconcile(ctx)
	if _, ok := r.running(rec.Key); ok {
		t.Fatal("a gang member started before every member admitted")
	}
	if _, err := cat.Gangs.Get("gang-1"); err == nil {
		t.Fatal("a gang record was written before every member admitted")
	}

	other.Assignments = []mesh.Assignment{admitted}
	r.cfg.Mesh = fakeMesh{local: self, nodes: []mesh.Node{other}}
	r.reconcile(ctx)
	if _, ok := r.running(rec.Key); !ok {
		t.Fatal("the gang did not start once every member admitted")
	}
	// n2 never answers here; n1's own member fails on its data, twice.
	var j catalog.Job
	meshtest.WaitFor(t, 20*time.Second, "the gang's job to end", func() bool {
		var err error
		j, err = cat.Jobs.Value("gang-1")
		return err == nil && j.Terminal()
	})
	g, gerr := cat.Gangs.Value("gang-1")
	if j.State != catalog.JobFailed || !strings.Contains(j.Error, "member n1 failed") || !strings.Contains(j.Error, "data cases") ||
		gerr != nil || g.State != catalog.GangFailed || g.Attempt != 2 {
		t.Fatalf("job %+v\ngang %+v %v; want both failed at attempt 2 on n1's data", j, g, gerr)
	}
}

// TestBuiltinConfigFromPolicy: the builtin block's holdout and seed reach
// the trainer, and holdout 0 means none (not the trainer's default).
func TestBuiltinConfigFromPolicy(t *testing.T) {
	t.Parallel()
	parse := func(builtin string) trainer.Config {
		t.Helper()
		src := "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: t}\nspec:\n  data: [{dataset: d}]\n  launcher: builtin\n  builtin: " + builtin + "\n"
		docs, err := policy.Parse("t.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return builtinConfig(docs[0].TrainingJob.Builtin)
	}
	for _, c := range []struct {
		builtin string
		holdout float64
		seed    int64
	}{
		{"{algorithm: logreg}", 0.2, 1},
		{"{holdout: 0, seed: 0}", -1, 0},
		{"{holdout: 0.3, seed: 42}", 0.3, 42},
	} {
		cfg := parse(c.builtin)
		if cfg.Holdout != c.holdout || cfg.Seed != c.seed {
			t.Errorf("builtin %s: holdout %v seed %d, want %v and %d", c.builtin, cfg.Holdout, cfg.Seed, c.holdout, c.seed)
		}
	}
}

// TestRanksShareTheirNodesGPUs: a node's GPUs are shared out evenly among
// its ranks in rank order; another node's ranks get none of them.
func TestRanksShareTheirNodesGPUs(t *testing.T) {
	t.Parallel()
	members := []trainer.Member{{Node: "a"}, {Node: "a"}, {Node: "b"}, {Node: "a"}}
	shareGPUs(members, "a", []int{4, 5, 6, 7, 8, 9})
	want := [][]int{{4, 5}, {6, 7}, nil, {8, 9}}
	for i, m := range members {
		if !slices.Equal(m.GPUs, want[i]) {
			t.Errorf("rank %d got GPUs %v, want %v", i, m.GPUs, want[i])
		}
	}
	one := []trainer.Member{{Node: "a"}}
	shareGPUs(one, "a", nil)
	if one[0].GPUs != nil {
		t.Errorf("no GPUs assigned: rank 0 got %v", one[0].GPUs)
	}
	for _, c := range []struct {
		launcher  string
		ranks     int
		processes int
	}{{"exec", 4, 4}, {"torchrun", 4, 1}, {"exec", 0, 1}} {
		spec := &policy.TrainingJobSpec{Launcher: c.launcher, Gang: policy.Gang{RanksPerNode: c.ranks}}
		if got := procsPerNode(spec); got != c.processes {
			t.Errorf("%s with %d ranks per node starts %d processes per node, want %d", c.launcher, c.ranks, got, c.processes)
		}
	}
}

// lateCode holds a code artifact whose manifest replicates here only once
// ready is set; nothing else.
type lateCode struct {
	noArtifacts
	ready *atomic.Bool
}

var lateManifest = storage.Manifest{Kind: storage.KindCode, Name: "trainer", Version: "3", Digest: "sha256:" + strings.Repeat("c", 64)}

func (a lateCode) Lookup(kind storage.Kind, name, version string) (storage.Manifest, error) {
	if kind == storage.KindCode && name == "trainer" && a.ready.Load() {
		return lateManifest, nil
	}
	return a.noArtifacts.Lookup(kind, name, version)
}

// TestCodePushedJustBeforeIsPinned: a job whose code was pushed to another
// agent a moment before it was applied starts before the code's manifest
// reaches its node; it waits for it, so the job (and the model's lineage)
// names the code it ran.
func TestCodePushedJustBeforeIsPinned(t *testing.T) {
	t.Parallel()
	store := catalogtest.NewStore()
	cat := catalog.New(store, nil)
	src := "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: late}\nspec:\n  resources: {cpu: 100m, memory: 64Mi}\n  code: trainer\n  command: [\"true\"]\n"
	pol, err := cat.Policies.Put(catalog.Policy{Kind: "TrainingJob", Name: "late", Source: src, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := catalog.Placement{Key: "TrainingJob/late", Kind: "TrainingJob", Name: "late", Epoch: 1, Generation: 1,
		State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "n1", Rank: 0, Admitted: true}}}
	if _, err := cat.Placements.Put(rec, pol.Ref()); err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	r := New(Config{Name: "n1", DataDir: t.TempDir(), Catalog: cat, Artifacts: lateCode{ready: &ready}, DataLag: time.Minute,
		Mesh: fakeMesh{local: mesh.NodeState{Assignments: []mesh.Assignment{{Key: "TrainingJob/late", Epoch: 1, Accepted: true}}}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.reconcile(ctx)
	meshtest.WaitFor(t, 10*time.Second, "the job waiting for its code", func() bool {
		j, err := cat.Jobs.Value("late")
		return err == nil && j.State == catalog.JobPending
	})
	ready.Store(true)
	// It goes on (and fails to pull the code: this node has no data
	// plane), with the code pinned.
	var j catalog.Job
	meshtest.WaitFor(t, 20*time.Second, "the job to end", func() bool {
		j, err = cat.Jobs.Value("late")
		return err == nil && j.Terminal()
	})
	if j.Code == nil || j.Code.Digest != lateManifest.Digest {
		t.Fatalf("the job's code is %+v, want %s (error %q)", j.Code, lateManifest.Digest, j.Error)
	}
}

// TestRunGoesOnWhileItsRecordWaits: a job runs here when a newer copy of
// its placement arrives before the policy version it depends on (the
// policy was applied again). The placement still names this node at the
// run's epoch: the run goes on to its end and is recorded as succeeded,
// not stopped and recorded as failed ("signal: killed").
func TestRunGoesOnWhileItsRecordWaits(t *testing.T) {
	t.Parallel()
	pj := newPlacedJob(t, "long", longSource, "n1")
	ownerCat, rec := pj.ownerCat, pj.rec
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := pj.running(t, ctx)

	// Applied again: a new version of the policy, and the placement
	// rewritten with it; only the placement has arrived here.
	pol2, err := ownerCat.Policies.Put(catalog.Policy{Kind: "TrainingJob", Name: "long", Source: longSource, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec.Message = "applied again"
	pj.place(t, ctx, r, rec, pol2.Ref())
	pj.wantSucceeded(t)
}

// TestRunStopsForAnotherOwnersPlacement: two owners that each took
// themselves for the policy's owner placed the job at the same epoch on
// two nodes, and the other's record won. This node's run stops and records
// nothing: the job goes on at the other node, and a run recorded failed
// ("cancelled") would say the job failed though it did not.
func TestRunStopsForAnotherOwnersPlacement(t *testing.T) {
	t.Parallel()
	pj := newPlacedJob(t, "long", longSource, "n1")
	ownerCat, rec := pj.ownerCat, pj.rec
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := pj.running(t, ctx)

	rec.Nodes = []catalog.PlacedNode{{Name: "n2", Rank: 0, Admitted: true}}
	pol, _ := ownerCat.Policies.Ref("TrainingJob/long")
	pj.place(t, ctx, r, rec, pol)
	meshtest.WaitFor(t, 10*time.Second, "the run to stop", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.runs["TrainingJob/long"].live == 0
	})
	if j, err := pj.nodeCat.Jobs.Value("long"); err != nil || j.State != catalog.JobRunning {
		t.Fatalf("job record %s (%s), %v; want it left running: the job goes on at n2", j.State, j.Error, err)
	}

	// Placed here again at that epoch (the record naming n2 was deleted,
	// and its owner placed the job anew): it runs again, to its end.
	rec.Nodes, rec.Message = []catalog.PlacedNode{{Name: "n1", Rank: 0, Admitted: true}}, "placed anew"
	pj.place(t, ctx, r, rec, pol)
	pj.wantSucceeded(t)
}

// TestReadMetricsNonFinite: NaN and infinities as Python's json writes
// them do not lose the whole file, and come back named, not as missing.
func TestReadMetricsNonFinite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "metrics.json")
	if err := os.WriteFile(path, []byte(`{"loss": NaN, "acc": 0.5, "gain": -Infinity, "note": "NaN in a string stays", "n": Infinity}`), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics, invalid := readMetrics(path)
	if len(metrics) != 1 || metrics["acc"] != 0.5 {
		t.Errorf("metrics %v, want acc 0.5 only", metrics)
	}
	want := map[string]string{"loss": "NaN", "gain": "-Infinity", "n": "Infinity"}
	if len(invalid) != len(want) {
		t.Errorf("invalid %v, want %v", invalid, want)
	}
	for k, v := range want {
		if invalid[k] != v {
			t.Errorf("invalid[%s] = %q, want %q", k, invalid[k], v)
		}
	}
}

// TestRivalPlacementInTheQuietStartsNothing: a job placed here by an
// owner that is not its first owner among the agents this node knows
// waits StartQuiet before it starts. A rival placement of it at the same
// epoch on another node (the first owner's, while members flapped) that
// wins within that time means the job never starts here, rather than
// starting and being stopped; without one it starts once the quiet has
// passed. A job placed by its first owner, whose placement no rival's of
// the same epoch can win over, starts at once.
func TestRivalPlacementInTheQuietStartsNothing(t *testing.T) {
	t.Parallel()
	first, other := "a", "b"
	if placement.Owner("TrainingJob/q", []string{first, other}) != first {
		first, other = other, first
	}
	nodes := []mesh.Node{{NodeState: mesh.NodeState{Name: first, Controller: true}, Status: mesh.StatusFailed},
		{NodeState: mesh.NodeState{Name: other, Controller: true}, Status: mesh.StatusAlive},
		{NodeState: mesh.NodeState{Name: "n1"}, Status: mesh.StatusAlive}}
	for _, tc := range []struct {
		owner        string
		rival, quiet bool
	}{{other, true, true}, {other, false, true}, {first, false, false}} {
		cat := catalog.New(catalogtest.NewStore(), nil)
		src := "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: q}\nspec:\n  resources: {cpu: 100m, memory: 64Mi}\n  command: [\"true\"]\n"
		pol, err := cat.Policies.Put(catalog.Policy{Kind: "TrainingJob", Name: "q", Source: src, Generation: 1})
		if err != nil {
			t.Fatal(err)
		}
		rec := catalog.Placement{Key: "TrainingJob/q", Kind: "TrainingJob", Name: "q", Epoch: 1, Generation: 1, Owner: tc.owner,
			State: catalog.StatePlaced, Nodes: []catalog.PlacedNode{{Name: "n1", Rank: 0, Admitted: true}}}
		if _, err := cat.Placements.Put(rec, pol.Ref()); err != nil {
			t.Fatal(err)
		}
		r := New(Config{Name: "n1", DataDir: t.TempDir(), Catalog: cat, Artifacts: noArtifacts{}, StartQuiet: 300 * time.Millisecond,
			Mesh: fakeMesh{nodes: nodes, local: mesh.NodeState{Assignments: []mesh.Assignment{{Key: "TrainingJob/q", Epoch: 1, Accepted: true}}}}})
		ctx, cancel := context.WithCancel(context.Background())
		r.reconcile(ctx)
		if _, ok := r.running("TrainingJob/q"); ok == tc.quiet {
			t.Fatalf("placed by %s: started at once %v, want %v", tc.owner, ok, !tc.quiet)
		}
		if tc.quiet {
			if tc.rival {
				rec.Owner, rec.Nodes = first, []catalog.PlacedNode{{Name: "n2", Rank: 0, Admitted: true}}
				if _, err := cat.Placements.Put(rec, pol.Ref()); err != nil {
					t.Fatal(err)
				}
			}
			// StartQuiet is wall time since the job was first seen placed:
			// letting it pass is what is under test, not a wait for a state.
			time.Sleep(350 * time.Millisecond)
			r.reconcile(ctx)
			if _, ok := r.running("TrainingJob/q"); ok == tc.rival {
				t.Errorf("rival placement %v: started here %v", tc.rival, ok)
			}
		}
		cancel()
		// A run started writes into the data dir until it ends: the
		// test's cleanup removes that dir (a race run once found it not
		// empty).
		meshtest.WaitFor(t, 10*time.Second, "the run started here to end", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			lj := r.runs["TrainingJob/q"]
			return lj == nil || lj.live == 0
		})
	}
}
