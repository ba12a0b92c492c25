package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// policyRoutes extend estateRoutes with applied policies, a job and the
// events kept.
var policyRoutes = map[string]string{
	"GET /v1/policies": `[
 {"kind":"InferenceService","name":"scorer","source":"apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: scorer}\nspec:\n  replicas: 1\n",
  "file":"svc.yaml","generation":3,"applied":"2026-01-02T03:04:05Z","applied_at":"edge-a-1","applied_by":"alice"},
 {"kind":"TrainingJob","name":"train","source":"kind: TrainingJob\n","generation":1,"applied":"2026-01-02T03:05:00Z","applied_at":"gpu-1"}
]
`,
	"GET /v1/events": "id: 1\nevent: placement.placed\ndata: " +
		`{"seq":1,"time":"2026-01-02T03:04:06Z","type":"placement.placed","policy":"InferenceService/scorer","node":"edge-a-1","message":"placed on edge-a-1","count":1,"first":"2026-01-02T03:04:06Z","last":"2026-01-02T03:04:06Z"}` +
		"\n\nid: 2\nevent: job.running\ndata: " +
		`{"seq":2,"time":"2026-01-02T03:05:01Z","type":"job.running","policy":"TrainingJob/train","node":"gpu-1","message":"job train running","count":1,"first":"2026-01-02T03:05:01Z","last":"2026-01-02T03:05:01Z"}` + "\n\n",
	"GET /v1/jobs/train": `{"name":"train","key":"TrainingJob/train","generation":1,"epoch":2,"state":"running","launcher":"builtin","nodes":["gpu-1"],"node":"gpu-1",
 "started":"2026-01-02T03:05:01Z","finished":"0001-01-01T00:00:00Z","metrics":{"loss":0.25}}`,
}

// TestGetAndDescribe runs get and describe over a canned agent, kinds
// written every way a user might, into one golden file.
func TestGetAndDescribe(t *testing.T) {
	t.Parallel()
	routes := map[string]string{}
	for _, m := range []map[string]string{estateRoutes, policyRoutes} {
		for k, v := range m {
			routes[k] = v
		}
	}
	addr := cannedAgent(t, routes)
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "NODES"},
		{"get", "Node", "-o", "wide"},
		{"get", "policies"},
		{"get", "isvc"},
		{"get", "po", "scorer", "-o", "yaml"},
		{"get", "pl", "InferenceService/scorer"},
		{"get", "events"},
		{"get", "jobs", "train"},
		{"get", "pods"},
		{"describe", "policy/scorer"},
		{"describe", "InferenceService", "scorer"},
		{"describe", "job/train"},
		{"describe", "tj/nothing"},
		{"describe", "scorer"},
	} {
		var out, errb bytes.Buffer
		code := run(append(args, "-address", addr), &out, &errb)
		fmt.Fprintf(&b, "$ strata %s\n%s", strings.Join(args, " "), out.String())
		if code != 0 {
			fmt.Fprintf(&b, "exit %d: %s", code, lastLine(errb.String()))
		}
		b.WriteString("\n")
	}
	checkGolden(t, "get-describe", b.String())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1] + "\n"
}

func TestLookupResource(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nodes": "nodes", "NODE": "nodes", "No": "nodes", "IsVc": "inferenceservices", "InferenceService": "inferenceservices",
		"trainingjobs": "trainingjobs", "PL": "placements", "event": "events", "exp": "experiments",
	} {
		r, err := lookupResource(in)
		if err != nil || r.names[0] != want {
			t.Errorf("lookupResource(%q) = %v, %v; want %s", in, r.names, err, want)
		}
	}
	if _, err := lookupResource("pods"); err == nil || !strings.Contains(err.Error(), "use one of nodes, members") {
		t.Errorf("pods: %v", err)
	}
}

// TestDelete deletes by KIND NAME, KIND/NAME and -f FILE, kinds in any
// case, and goes on past a policy the agent does not have.
func TestDelete(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var deleted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method != http.MethodDelete {
			http.Error(w, "unexpected", http.StatusMethodNotAllowed)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/missing") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":"policy not found"}`)
			return
		}
		deleted = append(deleted, strings.TrimPrefix(r.URL.Path, "/v1/policies/"))
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "svc.yaml")
	os.WriteFile(file, []byte("apiVersion: strata/v1\nkind: inferenceservice\nmetadata: {name: a}\nspec: {}\n---\n---\nkind: TrainingJob\nmetadata:\n  name: b\n"), 0o600)
	for _, tc := range []struct {
		args    []string
		want    []string
		code    int
		errText string
	}{
		{args: []string{"-f", file}, want: []string{"InferenceService/a", "TrainingJob/b"}},
		{args: []string{"isvc/x", "TRAININGJOB/y"}, want: []string{"InferenceService/x", "TrainingJob/y"}},
		{args: []string{"InferenceServices", "z"}, want: []string{"InferenceService/z"}},
		{args: []string{"tj/missing", "tj/c"}, want: []string{"TrainingJob/c"}, code: 1, errText: "TrainingJob/missing: policy not found"},
		{args: []string{"node/gpu-1"}, code: 1, errText: `cannot delete "node": only policies are deleted`},
		{args: []string{"scorer"}, code: 1, errText: "give KIND/NAME"},
		{args: nil, code: 1, errText: "give KIND/NAME or -f FILE"},
	} {
		mu.Lock()
		deleted = nil
		mu.Unlock()
		var out, errb bytes.Buffer
		code := run(append([]string{"delete", "-address", srv.URL}, tc.args...), &out, &errb)
		mu.Lock()
		got := slices.Clone(deleted)
		mu.Unlock()
		if code != tc.code || !slices.Equal(got, tc.want) || !strings.Contains(errb.String(), tc.errText) {
			t.Errorf("delete %q: exit %d, deleted %q, stderr %q; want exit %d, %q, %q", tc.args, code, got, errb.String(), tc.code, tc.want, tc.errText)
		}
	}
}
