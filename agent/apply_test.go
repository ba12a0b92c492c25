package agent

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// TestApplyRefusesWhatPlanRefuses: a policy naming a client site no node
// is in is refused by apply as by plan, naming the field, and nothing is
// stored; one no node can take now is applied with the warning plan
// gives, as is one whose model is not published.
func TestApplyRefusesWhatPlanRefuses(t *testing.T) {
	t.Parallel()
	h := devMesh(t, 1)[0].Handler()
	const head = "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: %s}\nspec:\n  model: {name: m}\n"
	unknown := []byte(strings.Replace(head, "%s", "far", 1) + "  latency: {p99: 20ms, clients: [atlantis]}\n")
	for _, path := range []string{"/v1/plan", "/v1/policies"} {
		code, body := post(t, h, http.MethodPost, path+"?file=far.yaml", unknown)
		var e struct{ Error, Field string }
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Field != "spec.latency.clients" || !strings.Contains(e.Error, `"atlantis"`) {
			t.Errorf("POST %s of an unknown client site = %d %s, want 400 naming spec.latency.clients and atlantis", path, code, body)
		}
	}
	if code, body := post(t, h, http.MethodGet, "/v1/policies", nil); code != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("after a refused apply, policies = %d %s, want none", code, body)
	}

	huge := []byte(strings.Replace(head, "%s", "huge", 1) + "  resources: {cpu: \"4096\"}\n")
	var plan []httpapi.PlanResult
	code, body := post(t, h, http.MethodPost, "/v1/plan?file=huge.yaml", huge)
	if code != http.StatusOK || json.Unmarshal(body, &plan) != nil || len(plan) != 1 {
		t.Fatalf("plan of an infeasible service = %d %s", code, body)
	}
	var applied []ApplyResult
	code, body = post(t, h, http.MethodPost, "/v1/policies?file=huge.yaml", huge)
	if code != http.StatusOK || json.Unmarshal(body, &applied) != nil || len(applied) != 1 {
		t.Fatalf("apply of an infeasible service = %d %s", code, body)
	}
	got, want := strings.Join(applied[0].Warnings, "\n"), strings.Join(plan[0].Warnings, "\n")
	if got != want || !strings.Contains(got, "no node can take InferenceService/huge now") || !strings.Contains(got, "model m:latest is not published") {
		t.Errorf("apply warned:\n%s\nplan warned:\n%s\nwant the same: infeasible now, model not published", got, want)
	}
}

// TestPlanShowsBurst: a service whose tiers hold only part of its
// replicas within the SLO plans the rest on its burst tiers: the plan
// names them and counts the service as placed, as the owner would place
// it.
func TestPlanShowsBurst(t *testing.T) {
	t.Parallel()
	h := devMesh(t, 7)[0].Handler()
	// One replica per edge node (each has 1000m): the three edge nodes
	// hold 3 of 5, the rack the other 2.
	src := []byte(`apiVersion: strata/v1
kind: InferenceService
metadata: {name: peak}
spec:
  model: {name: m}
  replicas: 5
  resources: {cpu: 600m}
  latency: {p99: 50ms, clients: [edge-a]}
  tiers: [edge]
  burst: {tiers: [onprem], maxExtraLatency: 10ms}
`)
	var plan []httpapi.PlanResult
	// Until every node has published a coordinate, nodes without one are
	// of unknown distance and meet no SLO.
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "3 replicas planned on the edge and 2 on the rack", func() bool {
		code, body := post(t, h, http.MethodPost, "/v1/plan?file=peak.yaml", src)
		return code == http.StatusOK && json.Unmarshal(body, &plan) == nil && len(plan) == 1 &&
			len(plan[0].Decision.Placements) == 3 && len(plan[0].Burst) == 2
	}, func() {
		if len(plan) == 1 {
			t.Logf("last plan:\n%s", plan[0].Explanation)
		}
	})
	p := plan[0]
	for _, b := range p.Burst {
		if b.Tier != "onprem" {
			t.Errorf("burst replica on %s (%s), want onprem", b.Node, b.Tier)
		}
	}
	if !strings.Contains(p.Explanation, "Burst: the service's tiers hold 3 of 5 replicas within the SLO; 2 overflow to the burst tiers (onprem, within the SLO + 10ms)") {
		t.Errorf("explanation:\n%s", p.Explanation)
	}
	for _, w := range p.Warnings {
		if strings.Contains(w, "replicas of") {
			t.Errorf("plan warns %q; the burst tiers take the rest", w)
		}
	}
	t.Logf("plan:\n%s", p.Explanation)
}

// TestPlanWarnsOfASmallReference: a service that watches drift with a
// window longer than its training reference's rows, or against a
// reference of fewer than 100 rows, is planned with a warning for each
// that says what to do; one whose settings fit its reference is not.
func TestPlanWarnsOfASmallReference(t *testing.T) {
	t.Parallel()
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	a := devMesh(t, 1, func(c *Config) { c.PKI = keys })[0]
	model, _, err := onnx.RandomMLP(1, 1, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	for version, rows := range map[string]int{"1": 27, "2": 600, "3": 300} {
		values := make([]float64, rows)
		for i := range values {
			values[i] = float64(i % 13)
		}
		f, err := drift.Summarize("amount", values, drift.SummaryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := json.Marshal(drift.Reference{Features: []drift.FeatureReference{f}})
		publishFile(t, a, storage.PublishSpec{Kind: storage.KindModel, Name: "m", Version: version, Metadata: map[string]string{MetaReference: string(ref)}}, model)
	}
	for _, tc := range []struct {
		version, drift string
		want           []string
		extra          string
	}{
		{"1", "{}", []string{
			"InferenceService/watched: drift.window 500 is longer than the 27 rows of amount that the drift reference of m@1 summarises: a live series as short as the data the model was trained on never fills the window, and the windowed detector needs 700 rows before it can alarm; watch with drift.stream: {} (it alarms within tens of rows)",
			"the drift reference of m@1 summarises 27 rows of amount, fewer than 100: InferenceService/watched's alarms would be noise; publish the model with a larger reference, or watch with drift.reference: first",
		}, ""},
		{"2", "{}", nil, ""},
		{"3", "{}", []string{"InferenceService/watched: drift.window 500 is longer than the 300 rows of amount that the drift reference of m@3 summarises: a live series as short as the data the model was trained on never fills the window, and the windowed detector needs 700 rows before it can alarm; watch with drift.stream: {} (it alarms within tens of rows) or a window of at most 300"}, ""},
		{"3", "{window: 300, stream: {}}", nil, ""},
		{"2", "{window: 200}", []string{"InferenceService/watched: rollout.canaryRequests 40 is fewer than the 200 sampled rows its drift monitor needs to judge (drift.window 200): a canary is promoted only once its monitor has judged, so it serves at least those rows whatever canaryRequests says"},
			"  rollout: {canaryRequests: 40}\n  retrain: {data: [{dataset: d}], builtin: {label: y}}\n"},
		{"1", "{window: 30, stream: {falseAlarmEvery: 1000}}", []string{
			"InferenceService/watched: drift.window 30 is longer than the 27 rows of amount that the drift reference of m@1 summarises: a live series as short as the data the model was trained on never fills the window, and the windowed detector needs 42 rows before it can alarm; only its streaming detector can alarm on such a series",
			"the drift reference of m@1 summarises 27 rows of amount, fewer than 100: InferenceService/watched's alarms would be noise (for the streaming detector, its threshold for a false alarm in every 1000 rows rises",
		}, ""},
	} {
		src := []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: watched}\nspec:\n  model: {name: m, version: \"" + tc.version + "\"}\n  drift: " + tc.drift + "\n" + tc.extra)
		var plan []httpapi.PlanResult
		code, body := post(t, a.Handler(), http.MethodPost, "/v1/plan?file=watched.yaml", src)
		if code != http.StatusOK || json.Unmarshal(body, &plan) != nil || len(plan) != 1 {
			t.Fatalf("plan = %d %s", code, body)
		}
		var got []string
		for _, w := range plan[0].Warnings {
			if strings.Contains(w, "drift") {
				got = append(got, w)
			}
		}
		ok := len(got) == len(tc.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.HasPrefix(got[i], tc.want[i])
		}
		if !ok {
			t.Errorf("m@%s with drift %s: warnings\n%s\nwant\n%s", tc.version, tc.drift, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}
