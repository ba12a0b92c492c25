package sim_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/sim"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", name, diff)
	}
}

func TestTraceRoundTrip(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 2000, Seed: 5})
	evs := topo.Trace(sim.TraceOptions{Policies: 300, Seed: 5})
	kinds := map[sim.EventKind]int{}
	for _, e := range evs {
		kinds[e.Kind]++
		if err := e.Validate(); err != nil {
			t.Fatalf("generated event %+v: %v", e, err)
		}
	}
	for _, k := range []sim.EventKind{sim.EventService, sim.EventTraining, sim.EventSiteDown, sim.EventNodeDown, sim.EventDrift} {
		if kinds[k] == 0 {
			t.Errorf("the generated trace has no %s event: %v", k, kinds)
		}
	}
	var b bytes.Buffer
	if err := sim.WriteCSV(&b, evs); err != nil {
		t.Fatal(err)
	}
	back, err := sim.ReadTrace("trace.csv", &b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, back); diff != "" {
		t.Fatalf("CSV round trip (-wrote +read):\n%s", diff)
	}
}

func TestReadTraceYAML(t *testing.T) {
	t.Parallel()
	src := `events:
- {at: 0s, kind: service, name: scorer, replicas: 2, clients: [shop-1, shop-2], p99: 10ms, cpu: 500m, memory: 1Gi, data: "sha256:m1", bytes: 200Mi}
- {at: 2s, kind: site-down, target: shop-1}
- {at: 1s, kind: training, name: tune, nodes: 2, gpus: 8, gpu_model: H100, data: "ds:1", bytes: 10Gi}
`
	evs, err := sim.ReadTrace("trace.yaml", strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[1].Kind != sim.EventTraining || evs[2].Kind != sim.EventSiteDown {
		t.Fatalf("events not read in time order: %+v", evs)
	}
	s := evs[0]
	if s.CPU != 500 || s.Memory != 1<<30 || s.Bytes != 200<<20 || len(s.Clients) != 2 || s.P99.Milliseconds() != 10 {
		t.Errorf("service read as %+v", s)
	}
}

// TestReadTraceErrors: a bad trace names the file, the line (and column
// in YAML) and the field.
func TestReadTraceErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, src string }{
		{"bad.csv", "at,kind,name,clients,p99\n0s,service,a,shop-1,10ms\n1s,service,b,shop-1,soon\n"},
		{"columns.csv", "at,kind,colour\n"},
		{"nokind.csv", "at,name\n0s,a\n"},
		{"kind.csv", "at,kind,name\n0s,deploy,a\n"},
		{"target.csv", "at,kind\n0s,site-down\n"},
		{"short.csv", "at,kind,name\n0s,service\n"},
		{"bad.yaml", "events:\n- {at: 0s, kind: service, name: a, memory: lots}\n"},
		{"field.yaml", "events:\n- at: 0s\n  kind: service\n  colour: red\n"},
		{"clients.yaml", "events:\n- {at: 0s, kind: service, name: a, p99: 5ms}\n"},
	}
	var b strings.Builder
	for _, c := range cases {
		_, err := sim.ReadTrace(c.name, strings.NewReader(c.src))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		b.WriteString(err.Error() + "\n")
	}
	golden(t, "trace_errors.golden", b.String())
}
