package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// cannedAgent answers GET requests with fixed JSON bodies, keyed by
// "METHOD /path" as http.ServeMux patterns read them.
func cannedAgent(tb testing.TB, routes map[string]string) string {
	tb.Helper()
	mux := http.NewServeMux()
	for pattern, body := range routes {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, body)
		})
	}
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv.URL
}

// estateRoutes is a two-node mesh with one placed service, as an agent
// answers for it.
var estateRoutes = map[string]string{
	"GET /v1/nodes": `[
 {"id":"n1","name":"edge-a-1","version":7,"tier":"edge","site":"edge-a","region":"eu","labels":{"zone":"b","gpu":"true"},
  "addrs":{"gossip":"10.0.0.1:7946","api":"10.0.0.1:7470"},"status":"alive",
  "capabilities":{"cpu":{"cores":8,"millicores":8000,"arch":"arm64","source":"proc"},"memory":{"total":17179869184},"os":"linux","gpus":[],"gpu_source":"none","rdma":[]},
  "load":{"free_cpu":6500,"free_memory":8589934592,"free_gpus":0,"workloads":1,"qps":37.5}},
 {"id":"n2","name":"gpu-1","version":3,"tier":"onprem","site":"dc","region":"eu","labels":{},
  "addrs":{"gossip":"10.0.1.1:7946","api":""},"status":"alive",
  "capabilities":{"cpu":{"cores":64,"millicores":64000,"arch":"amd64","source":"proc"},"memory":{"total":549755813888},"os":"linux",
   "gpus":[{"model":"H100","memory":85899345920,"healthy":true}],"gpu_source":"declared","rdma":[],"fabric":"ib:1"},
  "load":{"free_cpu":64000,"free_memory":549755813888,"free_gpus":1,"workloads":0,"qps":0}}
]
`,
	"GET /v1/placements": `[
 {"policy":"InferenceService/scorer","generation":3,"placed_generation":2,"key":"InferenceService/scorer","kind":"InferenceService","name":"scorer",
  "owner":"edge-a-1","epoch":4,"state":"placed","nodes":[{"name":"edge-a-1","id":"n1","tier":"edge","site":"edge-a","rank":0,"admitted":true}],
  "wanted":1,"message":"1 of 1 replicas serving","resources":{},"updated":"0001-01-01T00:00:00Z"}
]
`,
}

func TestJSONToYAML(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"b":1,"a":"x"}`:                            "b: 1\na: x\n",
		`[{"s":"true","n":"12","e":{},"l":[]}]`:      "- s: \"true\"\n  n: \"12\"\n  e: {}\n  l: []\n",
		`{"m":"a: b","z":null,"multi":"l1\nl2"}`:     "m: 'a: b'\nz: null\nmulti: |-\n  l1\n  l2\n",
		`{"nested":{"list":[1,2],"deep":{"k":"v"}}}`: "nested:\n  list:\n    - 1\n    - 2\n  deep:\n    k: v\n",
	} {
		got, err := jsonToYAML([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("jsonToYAML(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := jsonToYAML([]byte(`{"a": [`)); err == nil {
		t.Error("broken JSON: no error")
	}
}

// TestOutputFormats prints the canned estate in every -o format of the
// commands that have more than the table.
func TestOutputFormats(t *testing.T) {
	t.Parallel()
	addr := cannedAgent(t, estateRoutes)
	for _, tc := range []struct {
		golden string
		run    func(args []string, stdout, stderr io.Writer) error
		args   []string
	}{
		{"nodes-table", runNodes, []string{"-o", "table"}},
		{"nodes-wide", runNodes, []string{"-o", "wide"}},
		{"nodes-yaml", runNodes, []string{"-o", "yaml"}},
		{"placements-wide", runPlacements, []string{"-o", "wide"}},
		{"placements-yaml", runPlacements, []string{"-o", "yaml"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			if err := tc.run(append(tc.args, "-address", addr), &out, &errb); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			checkGolden(t, tc.golden, out.String())
		})
	}
	var errb bytes.Buffer
	if err := runNodes([]string{"-o", "xml", "-address", addr}, io.Discard, &errb); err == nil || !strings.Contains(err.Error(), "use table, wide, json, yaml") {
		t.Errorf("-o xml: %v", err)
	}
}

// TestNotAnAgentNamed: a web page at -address is named as such, with what
// to change, instead of being printed.
func TestNotAnAgentNamed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!doctype html><h1>Welcome to nginx!</h1>")
	}))
	t.Cleanup(srv.Close)
	for _, args := range [][]string{{"members"}, {"get", "nodes", "-o", "yaml"}, {"events", "-follow=false"}} {
		var out, errb bytes.Buffer
		code := run(append(args, "-address", srv.URL), &out, &errb)
		want := srv.URL + " answered with text/html: is it a strata agent's API address? set STRATA_ADDR or -address"
		if code != 1 || out.Len() > 0 || !strings.Contains(errb.String(), want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, out.String(), errb.String(), want)
		}
	}
}
