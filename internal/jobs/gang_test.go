package jobs_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/agent"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer"
)

// torchPython returns a Python interpreter that imports torch and onnx, or
// skips the test.
func torchPython(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import torch, onnx").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 imports torch and onnx: install python3-torch and python3-onnx (scripts/install-debs.sh)")
	return ""
}

// ortLib finds ONNX Runtime, or skips the test.
func ortLib(t *testing.T) string {
	t.Helper()
	p := os.Getenv("STRATA_ORT_LIB")
	if p == "" {
		p, _ = filepath.Abs("../../.deps/onnxruntime/libonnxruntime.so.1")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("ONNX Runtime library not found (%v): run `make setup-ort` or set STRATA_ORT_LIB", err)
	}
	return p
}

// gangMesh starts n agents of the dev mix on loopback in this process.
func gangMesh(t testing.TB, n int, lib string) ([]*agent.Agent, map[string]string) {
	t.Helper()
	keys, err := agent.NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, n)
	var agents []*agent.Agent
	dirs := map[string]string{}
	for i, cfg := range agent.DevConfigs(n, t.TempDir(), "127.0.0.1:0") {
		cfg.GossipKey = base64.StdEncoding.EncodeToString(key)
		cfg.MeshTimings = meshtest.FastTimings
		cfg.LogLevel = "error"
		if lvl := os.Getenv("STRATA_TEST_LOG"); lvl != "" {
			cfg.LogLevel = lvl
		}
		cfg.ProcRoot = "../../agent/discover/testdata/proc"
		cfg.PKI, cfg.ORTLibrary = keys, lib
		// A rack of CPU hosts on one fabric: where the placement engine
		// puts a gang (not the edge, and one fabric for all its members).
		cfg.Tier, cfg.Site, cfg.Region, cfg.Fabric = "onprem", "rack-1", "eu-west", "ib:rack-1"
		cfg.RDMA = []agent.DeclaredRDMA{{Device: "mlx5_0", Port: 1, LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", Fabric: cfg.Fabric}}
		cfg.GPUs, cfg.DisableNVML = nil, true
		cfg.APIAllowedHosts = []string{"example.com"} // httptest.NewRequest's Host
		if i > 0 {
			cfg.Join = []string{agents[0].Mesh().GossipAddr()}
		}
		a, err := agent.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
		dirs[cfg.Name] = cfg.DataDir
		go func() { _ = a.Run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range agents {
			<-done
		}
	})
	meshtest.WaitFor(t, 20*time.Second, "the mesh to form", func() bool {
		for _, a := range agents {
			alive := 0
			for _, m := range a.Mesh().Members() {
				if m.Status == mesh.StatusAlive && m.Tier != "" {
					alive++
				}
			}
			if alive != n {
				return false
			}
		}
		return true
	})
	return agents, dirs
}

func call(t testing.TB, h http.Handler, method, path string, body []byte) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, bytes.NewReader(body)))
	return rec.Code, rec.Body.Bytes()
}

// ddpData is a small separable data set: label = a + b > 0.
func ddpData(rows int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString("a,b,c,d,label\n")
	for range rows {
		v := [4]float64{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}
		label := 0
		if v[0]+v[1] > 0 {
			label = 1
		}
		fmt.Fprintf(&b, "%.4f,%.4f,%.4f,%.4f,%d\n", v[0], v[1], v[2], v[3], label)
	}
	return []byte(b.String())
}

const ddpJob = `apiVersion: strata/v1
kind: TrainingJob
metadata:
  name: %[1]s
  labels: {strata.io/output-model: %[1]s, strata.io/output-version: "1"}
spec:
  gang: {nodes: 3}
  resources: {cpu: 100m, memory: 64Mi}
  data:
    - dataset: "ddp-data:1"
  launcher: exec
  command: [%[2]q]
  args: [%[3]q]
  env: {EPOCHS: "4", HIDDEN: "8", BATCH: "32", LR: "0.01", OMP_NUM_THREADS: "1"%[4]s}
  maxDuration: 4m
  retries: %[5]d
`

// jobView is what the test reads of GET /v1/jobs/{name}.
type jobView struct {
	State   string   `json:"state"`
	Node    string   `json:"node"`
	Nodes   []string `json:"nodes"`
	Attempt int      `json:"attempt"`
	Model   string   `json:"model"`
	Version string   `json:"version"`
	Error   string   `json:"error"`
}

// runDDP publishes the data set, applies a 3-member DDP gang and waits for
// its job to end.
func runDDP(t *testing.T, agents []*agent.Agent, name, extraEnv string, retries int, during func()) jobView {
	t.Helper()
	return runJob(t, agents, name, fmt.Sprintf(ddpJob, name, torchPython(t), ddpScript(t), extraEnv, retries), during)
}

func ddpScript(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs("../../examples/pytorch-ddp/train.py")
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// runJob publishes the data set, applies the TrainingJob src and waits for
// its job to end.
func runJob(t *testing.T, agents []*agent.Agent, name, src string, during func()) jobView {
	t.Helper()
	h := agents[0].Handler()
	if code, body := call(t, h, http.MethodPost, "/v1/artifacts?name=ddp-data&version=1&kind=dataset", ddpData(384)); code != http.StatusCreated {
		t.Fatalf("publishing the data set: %d %s", code, body)
	}
	applied := time.Now()
	meshtest.WaitFor(t, 30*time.Second, "the job's apply", func() bool {
		code, _ := call(t, h, http.MethodPost, "/v1/policies", []byte(src))
		return code < 300
	})
	if during != nil {
		during()
	}
	var j jobView
	for deadline := time.Now().Add(3 * time.Minute); ; {
		code, body := call(t, h, http.MethodGet, "/v1/jobs/"+name, nil)
		j = jobView{}
		if code == http.StatusOK && json.Unmarshal(body, &j) == nil && (j.State == "succeeded" || j.State == "failed") {
			break
		}
		if time.Now().After(deadline) {
			_, pl := call(t, h, http.MethodGet, "/v1/placements", nil)
			t.Fatalf("%s did not end: job %d %s\nplacements: %s", name, code, body, pl)
		}
		time.Sleep(100 * time.Millisecond) // polling the API, not synchronising
	}
	t.Logf("%s %s after %s (attempt %d, ranks on %v)", name, j.State, time.Since(applied).Round(time.Millisecond), j.Attempt, j.Nodes)
	return j
}

// rankLog returns rank's output through any agent's API.
func rankLog(t *testing.T, h http.Handler, job string, rank int) string {
	t.Helper()
	code, body := call(t, h, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/logs?rank=%d", job, rank), nil)
	if code != http.StatusOK {
		t.Fatalf("logs of rank %d: %d %s", rank, code, body)
	}
	return string(body)
}

var weightsLine = regexp.MustCompile(`rank (\d+) world (\d+) weights ([0-9a-f]{64})`)

// checkRanks checks that every rank joined one process group of world size
// len(nodes) and ended with the same weights.
func checkRanks(t *testing.T, agents []*agent.Agent, job string, j jobView) {
	t.Helper()
	if len(j.Nodes) != 3 {
		t.Fatalf("the gang ran on %v, want 3 nodes", j.Nodes)
	}
	digest := ""
	for rank := range j.Nodes {
		// Ask another agent than the rank's: the API fetches it from there.
		out := rankLog(t, agents[(rank+1)%len(agents)].Handler(), job, rank)
		m := weightsLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("rank %d printed no weight digest:\n%s", rank, out)
		}
		if m[1] != strconv.Itoa(rank) || m[2] != "3" {
			t.Errorf("rank %d says it was rank %s of a world of %s, want world 3", rank, m[1], m[2])
		}
		if digest == "" {
			digest = m[3]
		} else if m[3] != digest {
			t.Errorf("rank %d ended with weights %s, rank 0 with %s", rank, m[3], digest)
		}
	}
}

// TestDDPGangAcrossThreeAgents runs examples/pytorch-ddp as a gang of
// three agents, one rank each, with real PyTorch DDP over Gloo, and serves
// the ONNX model rank 0 exported.
func TestDDPGangAcrossThreeAgents(t *testing.T) {
	torchPython(t)
	agents, dirs := gangMesh(t, 3, ortLib(t))
	j := runDDP(t, agents, "ddp-gang", "", 0, nil)
	if j.State != "succeeded" {
		t.Fatalf("job %+v", j)
	}
	checkRanks(t, agents, "ddp-gang", j)
	if j.Model != "ddp-gang" || j.Version != "1" {
		t.Fatalf("the job registered %s@%s, want ddp-gang@1", j.Model, j.Version)
	}

	// The model rank 0 exported is served, and predicts what PyTorch did.
	refs, _ := filepath.Glob(filepath.Join(dirs[j.Node], "jobs", "ddp-gang-*", "out", "reference-predictions.json"))
	if len(refs) != 1 {
		t.Fatalf("rank 0's reference predictions: %v", refs)
	}
	b, err := os.ReadFile(refs[0])
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Inputs        [][]float64 `json:"inputs"`
		Probabilities []float64   `json:"probabilities"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	svc := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: ddp-gang}\nspec:\n  model: {name: ddp-gang, version: \"1\"}\n  resources: {cpu: 100m, memory: 64Mi}\n"
	h := agents[1].Handler()
	meshtest.WaitFor(t, 30*time.Second, "the service's apply", func() bool {
		code, _ := call(t, h, http.MethodPost, "/v1/policies", []byte(svc))
		return code < 300
	})
	var flat []float32
	for _, row := range ref.Inputs {
		for _, v := range row {
			flat = append(flat, float32(v))
		}
	}
	req, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{len(ref.Inputs), len(ref.Inputs[0])}, "datatype": "FP32", "data": flat}}})
	var resp struct {
		Outputs []struct {
			Name string    `json:"name"`
			Data []float64 `json:"data"`
		} `json:"outputs"`
	}
	meshtest.WaitFor(t, 60*time.Second, "the model to be served", func() bool {
		code, body := call(t, h, http.MethodPost, "/v2/models/ddp-gang/infer", req)
		return code == http.StatusOK && json.Unmarshal(body, &resp) == nil && len(resp.Outputs) == 1
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

const torchrunJob = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: %[1]s}
spec:
  gang: {nodes: 2, ranksPerNode: 2}
  resources: {cpu: 100m, memory: 64Mi}
  data:
    - dataset: "ddp-data:1"
  launcher: torchrun
  code: ddp-code
  command: [train.py]
  env: {EPOCHS: "2", HIDDEN: "8", BATCH: "32", LR: "0.01", OMP_NUM_THREADS: "1"}
  maxDuration: 4m
`

// TestTorchrunGangTwoRanksPerNode runs examples/pytorch-ddp under
// torchrun on two agents with two workers each, its code pushed as a code
// artifact: one process group of world size 4, every worker ending with
// the same weights.
func TestTorchrunGangTwoRanksPerNode(t *testing.T) {
	torchPython(t)
	if _, err := exec.LookPath("torchrun"); err != nil {
		t.Skip("no torchrun in PATH: install python3-torch (scripts/install-debs.sh)")
	}
	agents, _ := gangMesh(t, 2, ortLib(t))
	var code bytes.Buffer
	if err := trainer.PackCode(&code, filepath.Dir(ddpScript(t))); err != nil {
		t.Fatal(err)
	}
	if status, body := call(t, agents[1].Handler(), http.MethodPost, "/v1/artifacts?name=ddp-code&version=1&kind=code", code.Bytes()); status != http.StatusCreated {
		t.Fatalf("pushing the code: %d %s", status, body)
	}
	if status, body := call(t, agents[1].Handler(), http.MethodPost, "/v1/artifacts?name=not-code&version=1&kind=code", []byte("print(1)\n")); status != http.StatusUnprocessableEntity {
		t.Errorf("pushing a script that is not a code archive: %d %s, want 422", status, body)
	}
	seen := ""
	j := runJob(t, agents, "ddp-torchrun", fmt.Sprintf(torchrunJob, "ddp-torchrun"), func() {
		// The job says it runs while torchrun does (its workers' start,
		// torch's import, takes seconds).
		meshtest.WaitFor(t, 3*time.Minute, "the job running or ended", func() bool {
			_, body := call(t, agents[1].Handler(), http.MethodGet, "/v1/jobs/ddp-torchrun", nil)
			var v struct {
				State string `json:"state"`
			}
			json.Unmarshal(body, &v)
			seen = v.State
			return seen == "running" || seen == "succeeded" || seen == "failed"
		})
	})
	if seen != "running" {
		t.Errorf("the job was never seen running: %s when first seen past pending", seen)
	}
	if j.State != "succeeded" || len(j.Nodes) != 2 {
		t.Fatalf("job %+v\nnode 0's torchrun:\n%s", j, rankLog(t, agents[0].Handler(), "ddp-torchrun", 0))
	}
	// Each node's log is its torchrun's: its two workers' lines, prefixed
	// with their local rank.
	digest := ""
	for node := range 2 {
		out := rankLog(t, agents[1-node].Handler(), "ddp-torchrun", node)
		for local := range 2 {
			rank := 2*node + local
			m := regexp.MustCompile(fmt.Sprintf(`\[default%d\]:rank %d world (\d+) weights ([0-9a-f]{64})`, local, rank)).FindStringSubmatch(out)
			switch {
			case m == nil:
				t.Fatalf("node %d's log has no weight digest of rank %d:\n%s", node, rank, out)
			case m[1] != "4":
				t.Errorf("rank %d was in a world of %s, want 4", rank, m[1])
			case digest == "":
				digest = m[2]
			case m[2] != digest:
				t.Errorf("rank %d ended with weights %s, rank 0 with %s", rank, m[2], digest)
			}
		}
	}
}

// TestExecGangRanksPerNode: an exec gang of two nodes with three ranks on
// each starts six processes, each with its place in the gang; the steps
// rank 0 reports show in the job while it runs.
func TestExecGangRanksPerNode(t *testing.T) {
	agents, _ := gangMesh(t, 2, "")
	release := filepath.Join(t.TempDir(), "release")
	step := filepath.Join(t.TempDir(), "step")
	src := fmt.Sprintf(`apiVersion: strata/v1
kind: TrainingJob
metadata: {name: ranks}
spec:
  gang: {nodes: 2, ranksPerNode: 3}
  resources: {cpu: 100m, memory: 64Mi}
  data: [{dataset: "ddp-data:1"}]
  command: [sh, -c, 'echo "rank $RANK of $WORLD_SIZE, local $LOCAL_RANK of $LOCAL_WORLD_SIZE, node $NODE_RANK of $NNODES"; if [ "$RANK" = 0 ]; then while [ ! -e "$STEP" ]; do sleep 0.1; done; echo "{\"loss\": 0.5}" >> "$STRATA_METRICS_FILE"; while [ ! -e "$RELEASE" ]; do sleep 0.1; done; fi']
  env: {STEP: %q, RELEASE: %q}
  maxDuration: 2m
`, step, release)
	j := runJob(t, agents, "ranks", src, func() {
		// Running as soon as every rank is, before anything else changes,
		// and rank 0 (which holds) shown running.
		meshtest.WaitFor(t, time.Minute, "the job running, rank 0 with it", func() bool {
			_, body := call(t, agents[1].Handler(), http.MethodGet, "/v1/jobs/ranks", nil)
			var v struct {
				State   string `json:"state"`
				Members []struct {
					Rank  int    `json:"rank"`
					State string `json:"state"`
				} `json:"members"`
			}
			return json.Unmarshal(body, &v) == nil && v.State == "running" && len(v.Members) == 6 && v.Members[0].State == "running"
		})
		if err := os.WriteFile(step, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		meshtest.WaitFor(t, time.Minute, "rank 0's step in the running job", func() bool {
			_, body := call(t, agents[1].Handler(), http.MethodGet, "/v1/jobs/ranks", nil)
			var v struct {
				State string `json:"state"`
				Steps []struct {
					Step    int                `json:"step"`
					Metrics map[string]float64 `json:"metrics"`
				} `json:"steps"`
			}
			return json.Unmarshal(body, &v) == nil && v.State == "running" && len(v.Steps) == 1 && v.Steps[0].Metrics["loss"] == 0.5
		})
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if j.State != "succeeded" || len(j.Nodes) != 2 {
		t.Fatalf("job %+v", j)
	}
	for rank := range 6 {
		want := fmt.Sprintf("rank %d of 6, local %d of 3, node %d of 2\n", rank, rank%3, rank/3)
		if got := rankLog(t, agents[rank%2].Handler(), "ranks", rank); got != want {
			t.Errorf("rank %d printed %q, want %q", rank, got, want)
		}
	}
}

// TestDDPGangRestartsWhenARankIsKilled kills one member's rank in the
// middle of the first attempt (the script holds there): the whole gang
// stops, starts again at attempt 2 from rank 0's checkpoint, and finishes.
func TestDDPGangRestartsWhenARankIsKilled(t *testing.T) {
	torchPython(t)
	agents, dirs := gangMesh(t, 3, ortLib(t))
	// Only this mesh's ranks: other test processes on the host may run
	// this job too.
	root := filepath.Dir(dirs[agents[0].Name()])
	killed := 0
	j := runDDP(t, agents, "ddp-kill", `, STALL_AFTER_EPOCH: "1"`, 1, func() {
		// Every rank holds after epoch 1 of attempt 1; rank 2 is killed there.
		meshtest.WaitFor(t, 3*time.Minute, "rank 2 to hold after epoch 1", func() bool {
			if code, body := call(t, agents[0].Handler(), http.MethodGet, "/v1/jobs/ddp-kill", nil); code == http.StatusOK {
				var j jobView
				if json.Unmarshal(body, &j) == nil && (j.Attempt > 1 || j.State == "failed" || j.State == "succeeded") {
					t.Fatalf("the first attempt ended before rank 2 was killed: %s", body)
				}
			}
			for _, a := range agents {
				if strings.Contains(rankLogQuiet(a.Handler(), "ddp-kill", 2), "rank 2 holding after epoch 1") {
					killed = rankPID(root, "ddp-kill", 2, 1)
					return killed > 0
				}
			}
			return false
		})
		if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	if j.State != "succeeded" || j.Attempt != 2 {
		t.Fatalf("after rank 2 was killed: %+v; want succeeded at attempt 2", j)
	}
	checkRanks(t, agents, "ddp-kill", j)
	if out := rankLog(t, agents[0].Handler(), "ddp-kill", 0); !strings.Contains(out, "resumed from the checkpoint of epoch 1") {
		t.Errorf("attempt 2 did not resume from the checkpoint of epoch 1:\n%s", out)
	}
}

func rankLogQuiet(h http.Handler, job string, rank int) string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, fmt.Sprintf("/v1/jobs/%s/logs?rank=%d", job, rank), nil))
	if rec.Code != http.StatusOK {
		return ""
	}
	return rec.Body.String()
}

// rankPID finds the process of a job's rank at an attempt by its
// environment, among those whose data lies under root (0 when none).
func rankPID(root, job string, rank, attempt int) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	want := []string{"STRATA_JOB_ID=" + job, "RANK=" + strconv.Itoa(rank), "STRATA_ATTEMPT=" + strconv.Itoa(attempt)}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		env := strings.Split(string(b), "\x00")
		all := slices.ContainsFunc(env, func(e string) bool {
			return strings.HasPrefix(e, "STRATA_DATASET_DIR="+root+string(filepath.Separator))
		})
		for _, w := range want {
			all = all && slices.Contains(env, w)
		}
		if all {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}
