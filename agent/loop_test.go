package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer"
)

const loopPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: scorer}
spec:
  model: {name: scorer, version: "1"}
  perClientSite: true
  resources: {cpu: 250m, memory: 64Mi}
  # 60ms, not tighter: under a -race run beside other packages' tests,
  # RTT estimates have read 30ms on loopback, and no node would qualify.
  latency: {p99: 60ms, clients: [edge-a, edge-b]}
  rollout: {strategy: canary, canaryRequests: 40}
  drift: {detector: ks, window: 200, features: [a, b]}  # alarm at a corrected p-value of 0.001
  retrain:
    resources: {cpu: "1", memory: 1Gi, gpus: {count: 1}}
    data: [{dataset: cases}]
    builtin: {algorithm: logreg, label: y, epochs: 10}
`

// loopData draws labelled rows; shift moves feature a (as a recalibrated
// sensor would), and the label follows the shifted world.
func loopData(r *rand.Rand, n int, shift float64) *trainer.Dataset {
	ds := trainer.NewDataset([]string{"a", "b", "c"}, "y")
	for range n {
		a, b, c := r.NormFloat64()+shift, r.NormFloat64(), r.NormFloat64()
		y := 0
		if a-shift+0.5*b > 0 {
			y = 1
		}
		if err := ds.Add([]float64{a, b, c}, y); err != nil {
			panic(err)
		}
	}
	return ds
}

// publishFile publishes bytes through an agent, as `strata push` does.
func publishFile(t testing.TB, a *Agent, spec storage.PublishSpec, b []byte) storage.Manifest {
	t.Helper()
	p := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := a.art.Publish(context.Background(), p, spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// loopRun is one run of the closed loop on a four-agent mesh.
type loopRun struct {
	agents             []*Agent
	edgeA, edgeB, gpu  *Agent
	failed             int
	evc                chan Event
	shiftAt, servingAt time.Time // the shift at edge-a; version 2 first seen serving there
	shiftedRows        int       // rows sent to edge-a since the shift
	backAt             time.Time // edge-a's inputs back unshifted
	mixAt              time.Time // a tenth of edge-b's rows from another class
	mixB               float64
}

// runLoop starts a four-agent mesh where a model serves at both edge
// sites, sends unshifted traffic, then shifts edge-a's inputs and keeps
// sending until version 2 serves at both edges.
func runLoop(tb testing.TB) *loopRun {
	return runLoopUntil(tb, loopPolicy, "version 2 at both edges", func(r *loopRun) bool {
		return slices.Contains(r.edgeA.mesh.Local().Models, "scorer@2") && slices.Contains(r.edgeB.mesh.Local().Models, "scorer@2")
	})
}

// runLoopUntil is runLoop with another policy, shifting until done.
func runLoopUntil(tb testing.TB, pol, what string, done func(*loopRun) bool) *loopRun {
	return runLoopWith(tb, loopOpts{policy: pol, what: what, done: done, casesShift: 2})
}

// loopOpts shape a run of the closed loop.
type loopOpts struct {
	policy, what string
	done         func(*loopRun) bool
	// casesShift is the shift of the "cases" dataset the retrain reads:
	// 2 is the drifted world, 0 the world the model was trained for.
	casesShift float64
	// feedback posts ground truth for every shifted row sent to edge-a.
	feedback bool
	// rate paces the shifted traffic at rows per second to each edge;
	// 0 sends 20 rows to each per round as fast as they are answered.
	rate float64
	// backDone, when set, sends edge-a's inputs back unshifted once done
	// holds, until backDone does (backWhat names it).
	backDone func(*loopRun) bool
	backWhat string
	// mixFor, when set, then sends a tenth of edge-b's rows from another
	// class for that long.
	mixFor time.Duration
}

// runLoopWith runs the closed loop as opts say.
func runLoopWith(tb testing.TB, opts loopOpts) *loopRun {
	pol, what, done := opts.policy, opts.what, opts.done
	lib := ortLib(tb)
	keys, err := NewDevPKI()
	if err != nil {
		tb.Fatal(err)
	}
	agents := devMesh(tb, 4, func(c *Config) { c.PKI, c.ORTLibrary = keys, lib })
	run := &loopRun{agents: agents, gpu: agents[3]}
	gpu := run.gpu
	if gpu.mesh.Local().Tier != "onprem" {
		tb.Fatalf("agent 3 is %s, want the onprem GPU node", gpu.mesh.Local().Tier)
	}
	var unsub func()
	_, run.evc, unsub = agents[1].events.Subscribe(0)
	tb.Cleanup(unsub)

	r := rand.New(rand.NewPCG(3, 4))
	res, err := trainer.Train(context.Background(), loopData(r, 2000, 0), trainer.Config{Kind: trainer.KindLogistic, Seed: 1})
	if err != nil {
		tb.Fatal(err)
	}
	ref, _ := json.Marshal(res.Reference)
	publishFile(tb, gpu, storage.PublishSpec{Kind: storage.KindModel, Name: "scorer", Version: "1", Metadata: map[string]string{MetaReference: string(ref)}}, res.Model)
	var csv bytes.Buffer
	if err := loopData(r, 2000, opts.casesShift).WriteCSV(&csv); err != nil {
		tb.Fatal(err)
	}
	publishFile(tb, gpu, storage.PublishSpec{Kind: storage.KindDataset, Name: "cases", Version: "1"}, csv.Bytes())
	if code, body := post(tb, gpu.Handler(), http.MethodPost, "/v1/policies?file=loop.yaml", []byte(pol)); code != http.StatusOK {
		tb.Fatalf("apply = %d %s", code, body)
	}

	serving := func(a *Agent, version string) bool {
		return slices.Contains(a.mesh.Local().Models, "scorer@"+version)
	}
	meshtest.WaitFor(tb, 60*time.Second, "scorer@1 at both edge sites", func() bool {
		run.edgeA, run.edgeB = nil, nil
		for _, a := range agents {
			if serving(a, "1") && a.cfg.Site == "edge-a" {
				run.edgeA = a
			}
			if serving(a, "1") && a.cfg.Site == "edge-b" {
				run.edgeB = a
			}
		}
		return run.edgeA != nil && run.edgeB != nil
	})
	edgeA, edgeB := run.edgeA, run.edgeB

	var truth api.FeedbackRequest
	// sendN sends n rows to a in one request.
	sendN := func(a *Agent, shift float64, n int) {
		tb.Helper()
		rows := make([]float32, 0, 3*n)
		for range n {
			row := []float32{float32(r.NormFloat64() + shift), float32(r.NormFloat64()), float32(r.NormFloat64())}
			if a == run.edgeB && run.mixB > 0 && r.Float64() < run.mixB {
				row[0] += 3 // a row of another class, 3σ away
			}
			rows = append(rows, row...)
			if opts.feedback && a == run.edgeA && (shift != 0 || !run.backAt.IsZero()) {
				// The label follows the shifted world (loopData's rule).
				y := 0
				if float64(row[0])-shift+0.5*float64(row[1]) > 0 {
					y = 1
				}
				truth.Inputs = append(truth.Inputs, []float64{float64(row[0]), float64(row[1]), float64(row[2])})
				truth.Labels = append(truth.Labels, json.RawMessage(strconv.Itoa(y)))
			}
		}
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{n, 3}, "datatype": "FP32", "data": rows}}})
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v2/models/scorer/infer", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			run.failed++
			tb.Errorf("request to %s = %d %s", a.Name(), rec.Code, rec.Body.String())
		}
		if a == run.edgeA && !run.shiftAt.IsZero() {
			run.shiftedRows += n
		}
	}
	send := func(a *Agent, shift float64) { sendN(a, shift, 1) }

	// Unshifted traffic everywhere: no alarm.
	for range 400 {
		send(edgeA, 0)
		send(edgeB, 0)
	}
	// The monitor takes rows off a queue: wait until edge-a's record
	// counts all 400, then it must show no alarm.
	var before DriftRecord
	meshtest.WaitFor(tb, 15*time.Second, "edge-a's monitor to count the 400 unshifted samples", func() bool {
		for _, d := range edgeA.driftRecords() {
			if d.Node == edgeA.Name() && d.Seen >= 400 {
				before = d
				return true
			}
		}
		return false
	})
	if before.Alarmed || before.Error != "" {
		tb.Fatalf("drift record before any shift: %+v", before)
	}
	// The shift at edge-a: traffic goes on until version 2 serves
	// everywhere (each round paced so the loop can move).
	pace := 20 * time.Millisecond
	if opts.rate > 0 {
		pace = 10 * time.Millisecond
	}
	// drive sends edge-a's traffic shifted by shiftA, and edge-b's
	// unshifted, until done.
	drive := func(shiftA float64, what string, done func(*loopRun) bool) {
		start, sent := time.Now(), 0
		deadline := start.Add(90 * time.Second)
		for !done(run) {
			if time.Now().After(deadline) {
				dumpLoop(tb, gpu)
				tb.Fatalf("no %s in 90s", what)
			}
			if opts.rate > 0 {
				// Paced: the rows due by now, in requests of up to per rows.
				per := max(1, int(opts.rate/300))
				for due := int(opts.rate * time.Since(start).Seconds()); sent < due; {
					n := min(per, due-sent)
					sendN(edgeA, shiftA, n)
					sendN(edgeB, 0, n)
					sent += n
					if run.servingAt.IsZero() && serving(edgeA, "2") {
						run.servingAt = time.Now()
					}
				}
			} else {
				for range 20 {
					send(edgeA, shiftA)
					send(edgeB, 0)
					if run.servingAt.IsZero() && serving(edgeA, "2") {
						run.servingAt = time.Now()
					}
				}
			}
			if len(truth.Inputs) > 0 {
				// The clients' ground truth for the round, posted where
				// they asked for predictions.
				body, _ := json.Marshal(truth)
				if code, b := post(tb, edgeA.Handler(), http.MethodPost, "/v1/models/scorer/feedback", body); code != http.StatusOK {
					tb.Errorf("feedback to %s = %d %s", edgeA.Name(), code, b)
				}
				truth = api.FeedbackRequest{}
			}
			// Live traffic arrives over time, not in one burst: the pause
			// between rounds is the client's pacing, not a wait for a result.
			time.Sleep(pace)
		}
	}
	run.shiftAt = time.Now()
	drive(2, what, done)
	if opts.backDone != nil {
		// Edge-a's inputs go back to the world the model was first
		// trained for.
		run.backAt = time.Now()
		drive(0, opts.backWhat, opts.backDone)
	}
	if opts.mixFor > 0 {
		// A tenth of edge-b's rows come from another class.
		run.mixAt, run.mixB = time.Now(), 0.1
		drive(0, "the mixture's end", func(*loopRun) bool { return time.Since(run.mixAt) > opts.mixFor })
	}
	return run
}

// TestDriftRetrainRollout runs the closed loop on a four-agent mesh: a
// model serves at both edge sites; inputs shift at edge-a; the monitor
// there alarms; the owner places a retrain on the GPU node, which trains
// on the dataset and registers version 2; version 2 serves at edge-a as a
// canary, then everywhere; no request fails on the way.
func TestDriftRetrainRollout(t *testing.T) {
	run := runLoop(t)
	agents, edgeA, gpu, evc := run.agents, run.edgeA, run.gpu, run.evc
	if run.failed > 0 {
		t.Errorf("%d requests failed during the loop", run.failed)
	}

	// What happened, as every agent sees it.
	rr, ok := agents[0].cat.ActiveRollout(PolicyRecord{Kind: "InferenceService", Name: "scorer", Generation: 1})
	if tr := rr.Trigger; tr == nil || tr.Node != edgeA.Name() || tr.Version != "1" || tr.Samples <= 400 || !slices.Contains(tr.Drifted, "a") || slices.Contains(tr.Drifted, "b") {
		t.Errorf("rollout trigger = %+v; want drift of feature a (not b) on %s's version 1 after the 400 unshifted samples", tr, edgeA.Name())
	}
	jobs := agents[0].jobs()
	if len(jobs) != 1 || jobs[0].State != JobSucceeded || jobs[0].Node != gpu.Name() || jobs[0].Version != "2" || jobs[0].RetrainOf != "scorer" {
		t.Errorf("jobs = %+v; want one succeeded retrain on %s registering version 2", jobs, gpu.Name())
	}
	var stages []string
	for _, s := range rr.Steps {
		stages = append(stages, s.Stage)
	}
	if !ok || !slices.Equal(stages, []string{StageRetraining, StageCanary, StagePromoted}) || !slices.Equal(rr.CanaryNodes, []string{edgeA.Name()}) || rr.Served < 40 {
		t.Errorf("rollout = %+v (stages %v); want retraining, canary on %s for 40 requests, promoted", rr, stages, edgeA.Name())
	}
	// The same story on /metrics: edge-a counted its alarm on scorer@1
	// (kept after it moved to scorer@2), and the owner one retrain that
	// succeeded and one rollout promoted.
	sum := func(series string) float64 {
		var n float64
		for _, a := range agents {
			_, b := get(t, a.Handler(), "/metrics")
			n += metricValue(b, series)
		}
		return n
	}
	_, edgeMetrics := get(t, edgeA.Handler(), "/metrics")
	if metricValue(edgeMetrics, `strata_drift_alarms_total{model="scorer",`) < 1 || metricValue(edgeMetrics, `strata_drift_rows_total{model="scorer",version="1"}`) <= 400 {
		t.Errorf("%s /metrics lacks its alarm on scorer@1 and the rows before it:\n%s", edgeA.Name(), grepLines(edgeMetrics, "strata_drift_"))
	}
	meshtest.WaitFor(t, 5*time.Second, "the owner's rollout counters", func() bool {
		return sum(`strata_rollouts_total{outcome="promoted",service="scorer"}`) == 1
	})
	if n, ok := sum(`strata_retrains_started_total{service="scorer"}`), sum(`strata_retrains_total{outcome="succeeded",service="scorer"}`); n != 1 || ok != 1 {
		t.Errorf("retrains started %v, succeeded %v across the agents; want 1 and 1", n, ok)
	}
	m, err := agents[0].art.Lookup(storage.KindModel, "scorer", "2")
	if err != nil || m.Metadata[MetaReference] == "" || m.Metadata[MetaJob] != jobs[0].Name || m.Signer == "" {
		t.Errorf("scorer@2 manifest = %+v, %v; want a signed manifest with the job's name and a drift reference", m.Metadata, err)
	}
	// The lineage, from any agent: scorer@2 was made by the retrain job
	// from scorer@1 after edge-a's drift, and is served where the
	// rollout promoted it; scorer@1 was pushed.
	rec := httptest.NewRecorder()
	agents[1].Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/lineage/scorer?version=2", nil))
	var lin LineageChain
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &lin) != nil || len(lin.Chain) != 2 {
		t.Fatalf("GET /v1/lineage/scorer?version=2 = %d %s; want a chain of 2", rec.Code, rec.Body)
	}
	l2, l1 := lin.Chain[0], lin.Chain[1]
	if l := l2.Lineage; l == nil || l.Job != jobs[0].Name || l.Parent == nil || l.Parent.Version != "1" || l.Parent.Digest == "" ||
		l.RetrainOf != "scorer" || l.Trigger == nil || l.Trigger.Node != edgeA.Name() || l.Launcher != "builtin" ||
		l.Params["seed"] != "1" || l.Metrics["accuracy"] == 0 || len(l.Nodes) != 1 || l.Nodes[0] != gpu.Name() ||
		len(l.Data) != 1 || l.Data[0].Name != "cases" || l.Data[0].Digest == "" {
		t.Errorf("scorer@2 lineage = %+v", l2.Lineage)
	}
	if len(l2.Served) == 0 || l1.Model.Version != "1" || l1.Lineage != nil || len(l1.Children) != 1 || l1.Children[0].Version != "2" {
		t.Errorf("lineage chain = %s; want scorer@2 served, then scorer@1 pushed with scorer@2 as its child", rec.Body)
	}
	// The job's log is readable from any agent.
	rec = httptest.NewRecorder()
	agents[1].Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/jobs/"+jobs[0].Name+"/logs", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "holdout accuracy") {
		t.Errorf("job log via %s = %d %q", agents[1].Name(), rec.Code, rec.Body.String())
	}
	// The events stream told the whole story. An agent sees the records
	// of different writers in the order they reach it, so the stream's
	// order can differ from the order of the steps; the steps' own times
	// (the writers' clocks, one host here) must be causal.
	// The stream scans the catalog a moment after each change: wait for
	// the last step's event.
	want := []string{"drift.alarm", "rollout.retraining", "job.succeeded", "rollout.canary", "rollout.promoted"}
	var evs []Event
	meshtest.WaitFor(t, 10*time.Second, "the events of every step", func() bool {
		for {
			select {
			case ev := <-evc:
				evs = append(evs, ev)
				continue
			default:
			}
			break
		}
		for _, w := range want {
			if !slices.ContainsFunc(evs, func(ev Event) bool { return ev.Type == w }) {
				return false
			}
		}
		return true
	})
	var got []Event
	for _, w := range want {
		i := slices.IndexFunc(evs, func(ev Event) bool { return ev.Type == w })
		if i < 0 {
			break
		}
		got = append(got, evs[i])
	}
	if len(got) != len(want) || !slices.IsSortedFunc(got, func(a, b Event) int { return a.Time.Compare(b.Time) }) {
		var msgs []string
		for _, ev := range evs {
			msgs = append(msgs, ev.Time.Format("15:04:05.000")+" "+ev.Type+" "+ev.Message)
		}
		t.Errorf("events:\n%s\nwant each of %v, in that order by time", strings.Join(msgs, "\n"), want)
	}
}

// capturePolicy is loopPolicy whose retrain captures 150 labelled rows
// from the drifted site, half the training rows.
func capturePolicy(tb testing.TB) string {
	pol := strings.Replace(loopPolicy, `    data: [{dataset: cases}]
`, `    data: [{dataset: cases}]
    capture: {rows: 150, mix: 0.5}
`, 1)
	if pol == loopPolicy {
		tb.Fatal("the retrain block was not replaced")
	}
	return pol
}

// judged is a's drift record of version once it has seen 400 rows (the
// window of 200 judged twice over).
func judged(a *Agent, version string) (DriftRecord, bool) {
	for _, d := range a.driftRecords() {
		if d.Node == a.Name() && d.Version == version && d.Seen >= 400 {
			return d, true
		}
	}
	return DriftRecord{}, false
}

// TestDriftRetrainOnCapture runs the closed loop where the retrain's own
// dataset holds only the world the model was trained for: what fixes the
// drift is the drifted site's ground truth, posted by edge-a's clients
// after the alarm and captured there. Version 2 trains on both, carries a
// reference of each (edge-a's rows for edge-a, the dataset's for the
// rest), is promoted, and no monitor alarms on it at either edge.
func TestDriftRetrainOnCapture(t *testing.T) {
	pol := capturePolicy(t)
	run := runLoopWith(t, loopOpts{policy: pol, casesShift: 0, feedback: true, what: "version 2 judged at both edges", done: func(r *loopRun) bool {
		_, a := judged(r.edgeA, "2")
		_, b := judged(r.edgeB, "2")
		return a && b
	}})
	if run.failed > 0 {
		t.Errorf("%d requests failed during the loop", run.failed)
	}
	rr, ok := run.agents[0].cat.ActiveRollout(PolicyRecord{Kind: "InferenceService", Name: "scorer", Generation: 1})
	var stages []string
	for _, s := range rr.Steps {
		stages = append(stages, s.Stage)
	}
	if !ok || !slices.Equal(stages, []string{StageRetraining, StageCanary, StagePromoted}) || !strings.Contains(rr.Steps[0].Message, "150 rows captured at edge-a, mix 0.5") {
		t.Errorf("rollout = %+v; want retraining on the capture, canary, promoted", rr.Steps)
	}
	// The lineage names the window the model saw.
	jobs := run.agents[0].jobs()
	if len(jobs) != 1 || jobs[0].State != JobSucceeded {
		t.Fatalf("jobs = %+v; want one succeeded retrain", jobs)
	}
	m, err := run.agents[0].art.Lookup(storage.KindModel, "scorer", "2")
	if err != nil {
		t.Fatal(err)
	}
	var sites map[string]json.RawMessage
	if json.Unmarshal([]byte(m.Metadata[MetaSiteReferences]), &sites) != nil || len(sites) != 1 || sites["edge-a"] == nil {
		t.Errorf("scorer@2's site references = %.80q; want edge-a's", m.Metadata[MetaSiteReferences])
	}
	rec := httptest.NewRecorder()
	run.agents[1].Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/lineage/scorer?version=2", nil))
	var lin LineageChain
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &lin) != nil || len(lin.Chain) == 0 || lin.Chain[0].Lineage == nil {
		t.Fatalf("GET /v1/lineage/scorer?version=2 = %d %s", rec.Code, rec.Body)
	}
	var data []string
	for _, d := range lin.Chain[0].Lineage.Data {
		data = append(data, d.Name+":"+d.Version)
	}
	capture, err := run.agents[0].art.Lookup(storage.KindDataset, "scorer-capture", "")
	if err != nil || capture.Metadata[MetaCaptureSite] != "edge-a" || capture.Metadata[MetaCaptureNode] != run.edgeA.Name() || capture.Metadata[MetaCaptureVersion] != "1" {
		t.Errorf("capture manifest = %+v, %v; want edge-a's capture after scorer@1's alarm", capture.Metadata, err)
	}
	if !slices.Equal(data, []string{"cases:1", "scorer-capture:" + capture.Version}) {
		t.Errorf("scorer@2 was trained on %v; want cases:1 and the capture", data)
	}
	// Both edges judged version 2 on their own reference, and neither
	// alarms: edge-a's traffic matches its captured rows, edge-b's the
	// dataset's.
	a, _ := judged(run.edgeA, "2")
	b, _ := judged(run.edgeB, "2")
	if a.ReferenceSite != "edge-a" || a.Alarmed || a.State != catalog.DriftOK {
		t.Errorf("edge-a's monitor of scorer@2 = reference site %q, state %s, alarmed %v after %d rows; want edge-a's reference and ok", a.ReferenceSite, a.State, a.Alarmed, a.Seen)
	}
	if b.ReferenceSite != "" || b.Alarmed || b.State != catalog.DriftOK {
		t.Errorf("edge-b's monitor of scorer@2 = reference site %q, state %s, alarmed %v after %d rows; want the default reference and ok", b.ReferenceSite, b.State, b.Alarmed, b.Seen)
	}
	if c := a.Capture; c == nil || c.Dataset != "scorer-capture:"+capture.Version || c.Rows != 150 {
		t.Errorf("edge-a's capture = %+v; want 150 rows published as the capture", c)
	}
	// Ground truth posted where no monitor watches the model, or of the
	// wrong width, is refused with the reason; more of it after the
	// capture is kept nowhere, and the answer says so.
	for _, tc := range []struct {
		a          *Agent
		body, want string
		code       int
	}{
		{run.gpu, `{"inputs": [[1, 2, 3]], "labels": [1]}`, "no drift monitor watches scorer on this node", http.StatusNotFound},
		{run.edgeA, `{"inputs": [[1, 2]], "labels": [1]}`, "row 0 has 2 values; scorer@2 takes 3 (a, b, c)", http.StatusBadRequest},
		{run.edgeA, `{"inputs": [[1, 2, 3]], "labels": [true]}`, "label 0 is true", http.StatusBadRequest},
		{run.edgeA, `{"inputs": [[1, 2, 3]], "labels": ["1"]}`, `"accepted": 0`, http.StatusOK},
	} {
		code, b := post(t, tc.a.Handler(), http.MethodPost, "/v1/models/scorer/feedback", []byte(tc.body))
		if code != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("feedback %s to %s = %d %s; want %d with %q", tc.body, tc.a.Name(), code, b, tc.code, tc.want)
		}
	}
}

// TestRetrainFailureKeepsServing fails the retraining job (its one member
// exits non-zero mid-run): the rollout ends failed, the old version goes on
// serving at both edges, no request fails, and the job's output is kept.
func TestRetrainFailureKeepsServing(t *testing.T) {
	pol := strings.Replace(loopPolicy, `    data: [{dataset: cases}]
    builtin: {algorithm: logreg, label: y, epochs: 10}`, `    launcher: exec
    command: [sh, -c, "echo epoch 1 of 3; sleep 0.2; echo lost a member >&2; exit 3"]`, 1)
	if pol == loopPolicy {
		t.Fatal("the retrain block was not replaced")
	}
	run := runLoopUntil(t, pol, "failed rollout", func(r *loopRun) bool {
		rr, ok := r.agents[0].cat.ActiveRollout(PolicyRecord{Kind: "InferenceService", Name: "scorer", Generation: 1})
		return ok && rr.Stage == StageFailed
	})
	if run.failed > 0 {
		t.Errorf("%d requests failed", run.failed)
	}
	for _, a := range []*Agent{run.edgeA, run.edgeB} {
		if m := a.mesh.Local().Models; !slices.Equal(m, []string{"scorer@1"}) {
			t.Errorf("%s serves %v after the failed retrain, want scorer@1", a.Name(), m)
		}
	}
	// The rollout failed in agent 0's view; agent 1 reads the job's record
	// once gossip has brought it there (under load it lagged: the job was
	// still running there, its member pending).
	var jobs []JobRecord
	meshtest.Poll(t, 15*time.Second, 50*time.Millisecond, "the failed job at "+run.agents[1].Name(), func() bool {
		jobs = run.agents[1].jobs()
		return len(jobs) == 1 && jobs[0].State == JobFailed
	}, func() { t.Logf("jobs = %+v", jobs) })
	if !strings.Contains(jobs[0].Error, "exit") || len(jobs[0].Members) != 1 || jobs[0].Members[0].State != "failed" {
		t.Fatalf("jobs = %+v; want one failed job whose member exited", jobs)
	}
	rec := httptest.NewRecorder()
	run.agents[0].Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/jobs/"+jobs[0].Name+"/logs", nil))
	if !strings.Contains(rec.Body.String(), "epoch 1 of 3") || !strings.Contains(rec.Body.String(), "lost a member") {
		t.Errorf("job log = %d %q; want the member's stdout and stderr", rec.Code, rec.Body.String())
	}
	// The failed job's placement is done: its GPU is free again.
	meshtest.WaitFor(t, 15*time.Second, "the GPU released", func() bool {
		return len(run.gpu.mesh.Local().Assignments) == 0
	})
}

// metricValue sums the values of the lines of a /metrics text that start
// with series (a name, or a name and its first labels).
func metricValue(b []byte, series string) float64 {
	var n float64
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, series) {
			continue
		}
		fs := strings.Fields(line)
		if v, err := strconv.ParseFloat(fs[len(fs)-1], 64); err == nil {
			n += v
		}
	}
	return n
}

func dumpLoop(t testing.TB, a *Agent) {
	t.Helper()
	for _, path := range []string{"/v1/drift", "/v1/jobs", "/v1/placements"} {
		_, b := get(t, a.Handler(), path)
		t.Logf("%s:\n%s", path, b)
	}
	for _, n := range a.mesh.Nodes() {
		t.Logf("%s models %v", n.Name, n.Models)
	}
}

// BenchmarkDriftToServing measures the closed loop's control plane on a
// four-agent mesh: the seconds from the drift alarm at edge-a to version 2
// serving there, with the training job's own run time taken out (target
// ≤ 5 s), and the detection delay in samples after the shift (KS, window
// 200).
func BenchmarkDriftToServing(b *testing.B) {
	var cp, total, delay []float64
	for range b.N {
		run := runLoop(b)
		rr, ok := run.agents[0].cat.ActiveRollout(PolicyRecord{Kind: "InferenceService", Name: "scorer", Generation: 1})
		j, err := run.agents[0].job(rr.Job)
		if !ok || err != nil || rr.Trigger == nil || run.servingAt.IsZero() {
			b.Fatalf("no complete rollout: %+v, job %v", rr, err)
		}
		t := run.servingAt.Sub(rr.Trigger.At)
		total = append(total, t.Seconds())
		cp = append(cp, (t - j.Finished.Sub(j.Started)).Seconds())
		delay = append(delay, float64(rr.Trigger.Samples-400))
	}
	b.ReportMetric(median(cp), "control-plane-s")
	b.ReportMetric(median(total), "alarm-to-serving-s")
	b.ReportMetric(median(delay), "detect-samples")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkDriftRates runs the closed loop at two traffic rates, 150 and
// 3,000 rows a second to each edge: edge-a's inputs switch to a world the
// model was not trained for (the streaming and windowed detectors both
// on), its clients post ground truth, the retrain captures 150 labelled
// rows, and version 2 must judge 400 rows at both edges; then edge-a's
// inputs switch back, and version 3, retrained on that capture, must do
// the same. Per rate it reports the first switch's detection delay in
// rows and alarm → canary serving at edge-a, and over both: retrains,
// canaries promoted and rolled back, failed requests, and alarms raised
// against drift.alarm events seen. Last, a tenth of edge-b's rows come
// from another class for 8 s: its alarm must hold (no alarm/clear pairs)
// and start no retrain while edge-b's clients post no ground truth. The
// verdicts (promoted, no alarm on the new version at either edge, three
// distinct models, the mixture's one alarm) must not depend on the rate.
func BenchmarkDriftRates(b *testing.B) {
	pol := strings.Replace(capturePolicy(b), `features: [a, b]}`, `features: [a, b], stream: {}}`, 1)
	bothJudged := func(version string) func(*loopRun) bool {
		return func(r *loopRun) bool {
			_, a := judged(r.edgeA, version)
			_, b := judged(r.edgeB, version)
			return a && b
		}
	}
	key := PolicyRecord{Kind: "InferenceService", Name: "scorer", Generation: 1}
	for _, rate := range []float64{150, 3000} {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			for range b.N {
				var first RolloutRecord
				var v3a, v3b DriftRecord // version 3's monitors before the mixture
				run := runLoopWith(b, loopOpts{policy: pol, casesShift: 0, feedback: true, rate: rate,
					what: "version 2 judged at both edges", done: func(r *loopRun) bool {
						if !bothJudged("2")(r) {
							return false
						}
						first, _ = r.agents[0].cat.ActiveRollout(key)
						return true
					},
					backWhat: "version 3 judged at both edges", backDone: func(r *loopRun) bool {
						if !bothJudged("3")(r) {
							return false
						}
						v3a, _ = judged(r.edgeA, "3")
						v3b, _ = judged(r.edgeB, "3")
						return true
					}, mixFor: 8 * time.Second})
				achieved := float64(run.shiftedRows) / time.Since(run.shiftAt).Seconds()
				last, ok := run.agents[0].cat.ActiveRollout(key)
				if first.Trigger == nil || !ok || run.servingAt.IsZero() {
					b.Fatalf("no complete rollouts: %+v then %+v", first, last)
				}
				var promoted, rolledBack, unchanged int
				for _, s := range last.Steps {
					switch s.Stage {
					case StagePromoted:
						promoted++
					case StageRolledBack:
						rolledBack++
					case catalog.StageUnchanged:
						unchanged++
					}
				}
				digests := map[string]bool{}
				for _, v := range []string{"1", "2", "3"} {
					if m, err := run.agents[0].art.Lookup(storage.KindModel, "scorer", v); err == nil {
						digests[m.Digest] = true
					}
				}
				if v3a.Alarmed || v3b.Alarmed {
					b.Errorf("at %g rows/s version 3 alarmed at edge-a %v, edge-b %v; want no alarm", rate, v3a.Alarmed, v3b.Alarmed)
				}
				if first.Stage != StagePromoted || last.Stage != StagePromoted || len(digests) != 3 {
					b.Errorf("verdicts at %g rows/s: %s then %s, %d distinct models; want promoted twice, 3 models", rate, first.Stage, last.Stage, len(digests))
				}
				// Every alarm raised (the monitors' counters) is an event.
				var alarms float64
				for _, ag := range run.agents {
					_, m := get(b, ag.Handler(), "/metrics")
					alarms += metricValue(m, `strata_drift_alarms_total{`)
				}
				events := 0
				meshtest.WaitFor(b, 10*time.Second, "an event for every alarm", func() bool {
					for {
						select {
						case ev := <-run.evc:
							if ev.Type == "drift.alarm" {
								events++
							}
							continue
						default:
						}
						return float64(events) >= alarms
					}
				})
				// The mixture at edge-b: its alarm holds (no alarm/clear
				// pairs), and the retrain waits for edge-b's ground truth,
				// which its clients never post here.
				var mixAlarms, mixClears int
				if l, err := run.agents[0].cat.DriftLogs.Value("InferenceService/scorer/" + run.edgeB.Name()); err == nil {
					for _, e := range l.Entries {
						switch {
						case e.At.Before(run.mixAt):
						case e.Kind == catalog.DriftAlarm:
							mixAlarms++
						case e.Kind == catalog.DriftClear:
							mixClears++
						}
					}
				}
				if mixAlarms != 1 || mixClears != 0 || len(run.agents[0].jobs()) != 2 {
					b.Errorf("10%% mixture at edge-b for 8 s at %g rows/s: %d alarms, %d clears, %d retrains in all; want 1 alarm held and no further retrain", rate, mixAlarms, mixClears, len(run.agents[0].jobs()))
				}
				delay := float64(first.Trigger.Samples - 400)
				toCanary := run.servingAt.Sub(first.Trigger.At).Seconds()
				retrains := len(run.agents[0].jobs())
				b.Logf("%g rows/s (achieved %.0f): detected after %.0f rows (%s), alarm → canary serving %.2f s; over both switches: retrains %d, canaries promoted %d / rolled back %d / unchanged %d, distinct models %d, failed requests %d, alarms %.0f / events %d; 10%% mixture at edge-b: %d alarm, %d clears; last: %s",
					rate, achieved, delay, first.Trigger.Detector, toCanary, retrains, promoted, rolledBack, unchanged, len(digests), run.failed, alarms, events, mixAlarms, mixClears, last.Message)
				b.ReportMetric(delay, "detect-rows")
				b.ReportMetric(toCanary, "alarm-to-canary-s")
				b.ReportMetric(float64(retrains), "retrains")
				b.ReportMetric(float64(run.failed), "failed-requests")
				b.ReportMetric(achieved, "rows/s")
			}
		})
	}
}

// TestShortSeries: a model trained on a short series (100 rows) whose
// live series is as short, through the agent's own path. With drift: {}
// (a window of 500) apply says the window can never fill, and indeed 100
// shifted rows raise no alarm; with the streaming detector the same 100
// rows alarm within tens of rows.
func TestShortSeries(t *testing.T) {
	t.Parallel()
	lib := ortLib(t)
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	ctl := true // one edge agent that is its own controller
	a := devMesh(t, 1, func(c *Config) { c.PKI, c.ORTLibrary, c.Controller = keys, lib, &ctl })[0]
	r := rand.New(rand.NewPCG(5, 6))
	res, err := trainer.Train(context.Background(), loopData(r, 100, 0), trainer.Config{Kind: trainer.KindLogistic, Seed: 1, Holdout: -1})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := json.Marshal(res.Reference)
	publishFile(t, a, storage.PublishSpec{Kind: storage.KindModel, Name: "flow", Version: "1", Metadata: map[string]string{MetaReference: string(ref)}}, res.Model)
	apply := func(drift string) []string {
		t.Helper()
		src := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: flow}\nspec:\n  model: {name: flow, version: \"1\"}\n  resources: {cpu: 100m, memory: 32Mi}\n  drift: " + drift + "\n"
		var out []ApplyResult
		code, body := post(t, a.Handler(), http.MethodPost, "/v1/policies?file=flow.yaml", []byte(src))
		if code != http.StatusOK || json.Unmarshal(body, &out) != nil || len(out) != 1 {
			t.Fatalf("apply = %d %s", code, body)
		}
		return out[0].Warnings
	}
	// send sends the 100-row live series, shifted, and waits until the
	// monitor has counted it.
	send := func() DriftRecord {
		t.Helper()
		before := int64(0)
		for _, d := range a.driftRecords() {
			before = d.Seen
		}
		for range 100 {
			row := []float32{float32(r.NormFloat64() + 2), float32(r.NormFloat64()), float32(r.NormFloat64())}
			body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 3}, "datatype": "FP32", "data": row}}})
			if code, b := post(t, a.Handler(), http.MethodPost, "/v2/models/flow/infer", body); code != http.StatusOK {
				t.Fatalf("infer = %d %s", code, b)
			}
		}
		var rec DriftRecord
		meshtest.WaitFor(t, 15*time.Second, "the monitor to count the series", func() bool {
			for _, d := range a.driftRecords() {
				rec = d
			}
			return rec.Seen >= before+100 || rec.Alarmed
		})
		return rec
	}

	warnings := apply("{detector: ks, features: [a, b]}")
	if !slices.ContainsFunc(warnings, func(w string) bool {
		return strings.Contains(w, "drift.window 500 is longer than the 100 rows of a") && strings.Contains(w, "watch with drift.stream")
	}) {
		t.Errorf("apply warnings %q; want the window named longer than the series", warnings)
	}
	meshtest.WaitFor(t, 30*time.Second, "flow@1 served", func() bool { return slices.Contains(a.mesh.Local().Models, "flow@1") })
	if d := send(); d.Alarmed || d.State != catalog.DriftWarming {
		t.Errorf("windowed monitor after the 100-row series: %s, alarmed %v; want still warming, no alarm possible", d.State, d.Alarmed)
	}

	if w := apply("{detector: ks, features: [a, b], stream: {}}"); slices.ContainsFunc(w, func(w string) bool {
		return strings.Contains(w, "drift.window") && !strings.Contains(w, "only its streaming detector")
	}) {
		t.Errorf("with the streaming detector, warnings %q still suggest it", w)
	}
	meshtest.WaitFor(t, 15*time.Second, "the monitor restarted with the streaming detector", func() bool {
		for _, d := range a.driftRecords() {
			return d.Seen == 0
		}
		return false
	})
	d := send()
	if !d.Alarmed || d.AlarmSource != "stream" || d.AlarmSeen > 50 {
		t.Errorf("streaming monitor after the 100-row series: alarmed %v by %q after %d rows; want a streaming alarm within 50", d.Alarmed, d.AlarmSource, d.AlarmSeen)
	}
}
