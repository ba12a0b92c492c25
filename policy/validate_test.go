package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const isHead = "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc}\nspec:\n  model: {name: m}\n"
const tjHead = "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: job}\nspec:\n"

// parseErrors parses src and returns its errors without the file name.
func parseErrors(tb testing.TB, src string) []string {
	tb.Helper()
	_, err := Parse("f.yaml", []byte(src))
	if err == nil {
		return nil
	}
	var el ErrorList
	if !errors.As(err, &el) {
		tb.Fatalf("error is %T, want ErrorList: %v", err, err)
	}
	if !errors.Is(err, ErrInvalid) {
		tb.Errorf("errors.Is(err, ErrInvalid) is false")
	}
	var out []string
	for _, e := range el {
		out = append(out, strings.TrimPrefix(e.Error(), "f.yaml:"))
	}
	return out
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"unknown field", isHead + "  replica: 2\n",
			[]string{"6:3: spec.replica: unknown field (known: model, replicas, perClientSite, resources, latency, tiers, spread, constraints, affinities, prestage, warm, burst, autoscale, rollout, drift, retrain)"}},
		{"duplicate key", isHead + "  replicas: 2\n  replicas: 3\n",
			[]string{"7:3: spec.replicas: duplicate field"}},
		{"duplicate top-level key", isHead + "kind: TrainingJob\n",
			[]string{"6:1: kind: duplicate field"}},
		{"wrong type", isHead + "  replicas: two\n",
			[]string{`6:13: spec.replicas: want a whole number, got "two"`}},
		{"float for int", isHead + "  replicas: 1.5\n",
			[]string{`6:13: spec.replicas: want a whole number, got "1.5"`}},
		{"list for mapping", isHead + "  resources: [1, 2]\n",
			[]string{"6:14: spec.resources: want a mapping of fields"}},
		{"bad cpu", isHead + "  resources: {cpu: 2 cores}\n",
			[]string{`6:20: spec.resources.cpu: invalid cpu quantity "2 cores": want cores (2, 0.5) or millicores (500m)`}},
		{"zero replicas", isHead + "  replicas: 0\n",
			[]string{"6:13: spec.replicas: must be at least 1, got 0 (or set perClientSite: true for one per client site)"}},
		{"negative replicas per site", isHead + "  replicas: -1\n  perClientSite: true\n  latency: {p99: 20ms, clients: [a]}\n",
			[]string{"6:13: spec.replicas: must be at least 1, got -1 (with perClientSite it counts replicas per client site)"}},
		{"perClientSite without clients", isHead + "  perClientSite: true\n",
			[]string{"6:18: spec.perClientSite: needs latency.clients: the client sites to serve"}},
		{"zero p99", isHead + "  latency: {p99: 0s, clients: [a]}\n",
			[]string{"6:18: spec.latency.p99: must be a positive duration such as 20ms"}},
		{"missing p99", isHead + "  latency: {clients: [a, a]}\n",
			[]string{"6:12: spec.latency.p99: must be a positive duration such as 20ms", `6:26: spec.latency.clients[1]: client site or region "a" is listed twice`}},
		{"p99 without unit", isHead + "  latency: {p99: 20, clients: [a]}\n",
			[]string{`6:18: spec.latency.p99: invalid duration "20": want a number with a unit such as 20ms, 1.5s or 2h`}},
		{"huge p99", isHead + "  latency: {p99: 2m, clients: [a]}\n",
			[]string{"6:18: spec.latency.p99: 2m0s is not a latency SLO: at most 1m0s"}},
		{"unknown tier", isHead + "  tiers: [edge, fog]\n",
			[]string{`6:17: spec.tiers[1]: "fog" is not a tier: use edge, onprem or cloud`}},
		{"empty tiers", isHead + "  tiers: []\n",
			[]string{"6:10: spec.tiers: name at least one tier, or leave tiers out for the default"}},
		{"bad digest", "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc}\nspec:\n  model: {digest: sha256:abc}\n",
			[]string{`5:19: spec.model.digest: "sha256:abc" is not a digest: want sha256: and 64 lower-case hex digits`}},
		{"no model", "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc}\nspec:\n  replicas: 1\n",
			[]string{"5:3: spec.model: name a model: {name: NAME, version: V} or {digest: sha256:...}"}},
		{"unknown kind", "apiVersion: strata/v1\nkind: Deployment\nmetadata: {name: svc}\nspec: {}\n",
			[]string{`2:7: kind: "Deployment" is not a policy kind: use InferenceService or TrainingJob`}},
		{"unknown apiVersion", "apiVersion: v1\nkind: TrainingJob\nmetadata: {name: j}\nspec: {}\n",
			[]string{`1:13: apiVersion: "v1" is not supported: use strata/v1`}},
		{"missing everything", "foo: 1\n",
			[]string{"1:1: foo: unknown field (a document has apiVersion, kind, metadata and spec)", "1:1: apiVersion: required field is missing",
				"1:1: kind: required field is missing", "1:1: metadata: required field is missing", "1:1: spec: required field is missing"}},
		{"not a mapping", "- a\n- b\n",
			[]string{"1:1: (document): a policy document must be a mapping with apiVersion, kind, metadata and spec"}},
		{"bad name", "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: job-, labels: {\"a b\": c}}\nspec: {}\n",
			[]string{`3:18: metadata.name: "job-" is not a valid name: lower-case letters, digits and '-', starting with a letter and ending with a letter or digit, at most 63 characters`,
				`3:33: metadata.labels.a b: "a b" is not a label key: letters, digits, '-', '_' and '.', optionally after a DNS prefix and '/'`}},
		{"duplicate names", tjHead + "  retries: 1\n---\n" + tjHead + "  retries: 2\n",
			[]string{"9:18: metadata.name: TrainingJob/job is defined twice in this file (first at line 3)"}},
		{"same name, other kind", isHead + "---\n" + strings.Replace(tjHead, "job", "svc", 1), nil},
		{"gpusPerNode without gang size", tjHead + "  gang: {gpusPerNode: 8}\n",
			[]string{"5:9: spec.gang.nodes: gpusPerNode needs nodes: how many nodes the gang spans"}},
		{"gang without size is one node", tjHead + "  gang: {fabric: any}\n", nil},
		{"gpus disagree", tjHead + "  gang: {nodes: 2, gpusPerNode: 8}\n  resources: {gpus: {count: 4}}\n",
			[]string{"5:33: spec.gang.gpusPerNode: 8 disagrees with resources.gpus.count 4: set one of them"}},
		{"too many gpus", tjHead + "  gang: {nodes: 2, gpusPerNode: 65}\n",
			[]string{"5:33: spec.gang.gpusPerNode: 65 GPUs on one node is more than any node has (64)"}},
		{"exec without command", tjHead + "  launcher: exec\n  env: {1X: a}\n",
			[]string{"5:13: spec.command: the exec launcher needs a command", `6:9: spec.env.1X: "1X" is not an environment variable name: letters, digits and '_', not starting with a digit`}},
		{"builtin with args", tjHead + "  args: [--fast]\n  builtin: {algorithm: logreg, hidden: [8]}\n",
			[]string{"5:9: spec.args: the builtin launcher takes no args: set launcher: exec", "6:40: spec.builtin.hidden: logreg has no hidden layers: set algorithm: mlp"}},
		{"exec with builtin", tjHead + "  command: [python]\n  builtin: {epochs: 3}\n",
			[]string{"6:12: spec.builtin: only the builtin launcher takes builtin settings"}},
		{"bad dataset", tjHead + "  data: [{dataset: \"a b\"}, {artifact: \"sha256:00\"}, {dataset: x, size: 1TB}]\n",
			[]string{`5:20: spec.data[0].dataset: "a b" is not a dataset: want name or name:version`,
				`5:39: spec.data[1].artifact: "sha256:00" is not a digest: want sha256: and 64 lower-case hex digits`}},
		{"zero maxDuration", tjHead + "  maxDuration: 0s\n",
			[]string{"5:16: spec.maxDuration: must be a positive duration such as 2h"}},
		{"rollout and drift shapes", isHead + "  rollout: {strategy: blue-green, canaryRequests: 0, maxErrorRate: 2}\n  drift: {detector: chi2, window: 10, reference: last, features: [amount, amount], threshold: -1}\n",
			[]string{`6:23: spec.rollout.strategy: "blue-green" is not a strategy: use canary or all`,
				"6:51: spec.rollout.canaryRequests: must be at least 1, got 0",
				"6:68: spec.rollout.maxErrorRate: 2 is not a rate: want 0 to 1",
				`7:21: spec.drift.detector: "chi2" is not a detector: use psi, ks or wasserstein`,
				"7:35: spec.drift.window: 10 samples is too few to compare distributions: at least 30",
				`7:50: spec.drift.reference: "last" is not a reference: use training or first`,
				`7:75: spec.drift.features[1]: feature "amount" is listed twice`,
				"7:95: spec.drift.threshold: must be positive, got -1"}},
		{"retrain template is checked", isHead + "  retrain:\n    gang: {nodes: 0}\n",
			[]string{"7:19: spec.retrain.gang.nodes: must be at least 1, got 0"}},
		{"CEL error column in a plain scalar", isHead + "  constraints:\n    - node.tier == 3\n",
			[]string{"7:17: spec.constraints[0]: CEL: found no matching overload for '_==_' applied to '(string, int)'"}},
		{"CEL error column in a quoted scalar", isHead + "  constraints: [\"node.foo == 'x'\"]\n",
			[]string{"6:22: spec.constraints[0]: CEL: undefined field 'foo'"}},
		{"CEL error line in a block scalar", isHead + "  constraints:\n    - |\n      node.tier == \"edge\" &&\n        node.gpus.exists(g, g.mem > 0)\n",
			[]string{"9:30: spec.constraints[0]: CEL: undefined field 'mem'"}},
		{"CEL non-bool constraint", isHead + "  constraints: [node.cpu]\n",
			[]string{"6:17: spec.constraints[0]: CEL: expression has type int: a constraint must be bool"}},
		{"CEL affinity", isHead + "  affinities:\n    - {expr: node.tier, weight: 2}\n    - {weight: 1}\n",
			[]string{"7:14: spec.affinities[0].expr: CEL: expression has type string: an affinity must be bool, int or double",
				"8:7: spec.affinities[1].expr: required field is missing"}},
		{"several documents, all errors", isHead + "  replicas: 0\n---\n" + tjHead + "  retries: -2\n",
			[]string{"6:13: spec.replicas: must be at least 1, got 0 (or set perClientSite: true for one per client site)",
				"12:12: spec.retries: want 0 to 100, got -2"}},
		{"YAML syntax", isHead + "  replicas: [1\n",
			[]string{"6:1: (document): YAML syntax: did not find expected ',' or ']'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseErrors(t, tc.src)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s\nsource:\n%s", diff, tc.src)
			}
		})
	}
}

func TestNullLeavesDefault(t *testing.T) {
	docs, err := Parse("f.yaml", []byte(isHead+"  replicas: ~\n  tiers: null\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := docs[0].InferenceService
	if s.Replicas != 1 || !cmp.Equal(s.Tiers, DefaultInferenceTiers) {
		t.Errorf("replicas %d, tiers %v; want the defaults", s.Replicas, s.Tiers)
	}
}

func TestParsedValues(t *testing.T) {
	docs, err := Parse("f.yaml", []byte(isHead+`  resources: {cpu: 1.5, memory: 1.5Gi, gpus: {count: 1, memory: 80GB}}
  latency: {p99: 1.5ms, clients: [a]}
  affinities:
    - {expr: 'node.tier == "edge"'}
    - {expr: 'node.tier == "cloud"', weight: 0}
---
`+tjHead+`  gang: {nodes: 4}
  resources: {gpus: {count: 8, model: H100}}
  maxDuration: 90m
  command: [torchrun]
`))
	if err != nil {
		t.Fatal(err)
	}
	s := docs[0].InferenceService
	if s.Resources.CPU != 1500 || s.Resources.Memory != 3<<29 || s.Resources.GPUs.Memory != 80e9 {
		t.Errorf("resources = %+v", s.Resources)
	}
	if time.Duration(s.Latency.P99) != 1500*time.Microsecond {
		t.Errorf("p99 = %v", time.Duration(s.Latency.P99))
	}
	if s.Affinities[0].Weight != 1 || s.Affinities[1].Weight != 0 {
		t.Errorf("weights %v, %v; want 1 (default) and 0 (written)", s.Affinities[0].Weight, s.Affinities[1].Weight)
	}
	j := docs[1].TrainingJob
	want := Gang{Nodes: 4, GPUsPerNode: 8, RanksPerNode: 1, Fabric: FabricSame}
	if diff := cmp.Diff(want, j.Gang); diff != "" {
		t.Errorf("gang (-want +got):\n%s", diff)
	}
	if j.Launcher != LauncherExec || j.Builtin != nil || time.Duration(j.MaxDuration) != 90*time.Minute {
		t.Errorf("launcher %q builtin %v maxDuration %v", j.Launcher, j.Builtin, time.Duration(j.MaxDuration))
	}
	if docs[0].Key() != "InferenceService/svc" || docs[1].Key() != Key(KindTrainingJob, "job") || Key("TrainingJob", "job") != "TrainingJob/job" {
		t.Errorf("keys %q %q", docs[0].Key(), docs[1].Key())
	}
}

// TestDefaultsAndValidateApart checks the two steps on a document built in
// code, as the API does with a stored document.
func TestDefaultsAndValidateApart(t *testing.T) {
	x, err := CompileConstraint(`node.arch == "amd64"`)
	if err != nil {
		t.Fatal(err)
	}
	doc := &Document{Kind: KindInferenceService, Metadata: Metadata{Name: "svc"},
		InferenceService: &InferenceServiceSpec{Model: ModelRef{Name: "m"}, Constraints: []*Expr{x}, Tiers: []string{"moon"}}}
	// Validate before defaults: only the real problems, at field paths.
	err = doc.Validate()
	var el ErrorList
	if !errors.As(err, &el) {
		t.Fatalf("Validate = %v, want an ErrorList", err)
	}
	var fields []string
	for _, e := range el {
		fields = append(fields, e.Field)
	}
	if diff := cmp.Diff([]string{"apiVersion", "spec.tiers[0]"}, fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	doc.InferenceService.Tiers = nil
	doc.SetDefaults()
	if err := doc.Validate(); err != nil {
		t.Fatalf("defaulted document: %v", err)
	}
	once, _ := json.Marshal(doc)
	doc.SetDefaults()
	twice, _ := json.Marshal(doc)
	if diff := cmp.Diff(string(once), string(twice)); diff != "" {
		t.Errorf("SetDefaults is not idempotent (-once +twice):\n%s", diff)
	}
	if doc.APIVersion != APIVersion || doc.InferenceService.Replicas != 1 || len(doc.InferenceService.Tiers) != 3 {
		t.Errorf("defaults not applied: %s", once)
	}
	// A spec of the other kind is an error, not a silent choice.
	bad := &Document{APIVersion: APIVersion, Kind: KindTrainingJob, Metadata: Metadata{Name: "j"},
		InferenceService: &InferenceServiceSpec{Model: ModelRef{Name: "m"}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "spec: a TrainingJob document needs exactly its own spec") {
		t.Errorf("Validate = %v", err)
	}
}

// TestSourceRoundTrip re-parses each document's Source, as an agent does
// with a stored policy, and expects the same canonical JSON.
func TestSourceRoundTrip(t *testing.T) {
	src, err := readFile("../examples/all.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// A leading marker and comment, and an explicit end marker, too.
	src = append([]byte("# several services\n---\n"), src...)
	src = append(src, []byte("...\n---\n# the same job, on its own\n"+tjHead+"  retries: 1 # once\n")...)
	docs, err := Parse("all.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		again, err := Parse(d.Key(), []byte(d.Source))
		if err != nil || len(again) != 1 {
			t.Fatalf("%s: %v (%d docs)", d.Key(), err, len(again))
		}
		a, _ := json.Marshal(d)
		b, _ := json.Marshal(again[0])
		if diff := cmp.Diff(string(a), string(b)); diff != "" {
			t.Errorf("%s (-first +again):\n%s", d.Key(), diff)
		}
		if !strings.Contains(string(src), d.Source) || !strings.HasPrefix(d.Source, "#") && !strings.HasPrefix(d.Source, "apiVersion") {
			t.Errorf("%s: Source is not the document as written:\n%s", d.Key(), d.Source)
		}
		var shape map[string]any
		if err := json.Unmarshal(a, &shape); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"apiVersion", "kind", "metadata", "spec"} {
			if _, ok := shape[k]; !ok {
				t.Errorf("%s: JSON lacks %q: %s", d.Key(), k, a)
			}
		}
	}
}

func TestDriftStreamValidated(t *testing.T) {
	for _, tc := range []struct{ stream, want string }{
		{"{falseAlarmEvery: 5}", "spec.drift.stream.falseAlarmEvery"},
		{"{shift: 0}", "spec.drift.stream.shift"},
		{"{shift: 11}", "spec.drift.stream.shift"},
		{"{enabled: false}", ""},
		{"{falseAlarmEvery: 1000, shift: 0.5}", ""},
	} {
		src := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n  drift:\n    stream: " + tc.stream + "\n"
		docs, err := Parse("s.yaml", []byte(src))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("stream %s: %v", tc.stream, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("stream %s: err = %v, want one naming %s", tc.stream, err, tc.want)
		case tc.want == "" && tc.stream == "{enabled: false}" && docs[0].InferenceService.Drift.Stream.On():
			t.Errorf("stream %s: still on", tc.stream)
		case tc.want == "" && tc.stream != "{enabled: false}" && !docs[0].InferenceService.Drift.Stream.On():
			t.Errorf("stream %s: off", tc.stream)
		}
	}
	docs, err := Parse("s.yaml", []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n  drift: {window: 100}\n"))
	if err != nil || docs[0].InferenceService.Drift.Stream.On() {
		t.Errorf("drift without a stream block: streaming on (err %v); want it off", err)
	}
}

func TestCaptureValidated(t *testing.T) {
	svc := func(retrain string) string {
		return "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n  drift: {}\n  retrain:\n" + retrain
	}
	for _, tc := range []struct{ name, src, want string }{
		{"defaults", svc("    data: [{dataset: d}]\n    builtin: {label: y}\n    capture: {}\n"), ""},
		{"no label", svc("    data: [{dataset: d}]\n    capture: {rows: 10}\n"), "spec.retrain.capture: the builtin trainer needs builtin.label"},
		{"rows 0", svc("    builtin: {label: y}\n    capture: {rows: 0}\n"), "spec.retrain.capture.rows"},
		{"mix 1", svc("    builtin: {label: y}\n    capture: {mix: 1}\n"), "spec.retrain.capture.mix"},
		{"timeout 0", svc("    builtin: {label: y}\n    capture: {timeout: 0s}\n"), "spec.retrain.capture.timeout"},
		{"exec", svc("    command: [train.sh]\n    capture: {rows: 50}\n"), ""},
		{"exec inputs", svc("    command: [train.sh]\n    capture: {source: inputs}\n"), ""},
		{"builtin inputs", svc("    builtin: {label: y}\n    capture: {source: inputs}\n"), "spec.retrain.capture.source: the builtin trainer needs labels"},
		{"bad source", svc("    command: [train.sh]\n    capture: {source: logs}\n"), `spec.retrain.capture.source: "logs" is not a capture source`},
		{"exec mix", svc("    command: [train.sh]\n    data: [{dataset: d, mix: 0.3}]\n"), "spec.retrain.data[0].mix: only the builtin trainer mixes"},
		{"mixes add up", svc("    builtin: {label: y}\n    data: [{dataset: d, mix: 0.6}, {dataset: e, mix: 0.6}]\n"), "spec.retrain.data: the datasets' mix adds up to 1.2"},
		{"training job", "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: j}\nspec:\n  builtin: {label: y}\n  capture: {}\n", "spec.capture: only an InferenceService's retrain captures live data"},
	} {
		docs, err := Parse("s.yaml", []byte(tc.src))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want one with %q", tc.name, err, tc.want)
		case tc.name == "defaults":
			c := docs[0].InferenceService.Retrain.Capture
			if c.Rows != DefaultCaptureRows || c.Mix != DefaultCaptureMix || time.Duration(c.Timeout) != DefaultCaptureTimeout || c.Source != CaptureFeedback {
				t.Errorf("capture defaults = %+v", c)
			}
		}
	}
}
