package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mesh/strata/agent"
	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/trainer"
)

// The demo's story: a screening model trained on the Wisconsin diagnostic
// breast cancer data serves at two clinics (the edge sites). The clinic in
// edge-a replaces its imaging device, which measures texture and area
// higher; the mesh notices the drift, retrains on the archive re-measured
// with the new device (published as a new dataset version), and rolls the
// new model out, edge-a first.

// demoPolicy serves the model at each clinic and says how to watch and
// retrain it.
const demoPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: screening}
spec:
  model: {name: screening, version: "1"}
  perClientSite: true
  resources: {cpu: 250m, memory: 128Mi}
  latency: {p99: 20ms, clients: [edge-a, edge-b]}
  tiers: [edge, onprem, cloud]
  rollout: {strategy: canary, canaryRequests: 300, maxErrorRate: 0.01}
  drift:
    detector: ks
    window: 300
    reference: training
    stream: {falseAlarmEvery: 1000000}
  retrain:
    gang: {nodes: 1}
    resources: {cpu: "1", memory: 1Gi, gpus: {count: 1}}
    data: [{dataset: cases}]
    builtin: {algorithm: logreg, label: benign, epochs: 40}
`

// demoFeatures are the sklearn names of the dataset's first ten columns
// (the per-case means), the model's inputs.
var demoFeatures = []string{"mean_radius", "mean_texture", "mean_perimeter", "mean_area", "mean_smoothness",
	"mean_compactness", "mean_concavity", "mean_concave_points", "mean_symmetry", "mean_fractal_dimension"}

// The new device at edge-a measures these features higher.
var demoShift = map[int]float64{1: 1.3, 3: 1.25}

type demoData struct {
	rows   [][]float64
	labels []int
	source string
}

// loadDemoData reads sklearn's breast_cancer.csv: a header line
// "569,30,malignant,benign", then 30 features and the target (0 malignant,
// 1 benign) per line.
func loadDemoData(path string) (demoData, error) {
	f, err := os.Open(path)
	if err != nil {
		return demoData{}, fmt.Errorf("%w (make setup extracts it from Debian's python3-sklearn; or pass --data)", err)
	}
	defer f.Close()
	d := demoData{source: path}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			continue
		}
		cols := strings.Split(strings.TrimSpace(sc.Text()), ",")
		if len(cols) != 31 {
			return d, fmt.Errorf("%s:%d: %d columns, want 31", path, line, len(cols))
		}
		row := make([]float64, len(demoFeatures))
		for i := range row {
			if row[i], err = strconv.ParseFloat(cols[i], 64); err != nil {
				return d, fmt.Errorf("%s:%d: %w", path, line, err)
			}
		}
		y, err := strconv.Atoi(cols[30])
		if err != nil {
			return d, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		d.rows, d.labels = append(d.rows, row), append(d.labels, y)
	}
	if len(d.rows) == 0 {
		return d, fmt.Errorf("%s: no rows", path)
	}
	return d, sc.Err()
}

func shifted(row []float64) []float64 {
	out := slices.Clone(row)
	for i, f := range demoShift {
		out[i] *= f
	}
	return out
}

// dataset is the archive as a device measures it.
func (d demoData) dataset(shift bool) *trainer.Dataset {
	ds := trainer.NewDataset(demoFeatures, "benign")
	for i, r := range d.rows {
		if shift {
			r = shifted(r)
		}
		_ = ds.Add(r, d.labels[i])
	}
	return ds
}

// story runs the demo against a running dev mesh and prints it.
type story struct {
	out    io.Writer
	c      *client.Client
	agents []*agent.Agent
	data   demoData
	start  time.Time

	mu     sync.Mutex
	events []api.Event
}

func (s *story) say(format string, args ...any) { s.sayAt(time.Now(), format, args...) }

// sayAt prints a line stamped with the seconds since the story began.
func (s *story) sayAt(t time.Time, format string, args ...any) {
	fmt.Fprintf(s.out, "[%6.2fs] %s\n", t.Sub(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// pushModel pushes a model with its drift reference, as `strata push
// --reference` does.
func (s *story) pushModel(ctx context.Context, name, version string, model, ref []byte) (string, error) {
	m, err := s.c.Push(ctx, client.PushSpec{Name: name, Version: version, Reference: ref}, bytes.NewReader(model), int64(len(model)))
	return m.Digest, err
}

func (s *story) pushDataset(ctx context.Context, version string, ds *trainer.Dataset) error {
	var b bytes.Buffer
	if err := ds.WriteCSV(&b); err != nil {
		return err
	}
	_, err := s.c.Push(ctx, client.PushSpec{Kind: api.KindDataset, Name: "cases", Version: version}, &b, int64(b.Len()))
	return err
}

// servingAt returns, per site, the node serving model@version.
func (s *story) servingAt(ref string) map[string]mesh.Node {
	out := map[string]mesh.Node{}
	for _, n := range s.agents[0].Mesh().Nodes() {
		if n.Status == mesh.StatusAlive && slices.Contains(n.Models, ref) {
			out[n.Site] = n
		}
	}
	return out
}

func (s *story) waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not happen within %s (see strata placements, strata drift, strata jobs)", what, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// clinic sends cases to one site's serving node until stopped.
type clinic struct {
	site         string
	api          string
	shift        atomic.Bool
	sent, failed atomic.Int64
	beforeShift  atomic.Int64 // unshifted requests answered
	lastErr      atomic.Value
	stop         chan struct{}
	done         chan struct{}
}

func (c *clinic) run(d demoData, seed uint64) {
	defer close(c.done)
	r := rand.New(rand.NewPCG(seed, 99))
	hc := &http.Client{Timeout: 10 * time.Second}
	tick := time.NewTicker(4 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		i := r.IntN(len(d.rows))
		row := slices.Clone(d.rows[i])
		sh := c.shift.Load()
		if sh {
			row = shifted(row)
		}
		in := make([]float32, len(row))
		for j, v := range row {
			in[j] = float32(v * (1 + 0.01*r.NormFloat64())) // measurement noise
		}
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, len(in)}, "datatype": "FP32", "data": in}}})
		resp, err := hc.Post("http://"+c.api+"/v2/models/screening/infer", "application/json", bytes.NewReader(body))
		c.sent.Add(1)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		if err != nil {
			c.failed.Add(1)
			c.lastErr.Store(err.Error())
			continue
		}
		if !sh {
			c.beforeShift.Add(1)
		}
	}
}

// runStory tells the closed loop: train, serve, drift, retrain, canary,
// promote. It returns an error when a step does not happen or a request
// failed.
func runStory(ctx context.Context, stdout io.Writer, c *client.Client, agents []*agent.Agent, dataPath string) error {
	s := &story{out: stdout, c: c, agents: agents, start: time.Now()}
	d, err := loadDemoData(dataPath)
	if err != nil {
		return fmt.Errorf("the demo dataset: %w", err)
	}
	s.data = d

	// Follow the mesh's events from the first agent.
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	go func() {
		_ = followEvents(evCtx, s.c, -1, func(ev api.Event, _ []byte) bool {
			s.mu.Lock()
			s.events = append(s.events, ev)
			s.mu.Unlock()
			s.tell(ev)
			return true
		})
	}()

	res, err := trainer.Train(ctx, d.dataset(false), trainer.Config{Kind: trainer.KindLogistic, Seed: 1, Epochs: 40})
	if err != nil {
		return fmt.Errorf("training the first model: %w", err)
	}
	ref, _ := json.Marshal(res.Reference)
	digest, err := s.pushModel(ctx, "screening", "1", res.Model, ref)
	if err != nil {
		return fmt.Errorf("pushing the first model: %w", err)
	}
	s.say("trained screening@1 on %d cases of the Wisconsin breast cancer data (%s): logistic regression on %d features, holdout accuracy %.3f; signed and pushed (sha256:%.12s) with its drift reference",
		len(d.rows), d.source, len(demoFeatures), res.Accuracy, digest)
	if err := s.pushDataset(ctx, "1", d.dataset(false)); err != nil {
		return fmt.Errorf("pushing the dataset: %w", err)
	}
	s.say("published dataset cases@1 (the labelled archive)")
	if _, err := s.c.Apply(ctx, "screening.yaml", []byte(demoPolicy)); err != nil {
		return fmt.Errorf("applying the demo policy: %w", err)
	}
	s.say("applied InferenceService/screening: a replica per clinic (edge-a, edge-b) within 20ms; drift: a per-row CUSUM beside ks over a 300-sample window; retrain: builtin logreg on dataset cases, 1 GPU; rollout: canary for 300 requests")
	var at map[string]mesh.Node
	if err := s.waitFor(ctx, 90*time.Second, "screening@1 serving at both clinics", func() bool {
		at = s.servingAt("screening@1")
		return at["edge-a"].Name != "" && at["edge-b"].Name != ""
	}); err != nil {
		return err
	}
	s.say("screening@1 serving on %s (edge-a) and %s (edge-b)", at["edge-a"].Name, at["edge-b"].Name)

	clinics := map[string]*clinic{}
	for i, site := range []string{"edge-a", "edge-b"} {
		c := &clinic{site: site, api: at[site].Addrs.API, stop: make(chan struct{}), done: make(chan struct{})}
		clinics[site] = c
		go c.run(d, uint64(i+1))
	}
	a, b := clinics["edge-a"], clinics["edge-b"]
	stopTraffic := func() {
		for _, c := range clinics {
			select {
			case <-c.stop:
			default:
				close(c.stop)
			}
			<-c.done
		}
	}
	defer stopTraffic()
	s.say("traffic: each clinic sends cases (with 1%% measurement noise) to its replica")
	if err := s.waitFor(ctx, 60*time.Second, "600 cases at edge-a", func() bool { return a.sent.Load() >= 600 }); err != nil {
		return err
	}
	if alarms := s.count("drift.alarm"); alarms > 0 {
		s.say("note: %d drift alarm(s) before any shift (false alarms)", alarms)
	}
	if err := s.pushDataset(ctx, "2", d.dataset(true)); err != nil {
		return fmt.Errorf("pushing the re-measured archive: %w", err)
	}
	// The retrain reads the newest cases on the node it runs on: the story
	// shifts the inputs once every agent knows cases@2, as a site would
	// publish its new archive well before the drift it explains.
	if err := s.waitFor(ctx, 30*time.Second, "cases@2 known on every agent", func() bool {
		for _, ag := range s.agents {
			list, err := client.New(ag.APIAddr()).Artifacts(ctx, api.KindDataset)
			if err != nil || !slices.ContainsFunc(list, func(x api.Artifact) bool { return x.Name == "cases" && x.Version == "2" }) {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	a.shift.Store(true)
	shiftAt := time.Now()
	s.say("edge-a replaced its imaging device: it measures mean texture +30%% and mean area +25%%; the archive re-measured on it is published as cases@2")

	var rr *api.Rollout
	if err := s.waitFor(ctx, 120*time.Second, "the rollout to end", func() bool {
		rr = s.rollout()
		return rr != nil && rr.Ended()
	}); err != nil {
		return err
	}
	canaryAt := time.Now()
	for _, st := range rr.Steps {
		if st.Stage == api.StageCanary {
			canaryAt = st.Time
		}
	}
	if rr.Stage != api.StagePromoted {
		return fmt.Errorf("the rollout ended %s: %s", rr.Stage, rr.Message)
	}
	if err := s.waitFor(ctx, 30*time.Second, "screening@"+rr.To+" serving at both clinics", func() bool {
		at := s.servingAt("screening@" + rr.To)
		return at["edge-a"].Name != "" && at["edge-b"].Name != ""
	}); err != nil {
		return err
	}
	s.say("screening@%s serves at both clinics; edge-b gets the new device too", rr.To)
	b.shift.Store(true)
	time.Sleep(2 * time.Second)
	stopTraffic()
	stopEvents()

	// The figures.
	jctx, cancel := context.WithTimeout(ctx, readTimeout)
	job, _ := s.c.Job(jctx, rr.Job)
	cancel()
	training := job.Finished.Sub(job.Started)
	trig := rr.Trigger
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "figures:")
	if trig != nil {
		fmt.Fprintf(stdout, "  detection delay:         %d samples after the shift at %s (%s %s, window 300)\n", trig.Samples-a.beforeShift.Load(), trig.Node, trig.Detector, strings.Join(trig.Drifted, ", "))
		fmt.Fprintf(stdout, "  drift → canary serving:  %.1fs after the alarm (training %.1fs, control plane %.1fs); %.1fs after the shift\n",
			canaryAt.Sub(trig.At).Seconds(), training.Seconds(), (canaryAt.Sub(trig.At) - training).Seconds(), canaryAt.Sub(shiftAt).Seconds())
	}
	fmt.Fprintf(stdout, "  canary:                  %d requests on %s, %d failed, then promoted\n", rr.Served, strings.Join(rr.CanaryNodes, ","), rr.Failed)
	fmt.Fprintf(stdout, "  new model:               screening@%s, holdout accuracy %.3f (trained by %s on %s)\n", rr.To, job.Accuracy, job.Name, job.Node)
	sent, failed := a.sent.Load()+b.sent.Load(), a.failed.Load()+b.failed.Load()
	fmt.Fprintf(stdout, "  requests:                %d sent, %d failed\n", sent, failed)
	// Where the new model came from, as `strata lineage` tells it.
	lctx, cancel := context.WithTimeout(ctx, readTimeout)
	chain, err := s.c.Lineage(lctx, "screening", rr.To)
	cancel()
	if err != nil {
		return fmt.Errorf("lineage of screening@%s: %w", rr.To, err)
	}
	fmt.Fprintf(stdout, "\nstrata lineage screening:%s\n", rr.To)
	writeLineage(stdout, chain, time.Local)
	if failed > 0 {
		msg, _ := a.lastErr.Load().(string)
		if msg == "" {
			msg, _ = b.lastErr.Load().(string)
		}
		return fmt.Errorf("%d requests failed (last: %s)", failed, msg)
	}
	return nil
}

func (s *story) count(typ string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ev := range s.events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func (s *story) rollout() *api.Rollout {
	ps, err := s.placements()
	if err != nil {
		return nil
	}
	for _, p := range ps {
		if p.Policy == "InferenceService/screening" {
			return p.Rollout
		}
	}
	return nil
}

// placements asks the first agent for every policy's placement.
func (s *story) placements() ([]api.PlacementStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	return s.c.Placements(ctx)
}

// tell prints the events of the loop as this agent learns of them, each
// stamped with when it happened (records from different agents can arrive
// in another order than they were written).
func (s *story) tell(ev api.Event) {
	switch {
	case ev.Type == "drift.alarm", strings.HasPrefix(ev.Type, "rollout."), ev.Type == "job.succeeded", ev.Type == "job.failed":
		s.sayAt(ev.Time, "%-19s %s", ev.Type, ev.Message)
	case ev.Type == "placement.pending" && strings.HasPrefix(ev.Policy, "TrainingJob/"):
		s.sayAt(ev.Time, "%-19s %s", ev.Type, s.why(ev.Policy))
	}
}

// why explains where a training job was placed: the node, its fabric and
// data, and what the others were rejected for.
func (s *story) why(key string) string {
	ps, err := s.placements()
	if err != nil {
		return key
	}
	for _, p := range ps {
		if p.Policy != key || len(p.Nodes) == 0 {
			continue
		}
		n, err := s.agents[0].Mesh().Node(p.Nodes[0].Name)
		if err != nil {
			break
		}
		var rej []string
		for r, c := range p.Rejected {
			rej = append(rej, fmt.Sprintf("%d %s", c, r))
		}
		sort.Strings(rej)
		near := "does not hold dataset cases"
		if slices.Contains(n.Locality.Datasets, "cases") {
			near = "holds dataset cases"
		}
		return fmt.Sprintf("%s placed on %s (%s, %s, fabric %s, %d free GPU(s)); it %s; others: %s",
			key, n.Name, n.Tier, n.Site, dash(n.Capabilities.Fabric), freeGPUs(n), near, dash(strings.Join(rej, ", ")))
	}
	return key
}

func freeGPUs(n mesh.Node) int {
	used := 0
	for _, as := range n.Assignments {
		if as.Accepted {
			used += len(as.GPUs)
		}
	}
	return len(n.Capabilities.GPUs) - used
}
