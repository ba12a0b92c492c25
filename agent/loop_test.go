package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
  latency: {p99: 20ms, clients: [edge-a, edge-b]}
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
func publishFile(t *testing.T, a *Agent, spec storage.PublishSpec, b []byte) storage.Manifest {
	t.Helper()
	p := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := a.publish(context.Background(), p, spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDriftRetrainRollout runs the closed loop on a four-agent mesh: a
// model serves at both edge sites; inputs shift at edge-a; the monitor
// there alarms; the owner places a retrain on the GPU node, which trains
// on the dataset and registers version 2; version 2 serves at edge-a as a
// canary, then everywhere; no request fails on the way.
func TestDriftRetrainRollout(t *testing.T) {
	lib := ortLib(t)
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	agents := devMesh(t, 4, func(c *Config) { c.PKI, c.ORTLibrary = keys, lib })
	gpu := agents[3]
	if gpu.mesh.Local().Tier != "onprem" {
		t.Fatalf("agent 3 is %s, want the onprem GPU node", gpu.mesh.Local().Tier)
	}
	_, evc, unsub := agents[1].events.subscribe(0)
	defer unsub()

	r := rand.New(rand.NewPCG(3, 4))
	res, err := trainer.Train(context.Background(), loopData(r, 2000, 0), trainer.Config{Kind: trainer.KindLogistic, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := json.Marshal(res.Reference)
	publishFile(t, gpu, storage.PublishSpec{Kind: storage.KindModel, Name: "scorer", Version: "1", Metadata: map[string]string{MetaReference: string(ref)}}, res.Model)
	var csv bytes.Buffer
	if err := loopData(r, 2000, 2).WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	publishFile(t, gpu, storage.PublishSpec{Kind: storage.KindDataset, Name: "cases", Version: "1"}, csv.Bytes())
	if code, body := post(t, gpu.Handler(), http.MethodPost, "/v1/policies?file=loop.yaml", []byte(loopPolicy)); code != http.StatusOK {
		t.Fatalf("apply = %d %s", code, body)
	}

	serving := func(a *Agent, version string) bool {
		return slices.Contains(a.mesh.Local().Models, "scorer@"+version)
	}
	var edgeA, edgeB *Agent
	meshtest.WaitFor(t, 60*time.Second, "scorer@1 at both edge sites", func() bool {
		edgeA, edgeB = nil, nil
		for _, a := range agents {
			if serving(a, "1") && a.cfg.Site == "edge-a" {
				edgeA = a
			}
			if serving(a, "1") && a.cfg.Site == "edge-b" {
				edgeB = a
			}
		}
		return edgeA != nil && edgeB != nil
	})

	failed := 0
	send := func(a *Agent, shift float64) {
		t.Helper()
		row := []float32{float32(r.NormFloat64() + shift), float32(r.NormFloat64()), float32(r.NormFloat64())}
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 3}, "datatype": "FP32", "data": row}}})
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v2/models/scorer/infer", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			failed++
			t.Errorf("request to %s = %d %s", a.Name(), rec.Code, rec.Body.String())
		}
	}
	// Unshifted traffic everywhere: no alarm.
	for range 400 {
		send(edgeA, 0)
		send(edgeB, 0)
	}
	time.Sleep(200 * time.Millisecond)
	for _, d := range edgeA.driftRecords() {
		if d.Alarmed || d.Error != "" {
			t.Fatalf("drift record before any shift: %+v", d)
		}
	}
	// The shift at edge-a: traffic goes on until version 2 serves
	// everywhere (each round paced so the loop can move).
	deadline := time.Now().Add(90 * time.Second)
	for !(serving(edgeA, "2") && serving(edgeB, "2")) {
		if time.Now().After(deadline) {
			dumpLoop(t, gpu)
			t.Fatal("version 2 did not reach both edges in 90s")
		}
		for range 20 {
			send(edgeA, 2)
			send(edgeB, 0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if failed > 0 {
		t.Errorf("%d requests failed during the loop", failed)
	}

	// What happened, as every agent sees it.
	rr, ok := agents[0].rollout("InferenceService/scorer", 1)
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
	m, err := agents[0].lookupManifest(storage.KindModel, "scorer", "2")
	if err != nil || m.Metadata[MetaReference] == "" || m.Metadata[MetaJob] != jobs[0].Name || m.Signer == "" {
		t.Errorf("scorer@2 manifest = %+v, %v; want a signed manifest with the job's name and a drift reference", m.Metadata, err)
	}
	// The job's log is readable from any agent.
	rec := httptest.NewRecorder()
	agents[1].Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/jobs/"+jobs[0].Name+"/logs", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "holdout accuracy") {
		t.Errorf("job log via %s = %d %q", agents[1].Name(), rec.Code, rec.Body.String())
	}
	// The events stream told the story in order.
	var types, msgs []string
	for {
		select {
		case ev := <-evc:
			types = append(types, ev.Type)
			msgs = append(msgs, ev.Type+" "+ev.Message)
			continue
		default:
		}
		break
	}
	// (A job's running state can pass between two looks at the catalog.)
	want := []string{"drift.alarm", "rollout.retraining", "job.succeeded", "rollout.canary", "rollout.promoted"}
	i := 0
	for _, ty := range types {
		if i < len(want) && ty == want[i] {
			i++
		}
	}
	if i != len(want) {
		t.Errorf("events:\n%s\nwant %v in that order", strings.Join(msgs, "\n"), want)
	}
}

func dumpLoop(t *testing.T, a *Agent) {
	t.Helper()
	for _, path := range []string{"/v1/drift", "/v1/jobs", "/v1/placements"} {
		_, b := get(t, a.Handler(), path)
		t.Logf("%s:\n%s", path, b)
	}
	for _, n := range a.mesh.Nodes() {
		t.Logf("%s models %v", n.Name, n.Models)
	}
}
