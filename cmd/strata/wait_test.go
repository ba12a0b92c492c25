package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
)

// fakeAgent answers apply, and then each read of the placements, jobs and
// experiments with the next of a script of answers (the last one again
// once the script ends).
type fakeAgent struct {
	mu     sync.Mutex
	reads  int
	script []fakeRead
}

type fakeRead struct {
	placements  []api.PlacementStatus
	jobs        []api.Job
	experiments []api.Experiment
}

func (f *fakeAgent) serve(tb testing.TB, applied []api.ApplyResult) *httptest.Server {
	tb.Helper()
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	// Each poll reads the placements first: that read moves the script on,
	// and the poll's other reads answer from the same step.
	step := func(next bool) fakeRead {
		f.mu.Lock()
		defer f.mu.Unlock()
		if next {
			f.reads++
		}
		return f.script[min(max(f.reads-1, 0), len(f.script)-1)]
	}
	mux.HandleFunc("POST /v1/policies", func(w http.ResponseWriter, r *http.Request) { answer(w, applied) })
	mux.HandleFunc("GET /v1/placements", func(w http.ResponseWriter, r *http.Request) { answer(w, step(true).placements) })
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) { answer(w, step(false).jobs) })
	mux.HandleFunc("GET /v1/experiments", func(w http.ResponseWriter, r *http.Request) { answer(w, step(false).experiments) })
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

const (
	svcKey = "InferenceService/fraud-scorer"
	jobKey = "TrainingJob/train-fraud"
)

func svc(gen, placed uint64, state, msg string, replicas ...string) api.PlacementStatus {
	ps := api.PlacementStatus{Policy: svcKey, Generation: gen, PlacedGeneration: placed, Kind: "InferenceService", State: state, Message: msg}
	for i, r := range replicas {
		ps.Nodes = append(ps.Nodes, api.PlacedNode{Name: []string{"edge-a-1", "edge-b-1"}[i], Replica: r})
	}
	return ps
}

func job(state, msg string) api.PlacementStatus {
	return api.PlacementStatus{Policy: jobKey, Generation: 1, PlacedGeneration: 1, Kind: "TrainingJob", State: state, Message: msg}
}

// TestApplyWait: apply --wait shows each policy's progress once per
// change and ends when a service serves and a job runs (exit 0), when a
// placement fails (exit 2, with why) or at the timeout (exit 2, with what
// it waited for). The output of the three is in testdata/apply-wait.golden.
func TestApplyWait(t *testing.T) {
	t.Parallel()
	applied := []api.ApplyResult{{Policy: svcKey, Generation: 2, Changed: true}, {Policy: jobKey, Generation: 1, Changed: true}}
	waiting := "waiting for its owner to place it"
	cases := []struct {
		name    string
		script  []fakeRead
		timeout time.Duration
		code    int // 0: returned nil
	}{
		{"serving and running", []fakeRead{
			// Generation 1 is still placed: not what was applied.
			{placements: []api.PlacementStatus{svc(2, 1, api.StatePlaced, "serving on every node", "serving"), job(api.StatePending, waiting)}},
			{placements: []api.PlacementStatus{svc(2, 1, api.StatePlaced, "serving on every node", "serving"), job(api.StatePending, waiting)}},
			{placements: []api.PlacementStatus{svc(2, 2, api.StatePending, "placed on 2 node(s) (policy changed); waiting for admission", "", ""), job(api.StatePlaced, "every node admitted the work")}},
			{placements: []api.PlacementStatus{svc(2, 2, "loading", "admitted; loading the model: 1 of 2 replicas serving", "serving", "loading"), job(api.StatePlaced, "every node admitted the work")},
				jobs: []api.Job{{Name: "train-fraud", Key: jobKey, Generation: 1, State: api.JobRunning, Nodes: []string{"gpu-1"}}}},
			{placements: []api.PlacementStatus{svc(2, 2, api.StatePlaced, "serving on every node", "serving", "serving"), job(api.StatePlaced, "every node admitted the work")},
				jobs: []api.Job{{Name: "train-fraud", Key: jobKey, Generation: 1, State: api.JobRunning, Nodes: []string{"gpu-1"}}}},
		}, time.Minute, 0},
		{"failed", []fakeRead{
			{placements: []api.PlacementStatus{svc(2, 2, api.StatePending, waiting), job(api.StatePending, waiting)}},
			{placements: []api.PlacementStatus{svc(2, 2, api.StateFailed, "no feasible placement: 3 nodes lack memory"), job(api.StatePending, waiting)}},
		}, time.Minute, 2},
		{"timed out", []fakeRead{
			{placements: []api.PlacementStatus{svc(2, 2, api.StatePlaced, "serving on every node", "serving", "serving"), job(api.StatePending, waiting)}},
		}, 50 * time.Millisecond, 2},
	}
	var out bytes.Buffer
	for _, c := range cases {
		f := &fakeAgent{script: c.script}
		srv := f.serve(t, applied)
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		var buf bytes.Buffer
		err := waitApplied(ctx, client.New(srv.URL), applied, &buf, time.Millisecond, c.timeout)
		cancel()
		var ee *exitError
		switch {
		case c.code == 0 && err != nil, c.code != 0 && !(errors.As(err, &ee) && ee.code == c.code):
			t.Errorf("%s: %v, want exit %d", c.name, err, c.code)
		}
		out.WriteString("== " + c.name + "\n" + buf.String())
		if err != nil {
			out.WriteString("error: " + err.Error() + "\n")
		}
	}
	checkGolden(t, "apply-wait", out.String())
}

// TestApplyWaitFlags: strata apply --wait prints the apply, the progress
// on stderr and exits 2 on a failed placement.
func TestApplyWaitFlags(t *testing.T) {
	t.Parallel()
	applied := []api.ApplyResult{{Policy: svcKey, Generation: 1, Changed: true, Warnings: []string{"model fraud:3 is not published (strata push it): " + svcKey + " waits for it"}}}
	f := &fakeAgent{script: []fakeRead{{placements: []api.PlacementStatus{svc(1, 1, api.StateFailed, "no feasible placement: 3 nodes lack memory")}}}}
	srv := f.serve(t, applied)
	file := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(file, []byte("kind: InferenceService\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"apply", "-f", file, "--wait", "--timeout", "1m", "-address", srv.URL}, &stdout, &stderr)
	got := fmt.Sprintf("exit %d\n", code) + "-- stdout\n" + stdout.String() + "-- stderr\n" + stderr.String()
	checkGolden(t, "apply-wait-flags", strings.ReplaceAll(got, srv.URL, "URL"))
}

// TestJobDoneWaitsForItsRecord: a training job whose placement reads done
// is ready only once the record of its run has reached the agent asked:
// `strata logs` after `apply --wait` must find the job.
func TestJobDoneWaitsForItsRecord(t *testing.T) {
	t.Parallel()
	const key = "TrainingJob/train"
	placed := []api.PlacementStatus{{Policy: key, Generation: 1, PlacedGeneration: 1, Key: key, Kind: "TrainingJob", State: api.StateDone}}
	if p := progressOf(key, 1, placed, nil, nil); p.ready || p.failed {
		t.Errorf("done without its run's record: ready %v, failed %v (%s)", p.ready, p.failed, p.message)
	}
	jobs := []api.Job{{Name: "train", Key: key, Generation: 1, State: api.JobSucceeded, Nodes: []string{"gpu-1"}}}
	if p := progressOf(key, 1, placed, jobs, nil); !p.ready {
		t.Errorf("done with its run's record: not ready (%s)", p.message)
	}
}
