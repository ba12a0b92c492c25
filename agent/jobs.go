package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer"
)

// Labels on a TrainingJob that register its output model: the model file
// the job leaves in STRATA_OUTPUT_DIR becomes this name and version, signed
// by the agent that ran rank 0.
const (
	LabelOutputModel   = "strata.io/output-model"
	LabelOutputVersion = "strata.io/output-version"
	// LabelRetrainOf marks a job the mesh started to retrain a service.
	LabelRetrainOf = "strata.io/retrain-of"
)

// jobs returns every job record, newest first.
func (a *Agent) jobs() []JobRecord {
	out, err := a.cat.Jobs.Values()
	a.decodeErrors(err)
	sort.Slice(out, func(i, k int) bool {
		if !out[i].Created.Equal(out[k].Created) {
			return out[i].Created.After(out[k].Created)
		}
		return out[i].Name < out[k].Name
	})
	return out
}

// job returns one job's record.
func (a *Agent) job(name string) (JobRecord, error) {
	return a.cat.Jobs.Value(name)
}

// jobRunner starts the training jobs whose rank 0 this node admitted and
// records their runs in the catalog.
type jobRunner struct {
	a  *Agent
	mu sync.Mutex
	// runs are the jobs started here, by policy key.
	runs map[string]*localJob
}

type localJob struct {
	epoch  uint64
	cancel context.CancelFunc
	run    *trainer.Run // nil until launched
	dir    string
}

func newJobRunner(a *Agent) *jobRunner { return &jobRunner{a: a, runs: map[string]*localJob{}} }

func (j *jobRunner) loop(ctx context.Context) {
	for {
		changed := j.a.mesh.Changed()
		j.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(2 * time.Second):
		}
	}
}

func (j *jobRunner) reconcile(ctx context.Context) {
	a := j.a
	if a.noJobs.Load() {
		return
	}
	recs := a.readyPlacements()
	mine := map[string]PlacementRecord{}
	for _, as := range a.mesh.Local().Assignments {
		if !as.Accepted || !strings.HasPrefix(as.Key, policy.KindTrainingJob+"/") {
			continue
		}
		rec, ok := recs[as.Key]
		if !ok || rec.Epoch != as.Epoch || len(rec.Nodes) == 0 || rankZero(rec).Name != a.cfg.Name {
			continue
		}
		mine[as.Key] = rec
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	// Jobs placed elsewhere or deleted stop here.
	for key, lj := range j.runs {
		if rec, ok := mine[key]; !ok || rec.Epoch != lj.epoch {
			if lj.cancel != nil {
				lj.cancel()
				lj.cancel = nil
				a.log.Info("stopping training job: no longer placed here", "job", key)
			}
		}
	}
	for key, rec := range mine {
		if lj, ok := j.runs[key]; ok && lj.epoch == rec.Epoch {
			continue
		}
		if prev, err := a.job(rec.Name); err == nil && prev.Generation == rec.Generation && prev.Terminal() {
			continue // ran to its end already; a new generation runs again
		}
		jctx, cancel := context.WithCancel(ctx)
		lj := &localJob{epoch: rec.Epoch, cancel: cancel}
		j.runs[key] = lj
		go j.start(jctx, rec, lj)
	}
}

func rankZero(rec PlacementRecord) PlacedNode {
	best := rec.Nodes[0]
	for _, n := range rec.Nodes {
		if n.Rank < best.Rank {
			best = n
		}
	}
	return best
}

// start runs one job to its end and records every step.
func (j *jobRunner) start(ctx context.Context, rec PlacementRecord, lj *localJob) {
	a := j.a
	defer lj.cancel()
	doc, err := a.policyDoc(rec.Key)
	jr := JobRecord{
		Name: rec.Name, Key: rec.Key, Generation: rec.Generation, Epoch: rec.Epoch, State: JobPending,
		Node: a.cfg.Name, Created: time.Now().UTC(),
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
	jr.RetrainOf = doc.Metadata.Labels[LabelRetrainOf]
	jr.Launcher = cmpOr(spec.Launcher, "builtin")
	if len(spec.Command) > 0 && spec.Launcher == "" {
		jr.Launcher = "exec"
	}
	j.write(jr)
	if d := time.Duration(spec.MaxDuration); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	dir := filepath.Join(a.cfg.DataDir, "jobs", fmt.Sprintf("%s-%d", rec.Name, rec.Epoch))
	lj.dir = dir
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
	jr.State, jr.Started = JobRunning, time.Now().UTC()
	jr.Members = run.Status().Members
	j.write(jr)
	a.log.Info("training job running", "job", jr.Name, "launcher", jr.Launcher, "nodes", strings.Join(jr.Nodes, ","))
	err = run.Wait(context.WithoutCancel(ctx))
	st := run.Status()
	jr.Members, jr.Attempt = st.Members, st.Attempt
	if logs := run.Log(0); logs != "" {
		_ = os.WriteFile(filepath.Join(dir, "rank-0.log"), []byte(logs), 0o600)
	}
	if err == nil {
		err = j.register(ctx, &jr, doc, job.OutputDir)
	}
	j.finish(jr, err)
}

// prepare pulls the job's datasets into dir/data and builds the launcher.
func (j *jobRunner) prepare(ctx context.Context, jr JobRecord, spec *policy.TrainingJobSpec, dir string) (trainer.Job, trainer.Launcher, error) {
	a := j.a
	job := trainer.Job{
		ID: jr.Name, DatasetDir: filepath.Join(dir, "data"), OutputDir: filepath.Join(dir, "out"),
		Env: spec.Env, Retries: spec.Retries, Dir: dir,
	}
	for _, d := range []string{job.DatasetDir, job.OutputDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return job, nil, err
		}
	}
	for _, d := range spec.Data {
		if err := j.fetchData(ctx, d, job.DatasetDir); err != nil {
			return job, nil, err
		}
	}
	self := a.mesh.Local()
	host, _, _ := net.SplitHostPort(self.Addrs.Gossip)
	var gpus []int
	for _, as := range self.Assignments {
		if as.Key == jr.Key {
			gpus = as.GPUs
		}
	}
	job.Members = []trainer.Member{{Node: a.cfg.Name, Addr: host, GPUs: gpus}}
	switch jr.Launcher {
	case "builtin":
		cfg := trainer.Config{Kind: trainer.KindLogistic, Seed: 1}
		if b := spec.Builtin; b != nil {
			if b.Algorithm == "mlp" {
				cfg.Kind = trainer.KindMLP
			}
			cfg.Hidden, cfg.Epochs, cfg.LearningRate = b.Hidden, b.Epochs, b.LearningRate
			if b.Label != "" {
				job.Env = mergeEnv(job.Env, trainer.LabelEnv, b.Label)
			}
		}
		job.Train = &cfg
		return job, &trainer.Builtin{Logger: a.log}, nil
	case "exec":
		if spec.Gang.Nodes > 1 {
			return job, nil, errors.New("not yet: exec gangs spanning several nodes (each node would run its own ranks); use gang.nodes: 1 with every GPU on one host")
		}
		job.Command = append(append([]string(nil), spec.Command...), spec.Args...)
		return job, trainer.NewExec(trainer.ExecOptions{Logger: a.log}), nil
	}
	return job, nil, fmt.Errorf("launcher %q: want builtin or exec", jr.Launcher)
}

func mergeEnv(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for ek, ev := range env {
		out[ek] = ev
	}
	return out
}

// fetchData pulls one data reference (when not held) and copies its bytes
// into dir, named after the artifact (datasets get ".csv" unless their name
// has an extension).
func (j *jobRunner) fetchData(ctx context.Context, d policy.DataRef, dir string) error {
	a := j.a
	var m storage.Manifest
	var err error
	if d.Artifact != "" {
		m, err = a.art.ByDigest(d.Artifact, storage.KindDataset, storage.KindModel)
	} else {
		name, version, _ := strings.Cut(d.Dataset, ":")
		m, err = a.art.Lookup(storage.KindDataset, name, version)
	}
	if err != nil {
		return fmt.Errorf("data %s%s: %w", d.Dataset, d.Artifact, err)
	}
	if !a.art.Enabled() {
		return ErrNoDataPlane
	}
	if !a.art.Store().Has(m.Digest) {
		if _, err := a.art.Pull(ctx, m, nil); err != nil {
			return fmt.Errorf("pulling %s: %w", m.Ref(), err)
		}
	}
	src, err := a.art.Store().OpenBlob(m)
	if err != nil {
		return err
	}
	defer src.Close()
	name := m.Name
	if filepath.Ext(name) == "" && m.Kind == storage.KindDataset {
		name += ".csv"
	}
	dst, err := os.Create(filepath.Join(dir, filepath.Base(name)))
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Close())
}

// register publishes the model a finished job left in out, when the job's
// labels name the output model.
func (j *jobRunner) register(ctx context.Context, jr *JobRecord, doc *policy.Document, out string) error {
	a := j.a
	name, version := doc.Metadata.Labels[LabelOutputModel], doc.Metadata.Labels[LabelOutputVersion]
	if name == "" {
		return nil
	}
	model := filepath.Join(out, trainer.ModelFile)
	if _, err := os.Stat(model); err != nil {
		return fmt.Errorf("the job succeeded but left no %s in STRATA_OUTPUT_DIR: %w", trainer.ModelFile, err)
	}
	if version == "" {
		version = a.art.NextVersion(name, "")
	}
	meta := map[string]string{MetaJob: jr.Name}
	if b, err := os.ReadFile(filepath.Join(out, trainer.ReferenceFile)); err == nil {
		meta[MetaReference] = string(b)
	}
	if b, err := os.ReadFile(filepath.Join(out, trainer.MetricsFile)); err == nil {
		var mt trainer.Metrics
		if json.Unmarshal(b, &mt) == nil {
			jr.Accuracy = mt.Accuracy
			meta[MetaAccuracy] = strconv.FormatFloat(mt.Accuracy, 'f', 4, 64)
			meta[MetaFeatures] = strings.Join(mt.Features, ",")
		}
	}
	m, err := a.art.Publish(ctx, model, storage.PublishSpec{Kind: storage.KindModel, Name: name, Version: version, Metadata: meta})
	if err != nil {
		return fmt.Errorf("registering %s@%s: %w", name, version, err)
	}
	jr.Model, jr.Version, jr.Digest = m.Name, m.Version, m.Digest
	a.log.Info("training job registered a model", "job", jr.Name, "model", m.Ref(), "accuracy", jr.Accuracy)
	return nil
}

func (j *jobRunner) finish(jr JobRecord, err error) {
	a := j.a
	jr.Finished = time.Now().UTC()
	if err != nil {
		jr.State, jr.Error = JobFailed, err.Error()
		a.log.Warn("training job failed", "job", jr.Name, "err", err)
	} else {
		jr.State = JobSucceeded
		a.log.Info("training job succeeded", "job", jr.Name)
	}
	j.write(jr)
}

func (j *jobRunner) write(jr JobRecord) {
	var deps []mesh.Dep
	if ref, ok := j.a.cat.Placements.Ref(jr.Key); ok {
		deps = append(deps, ref)
	}
	if _, err := j.a.cat.Jobs.Put(jr, deps...); err != nil {
		j.a.log.Warn("recording training job", "job", jr.Name, "err", err)
	}
}

// logs returns rank's output of a job run here: live while it runs, from
// its log file after.
func (j *jobRunner) logs(name string, rank int) (string, error) {
	j.mu.Lock()
	var run *trainer.Run
	if lj := j.runs[policy.KindTrainingJob+"/"+name]; lj != nil {
		run = lj.run
	}
	j.mu.Unlock()
	if run != nil {
		return run.Log(rank), nil
	}
	// Before this start: the newest run's log file.
	files, _ := filepath.Glob(filepath.Join(j.a.cfg.DataDir, "jobs", name+"-*", fmt.Sprintf("rank-%d.log", rank)))
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
