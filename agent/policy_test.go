package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/sim"
)

func post(t testing.TB, h http.Handler, method, path string, body []byte) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, bytes.NewReader(body)))
	return rec.Code, rec.Body.Bytes()
}

// TestPlanApplyAndReplace plans and applies examples/fraud-scorer.yaml on a
// dev mesh with emulated WAN latency: one replica per client site, each on
// an edge node of that site (the only nodes within 20ms of it); killing one
// moves its replica to the other edge node of the same site.
func TestPlanApplyAndReplace(t *testing.T) {
	agents := devMeshWAN(t, 7, true)
	h := agents[1].Handler()
	src, err := os.ReadFile("../examples/fraud-scorer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type plan struct {
		Decision struct {
			Feasible   bool `json:"feasible"`
			Placements []struct {
				Node, Site, Client string
			} `json:"placements"`
		} `json:"decision"`
		Explanation string   `json:"explanation"`
		Why         string   `json:"why"`
		Warnings    []string `json:"warnings"`
	}
	var got []plan
	planAt := func(h http.Handler) bool {
		code, body := post(t, h, http.MethodPost, "/v1/plan?file=fraud-scorer.yaml&why=gpu-1", src)
		if code != http.StatusOK || json.Unmarshal(body, &got) != nil || len(got) != 1 {
			return false
		}
		d := got[0].Decision
		if !d.Feasible || len(d.Placements) != 2 {
			return false
		}
		for _, p := range d.Placements {
			if p.Site != p.Client {
				return false
			}
		}
		return true
	}
	// Every agent's plan, not one's: the policy's owner, whichever agent
	// it is, places it from its own RTT estimates, and on a loaded host
	// one agent's settle later than another's. (In a full make test, a
	// replica for edge-a was once placed on gpu-2, once agents[1]'s plan
	// was right: most likely the owner's estimates still lagged.)
	meshtest.WaitFor(t, 90*time.Second, "a plan with one replica in each client site, at every agent", func() bool {
		for _, a := range agents {
			if !planAt(a.Handler()) {
				return false
			}
		}
		return planAt(h)
	})
	if !strings.Contains(got[0].Explanation, "InferenceService/fraud-scorer") || !strings.Contains(got[0].Why, "gpu-1") {
		t.Errorf("explanation:\n%s\nwhy gpu-1:\n%s", got[0].Explanation, got[0].Why)
	}
	if len(got[0].Warnings) != 1 || !strings.Contains(got[0].Warnings[0], "is not published") {
		t.Errorf("plan of a service whose model is not published: warnings %q, want one", got[0].Warnings)
	}

	code, body := post(t, h, http.MethodPost, "/v1/policies?file=fraud-scorer.yaml", src)
	if code != http.StatusOK {
		t.Fatalf("apply = %d %s", code, body)
	}
	// Nothing is published in this mesh: the apply says the model is not.
	var first []ApplyResult
	if json.Unmarshal(body, &first) != nil || len(first) != 1 || len(first[0].Warnings) != 1 || !strings.Contains(first[0].Warnings[0], "is not published") {
		t.Errorf("apply of a service whose model is not published: %s; want a warning", body)
	}
	key := "InferenceService/fraud-scorer"
	var placed PlacementRecord
	meshtest.WaitFor(t, 60*time.Second, "fraud-scorer placed, seen the same by every agent", func() bool {
		for _, a := range agents {
			rec, ok := placementOf(a, key)
			if !ok || rec.State != StatePlaced || len(rec.Nodes) != 2 {
				return false
			}
			placed = rec
		}
		return true
	})
	sites := map[string]bool{}
	for _, n := range placed.Nodes {
		sites[n.Site] = true
		if n.Tier != "edge" {
			t.Errorf("replica on %s (tier %s), want the edge", n.Name, n.Tier)
		}
	}
	if !sites["edge-a"] || !sites["edge-b"] {
		t.Errorf("replicas in sites %v, want edge-a and edge-b", sites)
	}

	// What if the node serving edge-a went down: the what-if names the
	// policy, the node it leaves and where it would go; nothing moves.
	var edgeA string
	for _, n := range placed.Nodes {
		if n.Site == "edge-a" {
			edgeA = n.Name
		}
	}
	code, body = get(t, h, "/v1/sim?what_if="+url.QueryEscape("node "+edgeA+" down"))
	var wi sim.WhatIfReport
	if code != http.StatusOK || json.Unmarshal(body, &wi) != nil || len(wi.Outcomes) != 1 {
		t.Fatalf("what-if = %d %s", code, body)
	}
	if o := wi.Outcomes[0]; o.Policy != key || o.Status == "unchanged" || !slices.Contains(o.Before, edgeA) || slices.Contains(o.After, edgeA) {
		t.Errorf("what if %s went down: %+v; want %s to leave it", edgeA, o, key)
	}
	for _, c := range []struct {
		q    string
		code int
	}{{"what_if=site+atlantis+down", http.StatusNotFound}, {"what_if=reboot", http.StatusBadRequest}, {"", http.StatusBadRequest}, {"whatif=x", http.StatusBadRequest}} {
		if code, body := get(t, h, "/v1/sim?"+c.q); code != c.code || !strings.Contains(string(body), `"error"`) {
			t.Errorf("GET /v1/sim?%s = %d %s, want %d with a JSON reason", c.q, code, body, c.code)
		}
	}

	// Re-applying the same source changes nothing.
	code, body = post(t, h, http.MethodPost, "/v1/policies", src)
	var applied []ApplyResult
	if code != http.StatusOK || json.Unmarshal(body, &applied) != nil || applied[0].Changed || applied[0].Generation != 1 {
		t.Errorf("re-apply = %d %s", code, body)
	}

	// Kill the edge-a replica: it moves to the other edge-a node.
	var victim *Agent
	for _, n := range placed.Nodes {
		for _, a := range agents {
			if a.Name() == n.Name && n.Site == "edge-a" {
				victim = a
			}
		}
	}
	victim.Close()
	// Normally the other edge-a node takes it; under a heavily loaded
	// machine (the race detector) measured RTTs inflate and the engine may
	// rightly fall back to the next tier, so the test asks only that the
	// work moved off the dead node and is placed.
	meshtest.WaitFor(t, 60*time.Second, "the edge-a replica to move off the killed node", func() bool {
		var survivor *Agent
		for _, a := range agents {
			if a != victim {
				survivor = a
			}
		}
		rec, ok := placementOf(survivor, key)
		if !ok || rec.State != StatePlaced || rec.Epoch <= placed.Epoch {
			return false
		}
		for _, n := range rec.Nodes {
			if n.Name == victim.Name() {
				return false
			}
		}
		return len(rec.Nodes) == 2
	})

	var alive *Agent
	for _, a := range agents {
		if a != victim {
			alive = a
		}
	}
	code, _ = post(t, alive.Handler(), http.MethodDelete, "/v1/policies/InferenceService/fraud-scorer", nil)
	if code != http.StatusOK {
		t.Errorf("delete = %d", code)
	}
	meshtest.WaitFor(t, 20*time.Second, "the placement to be removed", func() bool {
		_, ok := placementOf(alive, key)
		return !ok
	})
}

func TestPolicyAPIErrors(t *testing.T) {
	agents := devMesh(t, 1)
	h := agents[0].Handler()
	bad := []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: x}\nspec:\n  model: {name: m}\n  replicas: many\n")
	code, body := post(t, h, http.MethodPost, "/v1/policies?file=x.yaml", bad)
	var e httpapi.PolicyErrorBody
	if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || len(e.Errors) != 1 {
		t.Fatalf("bad policy = %d %s", code, body)
	}
	want := PolicyError{File: "x.yaml", Line: 6, Column: 13, Field: "spec.replicas", Message: `want a whole number, got "many"`}
	if e.Errors[0] != want || e.Field != "spec.replicas" {
		t.Errorf("error = %+v, want %+v", e.Errors[0], want)
	}
	if code, _ := post(t, h, http.MethodPost, "/v1/policies", nil); code != http.StatusBadRequest {
		t.Errorf("empty body = %d, want 400", code)
	}
	if code, _ := post(t, h, http.MethodPost, "/v1/plan", bytes.Repeat([]byte("#"), httpapi.MaxPolicyBody+1)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body = %d, want 413", code)
	}
	if code, _ := post(t, h, http.MethodDelete, "/v1/policies/InferenceService/nope", nil); code != http.StatusNotFound {
		t.Errorf("delete unknown = %d, want 404", code)
	}
	if code, _ := post(t, h, http.MethodPost, "/v1/plan?why=nope", []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: x}\nspec: {model: {name: m}}\n")); code != http.StatusNotFound {
		t.Errorf("why unknown node = %d, want 404", code)
	}
	code, body = post(t, h, http.MethodGet, "/v1/placements", nil)
	if code != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("placements = %d %s", code, body)
	}
}
