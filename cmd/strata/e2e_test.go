package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/sim"
	"github.com/strata-mesh/strata/trainer/onnx"
)

var strataBin string

func TestMain(m *testing.M) {
	// Golden files print times in the local zone: pin it, before any
	// test runs, so they read the same on every machine.
	time.Local = time.UTC
	dir, err := os.MkdirTemp("", "strata-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	strataBin = filepath.Join(dir, "strata")
	if out, err := exec.Command("go", "build", "-o", strataBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building strata: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback port free for both TCP and UDP right now,
// for an agent process to bind a moment later. It is drawn below the
// kernel's ephemeral range (32768 and up on Linux), from which every
// other test's ":0" listeners and outgoing connections take theirs: a port
// from that range, free when checked, was taken by another package's test
// before the agent bound it (go test ./... runs packages side by side).
// Ports handed out in this process are not handed out again.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			portsGiven[port] = true
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// caHolderArgs are the flags of an agent with a data plane (a free port)
// and every key `strata keygen -pki keys` wrote: the mesh CA with its key,
// the signing key and the trusted signers.
func caHolderArgs(t *testing.T, keys string) []string {
	return []string{"-data-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"-ca-cert", filepath.Join(keys, "ca.crt"), "-ca-key", filepath.Join(keys, "ca.key"),
		"-signing-key", filepath.Join(keys, "signing.key"), "-trusted-keys", filepath.Join(keys, "signing.pub")}
}

// startCAHolders starts an agent per name on loopback, each with its own
// data dir under dir, holding every key in keys (caHolderArgs) and taking
// args(i) besides; all but the first join the first.
func startCAHolders(t *testing.T, dir, keys string, names []string, args func(i int) []string) []*proc {
	t.Helper()
	var ps []*proc
	for i, name := range names {
		p := &proc{name: name, dir: filepath.Join(dir, name),
			api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			args: append(caHolderArgs(t, keys), args(i)...)}
		if i > 0 {
			p.args = append(p.args, "-join", ps[0].gossip)
		}
		startAgent(t, p)
		ps = append(ps, p)
	}
	return ps
}

type proc struct {
	name, dir, api, gossip string
	args                   []string
	// bin is the strata binary it runs; default the one built from this
	// tree.
	bin string
	cmd *exec.Cmd
	log *bytes.Buffer
}

// gossipKey is the gossip key of a test's agents: the same for every agent
// of one test (a restarted agent rejoins), another for every test, so that
// agents of other tests (and other packages' tests) that reach a reused
// port cannot gossip their way into this test's mesh.
func gossipKey(t testing.TB) string {
	sum := sha256.Sum256([]byte("strata-e2e/" + t.Name()))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func startAgent(t *testing.T, p *proc) {
	t.Helper()
	p.log = &bytes.Buffer{}
	p.cmd = exec.Command(cmp.Or(p.bin, strataBin), append([]string{"agent", "-name", p.name, "-data-dir", p.dir, "-api", p.api, "-bind", p.gossip,
		"-gossip-key", gossipKey(t), "-disable-nvml", "-log-level", "warn"}, p.args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
}

// cli runs the strata CLI against an agent and returns stdout.
func cli(t testing.TB, api string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(strataBin, args...)
	cmd.Env = append(os.Environ(), "STRATA_ADDR=http://"+api)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), &cliError{err: err, stderr: errb.String()}
	}
	return out.String(), nil
}

// cliError is a failed CLI run: its exit error and what it printed on
// stderr.
type cliError struct {
	err    error
	stderr string
}

func (e *cliError) Error() string { return e.err.Error() + ": " + e.stderr }
func (e *cliError) Unwrap() error { return e.err }

func membersOf(t *testing.T, api string) map[string]mesh.Member {
	out, err := cli(t, api, "members", "-o", "json")
	if err != nil {
		return nil
	}
	var ms []mesh.Member
	if json.Unmarshal([]byte(out), &ms) != nil {
		return nil
	}
	m := map[string]mesh.Member{}
	for _, x := range ms {
		m[x.Name] = x
	}
	return m
}

// TestThreeProcessesKillAndRestart runs three real agent processes that find
// each other through -join, kills one with SIGKILL, expects the others to
// see it failed, restarts it from its data dir and expects it back alive
// with the same ID.
func TestThreeProcessesKillAndRestart(t *testing.T) {
	t.Parallel()
	var ps []*proc
	for i, tier := range []string{"edge", "onprem", "cloud"} {
		p := &proc{
			name:   fmt.Sprintf("p%d", i),
			dir:    t.TempDir(),
			api:    fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			args:   []string{"-tier", tier, "-site", "s-" + tier},
		}
		if i > 0 {
			p.args = append(p.args, "-join", ps[0].gossip)
		}
		ps = append(ps, p)
	}
	// Start the joiners first: they retry until the first agent is up.
	for _, p := range []*proc{ps[1], ps[2], ps[0]} {
		startAgent(t, p)
	}
	meshtest.WaitFor(t, 30*time.Second, "three agents to see each other alive", func() bool {
		for _, p := range ps {
			ms := membersOf(t, p.api)
			if len(ms) != 3 {
				return false
			}
			for _, m := range ms {
				if m.Status != mesh.StatusAlive || m.Tier == "" {
					return false
				}
			}
		}
		return true
	})
	victim := ps[2]
	id := membersOf(t, ps[0].api)[victim.name].ID

	table, err := cli(t, ps[0].api, "nodes")
	if err != nil || !strings.Contains(table, "s-cloud") || !strings.Contains(table, "NAME") {
		t.Errorf("strata nodes = %q, %v", table, err)
	}

	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.cmd.Wait()
	// The victim is its site's only agent: failed with no other node of
	// its site answering is unreachable (the site is cut off or down).
	meshtest.WaitFor(t, 30*time.Second, "the killed agent to be failed (unreachable) at both others", func() bool {
		return membersOf(t, ps[0].api)[victim.name].Status == mesh.StatusUnreachable &&
			membersOf(t, ps[1].api)[victim.name].Status == mesh.StatusUnreachable
	})

	startAgent(t, victim)
	meshtest.WaitFor(t, 30*time.Second, "the restarted agent to be alive again", func() bool {
		m := membersOf(t, ps[0].api)[victim.name]
		return m.Status == mesh.StatusAlive && m.ID == id
	})
	if t.Failed() {
		for _, p := range ps {
			t.Logf("%s log:\n%s", p.name, p.log)
		}
	}
}

func TestCLIErrors(t *testing.T) {
	api := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	if _, err := cli(t, api, "members"); err == nil || !strings.Contains(err.Error(), "cannot reach the agent") {
		t.Errorf("members with no agent: err = %v", err)
	}
	if _, err := cli(t, api, "nodes", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "use table, wide, json, yaml") {
		t.Errorf("bad -o: err = %v", err)
	}
	if _, err := cli(t, api, "frobnicate"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("unknown command: err = %v", err)
	}
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(cfg, []byte("name: x\nbnid: y\n"), 0o600)
	if _, err := cli(t, api, "agent", "-config", cfg); err == nil || !strings.Contains(err.Error(), `agent.yaml:2: unknown key "bnid"`) {
		t.Errorf("agent with a bad config: err = %v", err)
	}
}

func TestDevOnce(t *testing.T) {
	t.Parallel()
	data := os.Getenv("STRATA_DEMO_DATA")
	if data == "" {
		data, _ = filepath.Abs("../../.deps/data/breast_cancer.csv")
	}
	story := true
	if lib := os.Getenv("STRATA_ORT_LIB"); lib == "" {
		story = false
	} else if _, err := os.Stat(lib); err != nil {
		story = false
	}
	if _, err := os.Stat(data); err != nil {
		story = false
	}
	args := []string{"dev", "--once", "--api", "127.0.0.1:0", "--agents", "4", "--data", data}
	if !story {
		t.Logf("ONNX Runtime or the demo dataset is missing (make setup installs both): the mesh only, without the story")
		args = append(args, "--no-model")
	}
	out, err := cli(t, "unused", args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wants := []string{"4 agents formed a mesh", "edge-a-1", "gpu-1", "8× NVIDIA H100 80GB HBM3 (declared)", "ib:rack-1", "API of edge-a-1"}
	if story {
		// The demo tells the closed loop, and no request fails on the way.
		wants = append(wants, "trained screening@1 on 569 cases", "screening@1 serving on edge-a-", "drift.alarm", "rollout.canary",
			"rollout.promoted", "screening@2 serves at both clinics", "detection delay:", " 0 failed\n")
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("dev output lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanApplyCLI runs an agent process with declared GPUs and drives the
// policy commands: plan exits 0 when everything places, 2 when something
// cannot, 1 on a bad policy (printing every error with its position).
func TestPlanApplyCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte("tier: onprem\nsite: rack-1\nfabric: ib:a\ngpus:\n  - {model: NVIDIA H100 80GB HBM3, memory: 80GiB, count: 8}\n"), 0o600)
	p := &proc{name: "g1", dir: filepath.Join(dir, "data"), api: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)), args: []string{"-config", cfg}}
	startAgent(t, p)
	meshtest.WaitFor(t, 20*time.Second, "the agent's API", func() bool { return len(membersOf(t, p.api)) == 1 })

	one := filepath.Join(dir, "one.yaml")
	os.WriteFile(one, []byte(`apiVersion: strata/v1
kind: TrainingJob
metadata: {name: small}
spec:
  resources: {gpus: {count: 4, model: H100}}
  command: [sleep, "600"]
`), 0o600)
	out, err := cli(t, p.api, "plan", "-f", one)
	if err != nil || !strings.Contains(out, "g1") {
		t.Errorf("plan of a job that fits: %v\n%s", err, out)
	}
	out, err = cli(t, p.api, "plan", "-f", "../../examples/train-fraud.yaml")
	if code := exitCode(err); code != 2 {
		t.Errorf("plan of a 2-node gang on a 1-node mesh: exit %d, want 2\n%s", code, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: b}\nspec:\n  retries: -1\n  gang: {fabric: near}\n"), 0o600)
	_, err = cli(t, p.api, "plan", "-f", bad)
	if code := exitCode(err); code != 1 || !strings.Contains(err.Error(), "bad.yaml:5:12: spec.retries") || !strings.Contains(err.Error(), "bad.yaml:6:18: spec.gang.fabric") {
		t.Errorf("plan of a bad policy: exit %d, err %v", code, err)
	}
	if out, err := cli(t, p.api, "apply", "-f", one); err != nil || !strings.Contains(out, "TrainingJob/small applied") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	meshtest.WaitFor(t, 20*time.Second, "the job placed", func() bool {
		out, err := cli(t, p.api, "placements")
		return err == nil && strings.Contains(out, "TrainingJob/small") && strings.Contains(out, "placed")
	})
	// A replay over the live mesh starts from its load: the job holds 4
	// of the node's 8 GPUs while it runs (it sleeps until deleted), so of
	// two 4-GPU arrivals only the first finds a place.
	trace := filepath.Join(dir, "trace.csv")
	os.WriteFile(trace, []byte("at,kind,name,nodes,gpus,gpu_model,cpu,memory\n0s,training,first,1,4,H100,1,1073741824\n1s,training,second,1,4,H100,1,1073741824\n"), 0o600)
	out, err = cli(t, p.api, "sim", "-live", "-trace", trace, "-strategies", "strata", "-plots", "", "-o", "json")
	var rep sim.Report
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Results) != 1 {
		t.Fatalf("sim -live: %v\n%s", err, out)
	}
	if r := rep.Results[0]; r.Jobs != 2 || r.JobsPlaced != 1 || r.SiteReplicas["rack-1"] != 1 {
		t.Errorf("sim -live: %d of %d jobs placed (%v), want the first on rack-1", r.JobsPlaced, r.Jobs, r.SiteReplicas)
	}
	if out, err := cli(t, p.api, "delete", "TrainingJob", "small"); err != nil || !strings.Contains(out, "deleted") {
		t.Errorf("delete: %v %s", err, out)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// TestPushPullCLI makes the mesh's keys with keygen -pki, runs two agent
// processes with them, pushes a model on one and pulls it on the other.
func TestPushPullCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "pki")
	if _, err := cli(t, "unused", "keygen", "-pki", keys); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, "unused", "keygen", "-pki", keys); err == nil {
		t.Error("keygen overwrote existing keys")
	}
	ps := startCAHolders(t, dir, keys, []string{"a0", "a1"}, func(int) []string { return nil })
	meshtest.WaitFor(t, 20*time.Second, "two agents", func() bool { return len(membersOf(t, ps[1].api)) == 2 })
	model := filepath.Join(dir, "model.onnx")
	b, _, err := onnx.RandomMLP(1, 512, 300, 1) // 600 KB: several chunks
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(model, b, 0o644)
	out, err := cli(t, ps[0].api, "push", model, "--name", "m", "--version", "1")
	if err != nil || !strings.Contains(out, "model/m@1 pushed") {
		t.Fatalf("push: %v\n%s", err, out)
	}
	// A file that is not an ONNX model is refused, saying why.
	pem := filepath.Join(dir, "ca.crt")
	os.WriteFile(pem, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644)
	if out, err := cli(t, ps[0].api, "push", pem, "--name", "pem", "--version", "1"); err == nil || !strings.Contains(err.Error(), "not an ONNX model") {
		t.Errorf("push of a certificate: %v\n%s", err, out)
	}
	meshtest.WaitFor(t, 20*time.Second, "the model listed at the other agent", func() bool {
		out, err := cli(t, ps[1].api, "models")
		return err == nil && strings.Contains(out, "a0")
	})
	if out, err := cli(t, ps[1].api, "models", "m"); err != nil || !strings.Contains(out, "opsets:") || !strings.Contains(out, "outputs:") || !strings.Contains(out, "ai.onnx=") {
		t.Errorf("models m: %v\n%s", err, out)
	}
	copyTo := filepath.Join(dir, "copy.onnx")
	if out, err := cli(t, ps[1].api, "pull", "m:1", "--output", copyTo); err != nil || !strings.Contains(out, "held here") {
		t.Fatalf("pull: %v\n%s", err, out)
	}
	if got, want := mustRead(t, copyTo), mustRead(t, model); !bytes.Equal(got, want) {
		t.Errorf("pull --output wrote %d bytes, not the %d pushed", len(got), len(want))
	}
	if out, err := cli(t, ps[1].api, "pull", "m:1", "--output", "-"); err != nil || out != string(mustRead(t, model)) {
		t.Errorf("pull --output -: %d bytes, %v", len(out), err)
	}
	meshtest.WaitFor(t, 20*time.Second, "both agents listed as holders", func() bool {
		out, err := cli(t, ps[0].api, "models")
		return err == nil && strings.Contains(out, "a0,a1")
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLoneSiteNodeKilled: the node serving a service that names no client
// site is its site's only agent, and is killed with SIGKILL. From outside
// that looks like its site cut off, whose replicas stay for the site's own
// clients; this service has none there, so once the site has answered
// nothing for site_lost_after (3 s here) it is placed again on a node that
// answers.
func TestLoneSiteNodeKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "pki")
	if _, err := cli(t, "unused", "keygen", "-pki", keys); err != nil {
		t.Fatal(err)
	}
	// s-c's onprem agent is the controller.
	sites := []string{"s-c", "s-a", "s-b"}
	ps := startCAHolders(t, dir, keys, []string{"lone-s-c", "lone-s-a", "lone-s-b"}, func(i int) []string {
		tier := map[bool]string{true: "onprem", false: "edge"}[i == 0]
		return []string{"-site", sites[i], "-tier", tier, "-site-lost-after", "3s"}
	})
	meshtest.WaitFor(t, 20*time.Second, "three agents", func() bool { return len(membersOf(t, ps[0].api)) == 3 })
	model := filepath.Join(dir, "model.onnx")
	b, _, err := onnx.RandomMLP(1, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(model, b, 0o644)
	if out, err := cli(t, ps[0].api, "push", model, "--name", "m", "--version", "1"); err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	svc := filepath.Join(dir, "svc.yaml")
	os.WriteFile(svc, []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc}\nspec:\n  model: {name: m, version: \"1\"}\n"+
		"  replicas: 1\n  resources: {cpu: 10m, memory: 16Mi}\n  affinities:\n    - {expr: 'node.site == \"s-b\"', weight: 1}\n"), 0o644)
	if out, err := cli(t, ps[0].api, "apply", "-f", svc); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	where := func() []string {
		var got []api.PlacementStatus
		out, err := cli(t, ps[0].api, "placements", "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &got) != nil {
			return nil
		}
		for _, p := range got {
			if p.Name == "svc" {
				var nodes []string
				for _, n := range p.Nodes {
					nodes = append(nodes, n.Name)
				}
				return nodes
			}
		}
		return nil
	}
	meshtest.WaitFor(t, 30*time.Second, "svc placed on s-b's node", func() bool { return slices.Equal(where(), []string{"lone-s-b"}) })
	victim := ps[2]
	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.cmd.Wait()
	killed := time.Now()
	var last []string
	meshtest.WaitFor(t, 60*time.Second, "svc placed again on a node that answers", func() bool {
		last = where()
		return len(last) == 1 && last[0] != victim.name
	})
	t.Logf("lone-s-b killed; svc placed on %v after %s", last, time.Since(killed).Round(100*time.Millisecond))
	if t.Failed() {
		for _, p := range ps {
			t.Logf("%s log:\n%s", p.name, p.log)
		}
	}
}
