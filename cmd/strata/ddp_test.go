package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// TestPytorchDDPExample runs examples/pytorch-ddp as its README does: three
// agent processes on one fabric, the data and the code pushed with the
// CLI, job.yaml applied as shipped. The gang trains across all three with
// real PyTorch under torchrun, and the model rank 0 exported is registered,
// served and predicts what PyTorch did.
func TestPytorchDDPExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("torchrun"); err != nil {
		t.Skip("no torchrun in PATH: install python3-torch and python3-onnx (scripts/install-debs.sh)")
	}
	if os.Getenv("STRATA_ORT_LIB") == "" {
		t.Skip("STRATA_ORT_LIB is not set: run `make setup-ort`")
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "pki")
	if _, err := cli(t, "unused", "keygen", "-pki", keys); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte("tier: onprem\nsite: rack-1\nfabric: ib:rack-1\n"), 0o600)
	var ps []*proc
	for i := range 3 {
		p := &proc{name: fmt.Sprintf("gpu-%d", i+1), dir: filepath.Join(dir, fmt.Sprint(i)),
			api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			args: append([]string{"-config", cfg}, caHolderArgs(t, keys)...)}
		if i > 0 {
			p.args = append(p.args, "-join", ps[0].gossip)
		}
		startAgent(t, p)
		ps = append(ps, p)
	}
	defer func() {
		if t.Failed() {
			for _, p := range ps {
				t.Logf("%s log:\n%s", p.name, p.log)
			}
		}
	}()
	meshtest.WaitFor(t, 30*time.Second, "three agents alive", func() bool {
		ms := membersOf(t, ps[2].api)
		alive := 0
		for _, m := range ms {
			if m.Status == mesh.StatusAlive && m.Tier != "" {
				alive++
			}
		}
		return alive == 3
	})

	api := ps[0].api
	// The data comes from the example's generator, run by the Python
	// torchrun runs.
	data := filepath.Join(dir, "transactions.csv")
	gen := exec.Command(torchrunPython(t), "../../examples/pytorch-ddp/make_data.py", "600")
	var stderr bytes.Buffer
	gen.Stderr = &stderr
	rows, err := gen.Output()
	if err != nil {
		t.Fatalf("make_data.py: %v\n%s", err, stderr.String())
	}
	os.WriteFile(data, rows, 0o600)
	if out, err := cli(t, api, "push", data, "--kind", "dataset", "--name", "transactions", "--version", "2026-11"); err != nil {
		t.Fatalf("push the data: %v\n%s", err, out)
	}
	if out, err := cli(t, api, "push", "../../examples/pytorch-ddp", "--kind", "code", "--name", "pytorch-ddp", "--version", "1"); err != nil || !strings.Contains(out, "code/pytorch-ddp@1 pushed") {
		t.Fatalf("push the code: %v\n%s", err, out)
	}
	if out, err := cli(t, api, "apply", "-f", "../../examples/pytorch-ddp/job.yaml"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	type job struct {
		Name    string   `json:"name"`
		State   string   `json:"state"`
		Node    string   `json:"node"`
		Nodes   []string `json:"nodes"`
		Attempt int      `json:"attempt"`
		Model   string   `json:"model"`
		Version string   `json:"version"`
		Error   string   `json:"error"`
	}
	var j job
	meshtest.WaitFor(t, 4*time.Minute, "the gang to end", func() bool {
		out, err := cli(t, api, "jobs", "-o", "json")
		var jobs []job
		if err != nil || json.Unmarshal([]byte(out), &jobs) != nil {
			return false
		}
		for _, x := range jobs {
			if x.Name == "pytorch-ddp-fraud" && (x.State == "succeeded" || x.State == "failed") {
				j = x
				return true
			}
		}
		return false
	})
	if j.State != "succeeded" || len(j.Nodes) != 3 || j.Model != "fraud-ddp" || j.Version != "1" {
		out, _ := cli(t, api, "logs", "pytorch-ddp-fraud")
		t.Fatalf("job %+v\nnode 0's torchrun:\n%s", j, out)
	}
	// Each node's log is its torchrun's; every worker joined one world of
	// 3 and ended with the same weights.
	digest := ""
	for rank := range 3 {
		out, err := cli(t, ps[(rank+1)%3].api, "logs", "pytorch-ddp-fraud", "-rank", fmt.Sprint(rank))
		m := regexp.MustCompile(fmt.Sprintf(`\[default0\]:rank %d world (\d+) weights ([0-9a-f]{64})`, rank)).FindStringSubmatch(out)
		switch {
		case err != nil || m == nil:
			t.Fatalf("logs of rank %d: %v\n%s", rank, err, out)
		case m[1] != "3":
			t.Errorf("rank %d was in a world of %s, want 3", rank, m[1])
		case digest == "":
			digest = m[2]
		case m[2] != digest:
			t.Errorf("rank %d ended with weights %s, rank 0 with %s", rank, m[2], digest)
		}
	}
	var lineage string
	meshtest.WaitFor(t, 30*time.Second, "the model's lineage", func() bool {
		out, err := cli(t, api, "lineage", "fraud-ddp:1")
		lineage = out
		return err == nil
	})
	for _, want := range []string{"trained by job pytorch-ddp-fraud", "torchrun", "dataset transactions@2026-11", "code:    pytorch-ddp@1", "command: train.py", "train_accuracy=", "world_size=3"} {
		if !strings.Contains(lineage, want) {
			t.Errorf("lineage of fraud-ddp:1 does not say %q:\n%s", want, lineage)
		}
	}
	// Only what train.py reported: no builtin figure shows up as a zero.
	if strings.Contains(lineage, "holdout_rows") {
		t.Errorf("lineage of fraud-ddp:1 has metrics train.py never wrote:\n%s", lineage)
	}

	// Served, it predicts what PyTorch did on rank 0.
	refs, _ := filepath.Glob(filepath.Join(dir, "*", "jobs", "pytorch-ddp-fraud-*", "out", "reference-predictions.json"))
	if len(refs) != 1 {
		t.Fatalf("rank 0's reference predictions: %v", refs)
	}
	var ref struct {
		Inputs        [][]float64 `json:"inputs"`
		Probabilities []float64   `json:"probabilities"`
	}
	if b, err := os.ReadFile(refs[0]); err != nil || json.Unmarshal(b, &ref) != nil {
		t.Fatalf("reading %s: %v", refs[0], err)
	}
	if out, err := cli(t, api, "apply", "-f", "../../examples/pytorch-ddp/serve.yaml"); err != nil {
		t.Fatalf("apply the service: %v\n%s", err, out)
	}
	var flat []float32
	for _, row := range ref.Inputs {
		for _, v := range row {
			flat = append(flat, float32(v))
		}
	}
	req, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{len(ref.Inputs), len(ref.Inputs[0])}, "datatype": "FP32", "data": flat}}})
	var resp struct {
		Outputs []struct {
			Data []float64 `json:"data"`
		} `json:"outputs"`
	}
	meshtest.WaitFor(t, time.Minute, "the model to be served", func() bool {
		code, body := httpPost(t, "http://"+ps[1].api+"/v2/models/fraud-ddp/infer", req)
		return code == 200 && json.Unmarshal(body, &resp) == nil && len(resp.Outputs) == 1
	})
	got := resp.Outputs[0].Data
	if len(got) != len(ref.Probabilities) {
		t.Fatalf("served %d probabilities, want %d", len(got), len(ref.Probabilities))
	}
	for i := range got {
		if math.Abs(got[i]-ref.Probabilities[i]) > 1e-4 {
			t.Errorf("row %d: served %.6f, PyTorch said %.6f", i, got[i], ref.Probabilities[i])
		}
	}
}

// torchrunPython is the interpreter torchrun's script names on its first
// line: the Python that has torch (and numpy).
func torchrunPython(t *testing.T) string {
	path, err := exec.LookPath("torchrun")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(strings.TrimPrefix(line, "#!"))
	if !strings.HasPrefix(line, "#!") || len(f) == 0 {
		t.Fatalf("%s does not start with #!PYTHON: %q", path, line)
	}
	if filepath.Base(f[0]) == "env" && len(f) > 1 {
		return f[1] // #!/usr/bin/env python3
	}
	return f[0]
}

func httpPost(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
