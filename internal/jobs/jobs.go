// Package jobs runs the training jobs placed on this node: when this node
// admitted rank 0 of a TrainingJob's placement, it pulls the job's data,
// launches it (the built-in trainer or an exec command), records every
// state change in the catalog's jobs table, and registers the model the job
// leaves as a signed version. An exec job placed on several nodes runs as a
// gang: every member node launches its own ranks once the whole gang is
// admitted and ready, and rank 0's node leads it (gang.go).
//
//	r := jobs.New(jobs.Config{Name: "gpu-1", DataDir: dir, Mesh: m, Catalog: cat, Artifacts: svc})
//	go r.Run(ctx)
//	out, err := r.Logs("retrain-1", 0)
package jobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer"
)

// Mesh is what the runner reads of the mesh: this node's document (its
// admitted assignments), the other nodes' (a gang's members: their
// addresses, admissions and status) and when anything changed.
type Mesh interface {
	Local() mesh.NodeState
	Nodes() []mesh.Node
	Changed() <-chan struct{}
}

// Artifacts is what the runner needs of the artifact component: finding
// and fetching a job's data, and publishing its model.
type Artifacts interface {
	Lookup(kind storage.Kind, name, version string) (storage.Manifest, error)
	ByDigest(digest string, kinds ...storage.Kind) (storage.Manifest, error)
	Has(digest string) bool
	Pull(ctx context.Context, m storage.Manifest, progress func(dataplane.TransferStatus)) (dataplane.PullResult, error)
	Open(m storage.Manifest) (*os.File, error)
	Publish(ctx context.Context, path string, spec storage.PublishSpec) (storage.Manifest, error)
	NextVersion(name, after string) string
}

var _ Artifacts = (*artifacts.Service)(nil)

// Config configures a Runner. Name, DataDir, Mesh, Catalog and Artifacts
// are required.
type Config struct {
	// Name is this node's name; DataDir holds each run's directory
	// (jobs/<name>-<epoch>) and logs.
	Name, DataDir string
	Mesh          Mesh
	Catalog       *catalog.Catalog
	Artifacts     Artifacts
	Logger        *slog.Logger
	// Guard recovers panics of the component's background work (logged,
	// counted). Nil: a guard of its own that logs to Logger and exports
	// no metric.
	Guard *safe.Guard
	// DataLag bounds how long a job waits for data and code named in its
	// spec to replicate here before it reports them missing. Default
	// DefaultDataLag.
	DataLag time.Duration
	// Lease is how long a run goes on while this node is cut off from
	// its site (see lease.go). Default DefaultLease; a controller places a
	// job again only after its node has been failed for longer.
	Lease time.Duration
	// StartQuiet is how long a job placed here waits before it starts
	// (see DefaultStartQuiet); 0 starts it at once.
	StartQuiet time.Duration
}

// Runner starts the training jobs whose rank 0 this node admitted and
// records their runs in the catalog. Safe for concurrent use.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	paused atomic.Bool
	lease  lease
	mu     sync.Mutex
	// runs are the jobs started here, by policy key.
	runs map[string]*localJob
	// placedAt is when this runner first saw each job placed here (by
	// "key@epoch"), reconcile's goroutine only: a job starts
	// Config.StartQuiet after that.
	placedAt map[string]time.Time
	// again is how soon reconcile wants to look again (0: on the next
	// change, or in 2s); reconcile's goroutine only.
	again time.Duration
}

// DefaultStartQuiet is how long an agent's training job placed on its
// node waits before it starts (Config.StartQuiet) when the owner that
// placed it is not the job's first owner (see quiet): long enough for a
// rival placement of it (two owners that each thought the job theirs
// while members flapped on a busy host, each placing it at the same epoch
// on another node) to reach this node and win or lose, so that the job
// starts once, not twice with the loser stopped. With 1000 sweep trials
// on a dev mesh with 3 busy loops per core
// (BenchmarkSweepTrialsUnderLoad), 10 trials ran twice without it.
// Skipping it while this node's own view of the membership had been
// steady for 10 s let 57 run twice: a member flaps in a rival owner's
// view, not in the view of the node that runs the job. A job placed by
// its first owner starts at once: no placement of the same epoch wins
// over that owner's.
const DefaultStartQuiet = 1500 * time.Millisecond

type localJob struct {
	epoch   uint64
	cancel  context.CancelFunc
	run     *trainer.Run // nil until launched
	dir     string
	started time.Time
	// stopped says why this agent stopped the run itself (guarded by
	// Runner.mu): stopSuperseded or stopFenced. Such a run records no
	// outcome: the job is not over, another run of it goes on.
	stopped string
	// live counts this run's goroutines (leader and member) still going
	// (guarded by Runner.mu); a fenced run starts again only once none is.
	live int
}

// Why the agent stops a run itself.
const (
	stopSuperseded = "placed again"
	stopFenced     = "fenced"
)

// New returns a runner; nothing runs until Run.
func New(cfg Config) *Runner {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Guard == nil {
		cfg.Guard = safe.New(safe.Config{Logger: cfg.Logger})
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	return &Runner{cfg: cfg, log: cfg.Logger, runs: map[string]*localJob{}, placedAt: map[string]time.Time{}, lease: lease{every: cfg.Lease}}
}

// SetPaused stops (true) or resumes starting jobs; runs under way go on.
// Tests of placement alone pause it.
func (j *Runner) SetPaused(p bool) { j.paused.Store(p) }

// Run starts and watches jobs until ctx ends. An agent started with
// training jobs placed on it in its stored catalog, unfinished, starts
// none of them for twice its lease, as after a lapse (restartIn): while
// it was down the mesh may have placed them elsewhere, and that placement
// reaches it by gossip or sync, not at once.
func (j *Runner) Run(ctx context.Context) {
	j.lease.begin(time.Now())
	if keys := j.placedBefore(); len(keys) > 0 {
		j.lease.lapse(time.Now())
		j.log.Info("training jobs were placed here before this start: starting none until placements made elsewhere meanwhile have reached this node",
			"jobs", keys, "wait", j.lease.restartIn(time.Now()))
	}
	go j.cfg.Guard.Loop(ctx, "jobs", j.keepLease)
	for {
		changed := j.cfg.Mesh.Changed()
		if j.cfg.Guard.Do("jobs", func() { j.reconcile(ctx) }) != nil {
			if !j.cfg.Guard.Wait(ctx) {
				return
			}
			continue // the pass again, after the pause
		}
		wait := 2 * time.Second
		if j.again > 0 {
			wait = min(wait, j.again)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// placedBefore returns the training jobs the stored catalog places on this
// node that have not run to their end.
func (j *Runner) placedBefore() []string {
	recs, _ := j.cfg.Catalog.Placements.Prefix(policy.KindTrainingJob + "/")
	var out []string
	for _, r := range recs {
		rec := r.Value
		if !slices.ContainsFunc(rec.Nodes, func(n catalog.PlacedNode) bool { return n.Name == j.cfg.Name }) {
			continue
		}
		if prev, err := j.cfg.Catalog.Jobs.Value(rec.Name); err == nil && prev.Over(rec.Generation, rec.Epoch) {
			continue
		}
		out = append(out, rec.Key)
	}
	return out
}

func (j *Runner) reconcile(ctx context.Context) {
	if j.paused.Load() {
		return
	}
	mine, all := j.placedHere()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.stopUnplaced(mine, all)
	if j.lease.restartIn(time.Now()) > 0 {
		// Cut off or paused lately: another node may have been given
		// this node's jobs. Start nothing until the placements this
		// node sees are surely current.
		return
	}
	now := time.Now()
	placedAt := make(map[string]time.Time, len(mine))
	for key, rec := range mine {
		at := fmt.Sprintf("%s@%d", key, rec.Epoch)
		placedAt[at] = cmp.Or(j.placedAt[at], now)
	}
	j.placedAt = placedAt
	j.again = 0
	var nodes []mesh.Node // read when a job first needs them (see quiet)
	for key, rec := range mine {
		if lj, ok := j.runs[key]; ok && lj.epoch == rec.Epoch && (lj.stopped == "" || lj.live > 0) {
			// Runs or ran, or a run this agent stopped has not ended yet.
			// One it stopped starts again at the same epoch once ended:
			// fenced, or placed elsewhere and now placed here again (an
			// owner that never heard of the other placement numbers its
			// own alike).
			continue
		}
		if prev, err := j.cfg.Catalog.Jobs.Value(rec.Name); err == nil && prev.Over(rec.Generation, rec.Epoch) {
			continue // ran to its end already; a new generation runs again
		}
		if wait := j.quiet(rec, &nodes) - now.Sub(placedAt[fmt.Sprintf("%s@%d", key, rec.Epoch)]); wait > 0 {
			// See DefaultStartQuiet; look again when it has passed.
			j.again = cmp.Or(min(j.again, wait), wait)
			continue
		}
		jctx, cancel := context.WithCancel(ctx)
		lj := &localJob{epoch: rec.Epoch, cancel: cancel, started: time.Now()}
		j.runs[key] = lj
		if len(rec.Nodes) > 1 {
			lj.live++
			j.cfg.Guard.Go("jobs", func() {
				defer j.ended(lj)
				j.member(jctx, rec, lj)
			})
		}
		if rankZero(rec).Name == j.cfg.Name {
			lj.live++
			j.cfg.Guard.Go("jobs", func() {
				defer j.ended(lj)
				j.start(jctx, rec, lj)
			})
		}
	}
}

// quiet is how long job placement rec waits here before it starts:
// Config.StartQuiet, or nothing when its owner is the job's first owner
// among every agent this node knows (meshview.FirstOwner), whatever their
// status. Another owner's placement of the same epoch can then never win
// over it (catalog.Authorizer.Prefer), so no rival placement can stop it;
// that is what the quiet waits for. nodes is read on first use.
func (j *Runner) quiet(rec catalog.Placement, nodes *[]mesh.Node) time.Duration {
	if j.cfg.StartQuiet <= 0 || rec.Owner == "" {
		return j.cfg.StartQuiet
	}
	if *nodes == nil {
		*nodes = j.cfg.Mesh.Nodes()
	}
	if meshview.FirstOwner(rec.Key, *nodes) == rec.Owner {
		return 0
	}
	return j.cfg.StartQuiet
}

// placedHere returns the training jobs this node acts on (mine: placed
// here, admitted, ready) and every training job's placement held here
// (all, ready or not).
func (j *Runner) placedHere() (mine, all map[string]catalog.Placement) {
	// Placements whose policy has not replicated here yet wait.
	// Training jobs only: with thousands of services placed, copying
	// every placement on every pass was most of this loop's time.
	// Undecodable records are counted by the catalog.
	held, _ := j.cfg.Catalog.Placements.Prefix(policy.KindTrainingJob + "/")
	recs := make(map[string]catalog.Placement, len(held))
	all = make(map[string]catalog.Placement, len(held)) // ready or not
	for _, r := range held {
		all[r.Key] = r.Value
		if len(j.cfg.Catalog.Placements.Pending(r)) == 0 {
			recs[r.Key] = r.Value
		}
	}
	mine = map[string]catalog.Placement{}
	for _, as := range j.cfg.Mesh.Local().Assignments {
		if !as.Accepted || !strings.HasPrefix(as.Key, policy.KindTrainingJob+"/") {
			continue
		}
		rec, ok := recs[as.Key]
		if !ok || rec.Epoch != as.Epoch || len(rec.Nodes) == 0 {
			continue
		}
		switch {
		case len(rec.Nodes) == 1 && rankZero(rec).Name == j.cfg.Name:
		case len(rec.Nodes) > 1 && slices.ContainsFunc(rec.Nodes, func(n catalog.PlacedNode) bool { return n.Name == j.cfg.Name }):
			// A gang: every member acts only once the whole gang is
			// admitted; one that runs already goes on.
			if lj, ok := j.running(as.Key); !(ok && lj.epoch == rec.Epoch) && !j.gangAdmitted(rec) {
				continue
			}
		default:
			continue
		}
		mine[as.Key] = rec
	}
	return mine, all
}

// stopUnplaced stops here the runs of jobs placed elsewhere or deleted
// (mine: the placements this node acts on; all: every training job's
// placement held here); j.mu must be held. A run whose placement
// still names this node at its epoch goes on, although the placement
// is not in mine: a newer copy of its record waits for what it
// depends on, or this node's assignment lags the record. Stopped, it
// would be recorded as failed (killed) though nothing replaced it.
func (j *Runner) stopUnplaced(mine, all map[string]catalog.Placement) {
	for key, lj := range j.runs {
		if rec, ok := mine[key]; !ok || rec.Epoch != lj.epoch {
			if cur, placed := all[key]; placed && cur.Epoch == lj.epoch && slices.ContainsFunc(cur.Nodes, func(n catalog.PlacedNode) bool { return n.Name == j.cfg.Name }) {
				continue
			}
			if lj.cancel != nil {
				lj.cancel()
				lj.cancel = nil
				if _, placed := all[key]; placed {
					// Placed again (elsewhere, or here anew), or placed
					// at this epoch on another node by an owner that had
					// not heard of this run's placement, whose record
					// won: the job goes on, so this run records nothing.
					// A run whose placement is gone (the policy was
					// deleted) ends with what it says.
					lj.stopped = cmp.Or(lj.stopped, stopSuperseded)
				}
				j.log.Info("stopping training job: no longer placed here", "job", key)
			}
		}
	}
}

// running returns the job started here for key, if any.
func (j *Runner) running(key string) (*localJob, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	lj, ok := j.runs[key]
	return lj, ok
}

func rankZero(rec catalog.Placement) catalog.PlacedNode {
	best := rec.Nodes[0]
	for _, n := range rec.Nodes {
		if n.Rank < best.Rank {
			best = n
		}
	}
	return best
}

// start runs one job to its end and records every step (for a gang: leads
// it, while member runs this node's ranks).
func (j *Runner) start(ctx context.Context, rec catalog.Placement, lj *localJob) {
	defer lj.cancel()
	parent := ctx
	doc, err := j.policyDoc(rec.Key)
	jr := catalog.Job{
		Name: rec.Name, Key: rec.Key, Generation: rec.Generation, Epoch: rec.Epoch, State: catalog.JobPending,
		Node: j.cfg.Name, Created: time.Now().UTC(),
	}
	for _, n := range rec.Nodes {
		jr.Nodes = append(jr.Nodes, n.Name)
	}
	if err == nil && doc.TrainingJob == nil {
		err = fmt.Errorf("%s is not a TrainingJob", rec.Key)
	}
	if err != nil {
		j.finish(jr, err)
		return
	}
	spec := doc.TrainingJob
	jr.RetrainOf = doc.Metadata.Labels[catalog.LabelRetrainOf]
	jr.Launcher = launcherOf(spec)
	j.write(jr)
	j.awaitRefs(ctx, spec)
	jr.Data = j.pinData(spec)
	jr.Code = j.pinCode(spec)
	j.write(jr)
	if d := time.Duration(spec.MaxDuration); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	dir := jobDir(j.cfg.DataDir, rec)
	lj.dir = dir
	if isGang(rec, jr.Launcher) {
		j.leadGang(parent, ctx, rec, doc, jr)
		return
	}
	job, launcher, err := j.prepare(ctx, jr, spec, dir)
	if err != nil {
		j.finish(jr, err)
		return
	}
	run, err := launcher.Launch(ctx, job)
	if err != nil {
		j.finish(jr, err)
		return
	}
	j.mu.Lock()
	lj.run = run
	j.mu.Unlock()
	jr.State, jr.Started = catalog.JobRunning, time.Now().UTC()
	jr.Members = statusesOf(run.Status().Members)
	j.write(jr)
	j.log.Info("training job running", "job", jr.Name, "launcher", jr.Launcher, "nodes", strings.Join(jr.Nodes, ","))
	stopWatch := j.watchSteps(jr, filepath.Join(job.OutputDir, trainer.StepsFile))
	err = run.Wait(context.WithoutCancel(ctx))
	stopWatch()
	jr.Steps = readSteps(filepath.Join(job.OutputDir, trainer.StepsFile))
	st := run.Status()
	jr.Members, jr.Attempt = statusesOf(st.Members), st.Attempt
	for rank := range run.Job().Members {
		if logs := run.Log(rank); logs != "" {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.log", rank)), []byte(logs), 0o600)
		}
	}
	if err == nil && j.halted(jr) == "" {
		err = j.register(ctx, &jr, doc, job.OutputDir)
	}
	j.finish(jr, err)
}

// prepare pulls the job's datasets into dir/data and builds the launcher.
func (j *Runner) prepare(ctx context.Context, jr catalog.Job, spec *policy.TrainingJobSpec, dir string) (trainer.Job, trainer.Launcher, error) {
	job := trainer.Job{
		ID: jr.Name, DatasetDir: filepath.Join(dir, "data"), OutputDir: filepath.Join(dir, "out"),
		Env: spec.Env, Retries: spec.Retries, Dir: dir, CheckpointDir: filepath.Join(dir, "checkpoint"),
	}
	for _, d := range []string{job.DatasetDir, job.OutputDir, job.CheckpointDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return job, nil, err
		}
	}
	var files []trainer.DataFile
	for _, d := range spec.Data {
		f, err := j.fetchData(ctx, d, job.DatasetDir)
		if err != nil {
			return job, nil, err
		}
		files = append(files, f)
	}
	if spec.Code != "" {
		code := filepath.Join(dir, "code")
		if err := j.fetchCode(ctx, spec.Code, code); err != nil {
			return job, nil, err
		}
		job.Dir = code
		job.Env = mergeEnv(job.Env, "STRATA_CODE_DIR", code)
	}
	host := hostOf(j.cfg.Mesh.Local())
	job.Members = []trainer.Member{{Node: j.cfg.Name, Addr: host}}
	switch jr.Launcher {
	case policy.LauncherBuiltin:
		job.Members[0].GPUs = j.assignedGPUs(jr.Key)
		cfg := builtinConfig(spec.Builtin)
		if b := spec.Builtin; b != nil && b.Label != "" {
			job.Env = mergeEnv(job.Env, trainer.LabelEnv, b.Label)
		}
		job.Train = &cfg
		if slices.ContainsFunc(files, func(f trainer.DataFile) bool { return f.Mix > 0 || f.Site != "" }) {
			job.Data = files
		}
		return job, &trainer.Builtin{Logger: j.log}, nil
	case policy.LauncherExec, policy.LauncherTorchrun:
		for range procsPerNode(spec) - 1 {
			job.Members = append(job.Members, job.Members[0])
		}
		shareGPUs(job.Members, j.cfg.Name, j.assignedGPUs(jr.Key))
		job.Torchrun = torchrunOf(spec)
		job.Command = append(append([]string(nil), spec.Command...), spec.Args...)
		port, err := freePort(host)
		if err != nil {
			return job, nil, err
		}
		job.MasterPort = port
		return job, trainer.NewExec(trainer.ExecOptions{Logger: j.log}), nil
	}
	return job, nil, fmt.Errorf("launcher %q: want exec, torchrun or builtin", jr.Launcher)
}

// builtinConfig is the built-in trainer's config for a policy's builtin
// block, as defaulted by the policy parser (nil: logreg with the
// trainer's defaults).
func builtinConfig(b *policy.Builtin) trainer.Config {
	cfg := trainer.Config{Kind: trainer.KindLogistic, Seed: 1}
	if b == nil {
		return cfg
	}
	if b.Algorithm == policy.AlgorithmMLP {
		cfg.Kind = trainer.KindMLP
	}
	cfg.Hidden, cfg.Epochs, cfg.LearningRate = b.Hidden, b.Epochs, b.LearningRate
	cfg.Holdout, cfg.Seed = b.Holdout, b.Seed
	if b.Holdout == 0 {
		cfg.Holdout = -1 // the policy asked for none; 0 is the trainer's default
	}
	return cfg
}

func mergeEnv(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for ek, ev := range env {
		out[ek] = ev
	}
	return out
}

// pinData resolves the job's data references to the versions it will
// read ("the newest version" once, now) and pins spec to them, for the
// job's lineage. A reference not resolvable yet stays as written: fetching
// it says why.
func (j *Runner) pinData(spec *policy.TrainingJobSpec) []catalog.ArtifactRef {
	var out []catalog.ArtifactRef
	for i, d := range spec.Data {
		m, err := j.lookupData(d)
		if err != nil {
			continue
		}
		out = append(out, catalog.ArtifactRef{Kind: string(m.Kind), Name: m.Name, Version: m.Version, Digest: m.Digest})
		spec.Data[i] = policy.DataRef{Artifact: m.Digest, Size: d.Size, Mix: d.Mix}
	}
	return out
}

func (j *Runner) lookupData(d policy.DataRef) (storage.Manifest, error) {
	if d.Artifact != "" {
		return j.cfg.Artifacts.ByDigest(d.Artifact, storage.KindDataset, storage.KindModel)
	}
	name, version, _ := strings.Cut(d.Dataset, ":")
	return j.cfg.Artifacts.Lookup(storage.KindDataset, name, version)
}

// awaitRefs waits, up to the runner's dataLag, until the job's data and code resolve
// here: they may have been pushed to another agent moments before the job
// was applied, their manifests still on their way (a job pinned without
// them would lose them from its lineage). What does not resolve by then is
// left to the fetch, which says why.
func (j *Runner) awaitRefs(ctx context.Context, spec *policy.TrainingJobSpec) {
	wctx, cancel := context.WithTimeout(ctx, j.dataLag())
	defer cancel()
	_ = j.until(wctx, func() bool {
		for _, d := range spec.Data {
			if _, err := j.lookupData(d); err != nil {
				return false
			}
		}
		if spec.Code != "" {
			if _, err := j.lookupCode(spec.Code); err != nil {
				return false
			}
		}
		return true
	})
}

// pinCode resolves the job's code reference and pins spec to its digest,
// for the job's lineage; nil when the job names no code (or it cannot be
// resolved yet: fetching it says why).
func (j *Runner) pinCode(spec *policy.TrainingJobSpec) *catalog.ArtifactRef {
	if spec.Code == "" {
		return nil
	}
	m, err := j.lookupCode(spec.Code)
	if err != nil {
		return nil
	}
	spec.Code = m.Digest
	return &catalog.ArtifactRef{Kind: string(m.Kind), Name: m.Name, Version: m.Version, Digest: m.Digest}
}

// lookupCode finds a code artifact by digest or name[:version].
func (j *Runner) lookupCode(ref string) (storage.Manifest, error) {
	if strings.HasPrefix(ref, "sha256:") {
		return j.cfg.Artifacts.ByDigest(ref, storage.KindCode)
	}
	name, version, _ := strings.Cut(ref, ":")
	return j.cfg.Artifacts.Lookup(storage.KindCode, name, version)
}

// fetchCode pulls the job's code (when not held) and unpacks it into dir,
// which it replaces.
func (j *Runner) fetchCode(ctx context.Context, ref, dir string) error {
	m, err := j.lookupCode(ref)
	if err != nil {
		return fmt.Errorf("code %s: %w", ref, err)
	}
	if !j.cfg.Artifacts.Has(m.Digest) {
		if _, err := j.cfg.Artifacts.Pull(ctx, m, nil); err != nil {
			return fmt.Errorf("pulling %s: %w", m.Ref(), err)
		}
	}
	src, err := j.cfg.Artifacts.Open(m)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := trainer.UnpackCode(src, dir); err != nil {
		return fmt.Errorf("unpacking %s: %w", m.Ref(), err)
	}
	return nil
}

// fetchData pulls one data reference (when not held) and copies its bytes
// into dir, named after the artifact (datasets get ".csv" unless their name
// has an extension).
func (j *Runner) fetchData(ctx context.Context, d policy.DataRef, dir string) (trainer.DataFile, error) {
	m, err := j.lookupData(d)
	if err != nil {
		return trainer.DataFile{}, fmt.Errorf("data %s%s: %w", d.Dataset, d.Artifact, err)
	}
	if !j.cfg.Artifacts.Has(m.Digest) {
		if _, err := j.cfg.Artifacts.Pull(ctx, m, nil); err != nil {
			return trainer.DataFile{}, fmt.Errorf("pulling %s: %w", m.Ref(), err)
		}
	}
	src, err := j.cfg.Artifacts.Open(m)
	if err != nil {
		return trainer.DataFile{}, err
	}
	defer src.Close()
	name := m.Name
	if filepath.Ext(name) == "" && m.Kind == storage.KindDataset {
		name += ".csv"
	}
	// A captured site's rows keep their site: the model gets a drift
	// reference of them for that site.
	f := trainer.DataFile{Path: filepath.Join(dir, filepath.Base(name)), Mix: d.Mix, Site: m.Metadata[catalog.MetaCaptureSite]}
	dst, err := os.Create(f.Path)
	if err != nil {
		return f, err
	}
	_, err = io.Copy(dst, src)
	return f, errors.Join(err, dst.Close())
}

// register publishes the model a finished job left in out, when the job's
// labels name the output model.
func (j *Runner) register(ctx context.Context, jr *catalog.Job, doc *policy.Document, out string) error {
	jr.Metrics, jr.Invalid = readMetrics(filepath.Join(out, trainer.MetricsFile))
	if a, ok := jr.Metrics["accuracy"]; ok {
		jr.Accuracy = a
	}
	name, version := doc.Metadata.Labels[catalog.LabelOutputModel], doc.Metadata.Labels[catalog.LabelOutputVersion]
	if name == "" {
		return nil
	}
	model := filepath.Join(out, trainer.ModelFile)
	if _, err := os.Stat(model); err != nil {
		return fmt.Errorf("the job succeeded but left no %s in STRATA_OUTPUT_DIR: %w", trainer.ModelFile, err)
	}
	if version == "" {
		version = j.cfg.Artifacts.NextVersion(name, "")
	}
	meta := map[string]string{catalog.MetaJob: jr.Name}
	if b, err := os.ReadFile(filepath.Join(out, trainer.ReferenceFile)); err == nil {
		meta[catalog.MetaReference] = string(b)
	}
	if b, err := os.ReadFile(filepath.Join(out, trainer.SiteReferencesFile)); err == nil {
		meta[catalog.MetaSiteReferences] = string(b)
	}
	lin := j.lineage(*jr, doc)
	// The lineage keeps every number the job reported, and only those: an
	// exec script's metrics.json holds what it chose to write.
	lin.Metrics = jr.Metrics
	if a, ok := jr.Metrics["accuracy"]; ok {
		meta[catalog.MetaAccuracy] = strconv.FormatFloat(a, 'f', 4, 64)
	}
	if b, err := os.ReadFile(filepath.Join(out, trainer.MetricsFile)); err == nil {
		var mt trainer.Metrics
		if json.Unmarshal(b, &mt) == nil && len(mt.Features) > 0 {
			meta[catalog.MetaFeatures] = strings.Join(mt.Features, ",")
		}
	}
	if b, err := json.Marshal(lin); err == nil {
		meta[catalog.MetaLineage] = string(b)
	}
	m, err := j.cfg.Artifacts.Publish(ctx, model, storage.PublishSpec{Kind: storage.KindModel, Name: name, Version: version, Metadata: meta})
	if err != nil {
		return fmt.Errorf("registering %s@%s: %w", name, version, err)
	}
	jr.Model, jr.Version, jr.Digest = m.Name, m.Version, m.Digest
	j.log.Info("training job registered a model", "job", jr.Name, "model", m.Ref(), "accuracy", jr.Accuracy)
	return nil
}

// readMetrics reads the top-level numbers of a job's metrics.json (the
// builtin trainer's, or one an exec script wrote); nil when there is none.
// Numbers that are not finite (Python's json writes NaN, Infinity and
// -Infinity, which JSON lacks) come back in invalid, by name, spelled as
// written.
func readMetrics(path string) (metrics map[string]float64, invalid map[string]string) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 1<<20 {
		return nil, nil
	}
	var raw map[string]any
	if json.Unmarshal(quoteNonFinite(b), &raw) != nil {
		return nil, nil
	}
	metrics, invalid = map[string]float64{}, map[string]string{}
	for k, v := range raw {
		switch f := v.(type) {
		case float64:
			metrics[k] = f
		case string:
			if nonFinite[f] {
				invalid[k] = f
			}
		}
	}
	if len(metrics) == 0 {
		metrics = nil
	}
	if len(invalid) == 0 {
		invalid = nil
	}
	return metrics, invalid
}

// nonFinite are the spellings of non-finite numbers Python's json writes.
var nonFinite = map[string]bool{"NaN": true, "Infinity": true, "-Infinity": true}

// quoteNonFinite quotes the bare NaN, Infinity and -Infinity tokens
// outside strings in b, so that encoding/json reads them (as strings).
func quoteNonFinite(b []byte) []byte {
	var out []byte
	in, esc := false, false
	for i := 0; i < len(b); i++ {
		ch := b[i]
		if in {
			switch {
			case esc:
				esc = false
			case ch == '\\':
				esc = true
			case ch == '"':
				in = false
			}
			out = append(out, ch)
			continue
		}
		if ch == '"' {
			in = true
			out = append(out, ch)
			continue
		}
		matched := false
		for _, tok := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(b[i:], []byte(tok)) {
				out = append(out, '"')
				out = append(out, tok...)
				out = append(out, '"')
				i += len(tok) - 1
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, ch)
		}
	}
	return out
}

// lineage says what made the model a job registers (its metrics are
// added from the trainer's report).
func (j *Runner) lineage(jr catalog.Job, doc *policy.Document) catalog.Lineage {
	spec := doc.TrainingJob
	l := catalog.Lineage{
		Job: jr.Name, Policy: jr.Key, Generation: jr.Generation, Launcher: jr.Launcher,
		Data: jr.Data, Code: jr.Code, RetrainOf: jr.RetrainOf, Nodes: jr.Nodes, Started: jr.Started, Finished: time.Now().UTC(),
	}
	switch {
	case jr.Launcher == policy.LauncherExec || jr.Launcher == policy.LauncherTorchrun:
		l.Command = append(append([]string(nil), spec.Command...), spec.Args...)
	case spec.Builtin != nil:
		b := spec.Builtin
		l.Params = map[string]string{
			"algorithm": b.Algorithm, "epochs": strconv.Itoa(b.Epochs),
			"learningRate": strconv.FormatFloat(b.LearningRate, 'g', -1, 64),
			"holdout":      strconv.FormatFloat(b.Holdout, 'g', -1, 64), "seed": strconv.FormatInt(b.Seed, 10),
		}
		if len(b.Hidden) > 0 {
			l.Params["hidden"] = fmt.Sprint(b.Hidden)
		}
		if b.Label != "" {
			l.Params["label"] = b.Label
		}
	}
	if jr.RetrainOf != "" {
		if r, err := j.cfg.Catalog.Rollouts.Value(policy.KindInferenceService + "/" + jr.RetrainOf); err == nil && r.Job == jr.Name {
			l.Trigger = r.Trigger
		}
	}
	name, from := doc.Metadata.Labels[catalog.LabelOutputModel], doc.Metadata.Labels[catalog.LabelRetrainFrom]
	if from != "" {
		l.Parent = &catalog.ArtifactRef{Kind: string(storage.KindModel), Name: name, Version: from}
		if m, err := j.cfg.Artifacts.Lookup(storage.KindModel, name, from); err == nil {
			l.Parent.Digest = m.Digest
		}
	}
	return l
}

// ended marks one of lj's goroutines done.
func (j *Runner) ended(lj *localJob) {
	j.mu.Lock()
	lj.live--
	j.mu.Unlock()
}

// halted says why this agent stopped jr's run itself, if it did: placed
// elsewhere, or fenced because the node's lease lapsed while it ran.
func (j *Runner) halted(jr catalog.Job) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	lj := j.runs[jr.Key]
	if lj == nil || lj.epoch != jr.Epoch {
		return stopSuperseded // a run of another epoch started here since
	}
	if lj.stopped == "" && j.lease.lapsedSince(lj.started, time.Now()) {
		lj.stopped = stopFenced
	}
	return lj.stopped
}

func (j *Runner) finish(jr catalog.Job, err error) {
	switch j.halted(jr) {
	case stopSuperseded:
		j.log.Info("training job run stopped: placed elsewhere", "job", jr.Name, "epoch", jr.Epoch)
		return
	case stopFenced:
		j.log.Warn("training job run fenced: this node was cut off from its site, or paused, for longer than its lease while it ran, so another node may run the job; its outcome is not recorded",
			"job", jr.Name, "epoch", jr.Epoch, "lease", j.cfg.Lease, "outcome", cmp.Or(errString(err), "succeeded"))
		return
	}
	jr.Finished = time.Now().UTC()
	if err != nil {
		jr.State, jr.Error = catalog.JobFailed, err.Error()
		j.log.Warn("training job failed", "job", jr.Name, "err", err)
	} else {
		jr.State = catalog.JobSucceeded
		j.log.Info("training job succeeded", "job", jr.Name)
	}
	j.writeNotify(jr, j.waitingFor(jr))
}

// waitingFor names the owners that act on a job's end next: its
// placement's, which releases its nodes, and for a trial its sweep's,
// which starts the next trial.
func (j *Runner) waitingFor(jr catalog.Job) []string {
	var out []string
	if rec, err := j.cfg.Catalog.Placements.Value(jr.Key); err == nil && rec.Owner != "" {
		out = append(out, rec.Owner)
	}
	if doc, err := j.policyDoc(jr.Key); err == nil {
		if sweep := doc.Metadata.Labels[catalog.LabelTrialOf]; sweep != "" {
			out = append(out, placement.Owner(policy.KindTrainingJob+"/"+sweep, meshview.Owners(j.cfg.Mesh.Nodes())))
		}
	}
	return out
}

// stepsEvery is how often a running job's per-step metrics are read.
const stepsEvery = time.Second

// watchSteps records the running job jr's per-step metrics from path as
// they grow, until the returned function is called (it waits for the last
// write).
func (j *Runner) watchSteps(jr catalog.Job, path string) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	j.cfg.Guard.Go("jobs", func() {
		defer close(exited)
		t := time.NewTicker(stepsEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if steps := readSteps(path); len(steps) != len(jr.Steps) {
				jr.Steps = steps
				j.write(jr)
			}
		}
	})
	return func() { close(done); <-exited }
}

// readSteps reads a job's per-step metrics; a file that cannot be read is
// no steps (the job's own output says why).
func readSteps(path string) []catalog.Step {
	steps, _, _ := trainer.ReadSteps(path)
	return stepsOf(steps)
}

func (j *Runner) write(jr catalog.Job) { j.writeNotify(jr, nil) }

// writeNotify records jr, sending it at once to the nodes named (see
// mesh.PutOptions.Notify).
func (j *Runner) writeNotify(jr catalog.Job, notify []string) {
	var deps []mesh.Dep
	if ref, ok := j.cfg.Catalog.Placements.Ref(jr.Key); ok {
		deps = append(deps, ref)
	}
	switch _, err := j.cfg.Catalog.Jobs.PutNotify(jr, notify, deps...); {
	case errors.Is(err, mesh.ErrSuperseded):
		// A run of a later epoch (placed elsewhere since), or this run's
		// own outcome, is recorded already: this run says nothing more.
		j.log.Info("not recording training job: a later run is recorded", "job", jr.Name, "epoch", jr.Epoch, "state", jr.State)
	case err != nil:
		j.log.Warn("recording training job", "job", jr.Name, "err", err)
	}
}

// Logs returns rank's output of a job run here: live while it runs, from
// its log file after.
func (j *Runner) Logs(name string, rank int) (string, error) {
	j.mu.Lock()
	var run *trainer.Run
	if lj := j.runs[policy.KindTrainingJob+"/"+name]; lj != nil {
		run = lj.run
	}
	j.mu.Unlock()
	if run != nil {
		if ms := run.Job().Members; rank < len(ms) && (run.Job().Node == "" || ms[rank].Node == run.Job().Node) {
			return run.Log(rank), nil
		}
	}
	// Before this start: the newest run's log file.
	files, _ := filepath.Glob(filepath.Join(j.cfg.DataDir, "jobs", name+"-*", fmt.Sprintf("rank-%d.log", rank)))
	if len(files) == 0 {
		return "", fmt.Errorf("%w: no log of job %s rank %d on this node", mesh.ErrNotFound, name, rank)
	}
	sort.Slice(files, func(i, k int) bool { return epochOf(files[i]) < epochOf(files[k]) })
	b, err := os.ReadFile(files[len(files)-1])
	return string(b), err
}

// epochOf reads the epoch from a job directory's log path (".../name-7/rank-0.log").
func epochOf(path string) int {
	d := filepath.Base(filepath.Dir(path))
	n, _ := strconv.Atoi(d[strings.LastIndexByte(d, '-')+1:])
	return n
}

// policyDoc returns an applied policy's parsed document.
func (j *Runner) policyDoc(key string) (*policy.Document, error) {
	rec, err := j.cfg.Catalog.Policies.Value(key)
	if err != nil {
		return nil, err
	}
	return rec.Document()
}
