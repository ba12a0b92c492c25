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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// upgradeFrom is the version a rolling upgrade starts from: the last
// commit before records carried a schema (it writes none, so schema 1.0),
// with the fix for the replica that stalled a placement
// (TestReplicaReassignedWhileKept). Older versions have that bug and can
// stall a rolling upgrade away from them whichever way it goes: restart
// the agent whose placement says "loading" for long. STRATA_UPGRADE_FROM
// overrides it.
const upgradeFrom = "63d8562"

// upgradeFromFixes are later fixes built into upgradeFrom, as a point
// release of its line would carry them: 809cc39 forwards to a node that
// is briefly suspect. Without it, a request to an agent still on
// upgradeFrom can fail with "scorer is served nowhere in the mesh" while
// the node that serves is suspect for a moment on a busy machine (1 of 86
// requests in one full test run): a bug of the old version that 809cc39
// fixed, not of the upgrade. They apply to the default upgradeFrom only.
var upgradeFromFixes = []string{"809cc39"}

// TestRollingUpgrade builds the strata of upgradeFrom from this
// repository's history, runs a mesh of three of its agents serving a model,
// and upgrades them one by one to this tree's binary (each leaves, starts
// again on its data dir, rejoins) while a client keeps sending inference
// requests to the agents that are up, as a load balancer that drains the
// one being upgraded would. No request may fail, and no agent, old or new,
// may reject a record the other version wrote.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	if os.Getenv("STRATA_ORT_LIB") == "" {
		t.Skip("STRATA_ORT_LIB is not set: run `make setup-ort`")
	}
	from, fixes := os.Getenv("STRATA_UPGRADE_FROM"), []string(nil)
	if from == "" {
		from, fixes = upgradeFrom, upgradeFromFixes
	}
	old := buildAt(t, from, fixes...)

	dir := t.TempDir()
	keys := filepath.Join(dir, "pki")
	if _, err := cli(t, "unused", "keygen", "-pki", keys); err != nil {
		t.Fatal(err)
	}
	var ps []*proc
	for i := range 3 {
		p := &proc{name: fmt.Sprintf("u%d", i), dir: filepath.Join(dir, fmt.Sprint(i)), bin: old,
			api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			// onprem: controllers, which alone write policies and
			// placements once the agents sign.
			args: append(caHolderArgs(t, keys), "-log-level", "info", "-tier", "onprem")}
		if i > 0 {
			p.args = append(p.args, "-join", ps[0].gossip)
		}
		startAgent(t, p)
		ps = append(ps, p)
	}
	// dump logs what each agent logged and sees, to explain a failure or
	// a slow step.
	earlier := map[string]string{} // what each agent logged before its restart
	dump := func() {
		for _, p := range ps {
			if e := earlier[p.name]; e != "" {
				t.Logf("%s log before its restart:\n%s", p.name, e)
			}
			t.Logf("%s log:\n%s", p.name, p.log)
			out, _ := cli(t, p.api, "placements")
			ms, _ := cli(t, p.api, "members")
			t.Logf("%s's placements:\n%s\nmembers:\n%s", p.name, out, ms)
			if resp, err := http.Get("http://" + p.api + "/v1/nodes/" + p.name); err == nil {
				var n mesh.Node
				json.NewDecoder(resp.Body).Decode(&n)
				resp.Body.Close()
				t.Logf("%s's replicas: %+v", p.name, n.Replicas)
			}
		}
	}
	defer func() {
		if t.Failed() {
			dump()
		}
	}()
	allAlive := func() bool {
		for _, p := range ps {
			n := 0
			for _, m := range membersOf(t, p.api) {
				if m.Status == mesh.StatusAlive {
					n++
				}
			}
			if n != 3 {
				return false
			}
		}
		return true
	}
	meshtest.WaitFor(t, 30*time.Second, "three agents of "+from, allAlive)

	b, layers, err := onnx.RandomMLP(11, 4, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "model.onnx")
	os.WriteFile(model, b, 0o600)
	if out, err := cli(t, ps[0].api, "push", model, "--name", "scorer", "--version", "1"); err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	codeDir := filepath.Join(dir, "tools")
	os.Mkdir(codeDir, 0o700)
	os.WriteFile(filepath.Join(codeDir, "train.py"), []byte("print('hello')\n"), 0o600)
	svc := filepath.Join(dir, "svc.yaml")
	os.WriteFile(svc, []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: scorer}\nspec:\n  model: {name: scorer, version: \"1\"}\n  replicas: 2\n  resources: {cpu: 10m, memory: 16Mi}\n"), 0o600)
	if out, err := cli(t, ps[1].api, "apply", "-f", svc); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	x := []float32{0.5, -1, 2, 0.25}
	want := onnx.Predict(layers, x, 1)[0]
	req, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 4}, "datatype": "FP32", "data": x}}})
	infer := func(p *proc) error {
		code, body := httpPost(t, "http://"+p.api+"/v2/models/scorer/infer", req)
		var resp struct {
			Outputs []struct {
				Data []float64 `json:"data"`
			} `json:"outputs"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &resp) != nil || len(resp.Outputs) != 1 || len(resp.Outputs[0].Data) != 1 {
			return fmt.Errorf("%s: %d %s", p.name, code, body)
		}
		if got := resp.Outputs[0].Data[0]; math.Abs(got-float64(want)) > 1e-4 {
			return fmt.Errorf("%s answered %v, want %v", p.name, got, want)
		}
		return nil
	}
	// nodesOf is what p sees of the nodes, nil when it does not answer.
	nodesOf := func(p *proc) ([]mesh.Node, error) {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + p.api + "/v1/nodes")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var ns []mesh.Node
		err = json.NewDecoder(resp.Body).Decode(&ns)
		return ns, err
	}
	// servedEverywhere says whether every agent answers, and knows that
	// two nodes serve (a third may still serve while a placement moves):
	// an agent that has not heard yet that a replica loaded (a gossip
	// round, longer on a busy host) forwards only to the other one, and
	// fails requests once that one is drained.
	servedEverywhere := func() bool {
		for _, p := range ps {
			ns, err := nodesOf(p)
			if err != nil || infer(p) != nil {
				return false
			}
			serving := 0
			for _, n := range ns {
				if n.Status == mesh.StatusAlive && slices.Contains(n.Models, "scorer@1") {
					serving++
				}
			}
			if serving < 2 {
				return false
			}
		}
		return true
	}
	// Healthy, as an operator checks between two hosts of a rolling
	// upgrade: placed, both replicas serving, and an answer through every
	// agent. (Taking down the one replica that serves while the other
	// still loads fails requests, upgrade or not.)
	healthy := func() bool {
		out, err := cli(t, ps[1].api, "placements", "-o", "json")
		var pls []struct {
			Key   string `json:"key"`
			State string `json:"state"`
			Nodes []struct {
				Replica string `json:"replica"`
			} `json:"nodes"`
		}
		if err != nil || json.Unmarshal([]byte(out), &pls) != nil {
			return false
		}
		for _, pl := range pls {
			if pl.Key != "InferenceService/scorer" {
				continue
			}
			serving := 0
			for _, n := range pl.Nodes {
				if n.Replica == "serving" {
					serving++
				}
			}
			return pl.State == "placed" && serving == 2 && servedEverywhere()
		}
		return false
	}
	meshtest.WaitFor(t, time.Minute, "scorer placed, both replicas serving", healthy)

	// sees is what p sees of the nodes and what they serve, to explain
	// a request p failed.
	sees := func(p *proc) string {
		ns, err := nodesOf(p)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, n := range ns {
			var rs []string
			for _, r := range n.Replicas {
				rs = append(rs, r.Model+":"+r.State)
			}
			out = append(out, fmt.Sprintf("%s %s models=%v replicas=%v", n.Name, n.Status, n.Models, rs))
		}
		return strings.Join(out, "; ")
	}
	// The client: round robin over the agents that are up, as a load
	// balancer that drains an agent before it is upgraded.
	var draining, asking atomic.Int32 // the agent drained; the one being asked
	draining.Store(-1)
	asking.Store(-1)
	var sent, failed atomic.Int64
	var failures []string
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond): // pacing the client
			}
			// Claimed before the drain is read: once draining is set, a
			// request to that agent either was claimed (and is waited for)
			// or is not sent.
			k := i % len(ps)
			asking.Store(int32(k))
			if int32(k) == draining.Load() {
				asking.Store(-1)
				continue
			}
			sent.Add(1)
			err := infer(ps[k])
			asking.Store(-1)
			if err != nil {
				failed.Add(1)
				at := time.Now().UTC().Format("15:04:05.000 ")
				mu.Lock()
				failures = append(failures, at+err.Error()+"\n  "+ps[k].name+" saw then: "+sees(ps[k]))
				mu.Unlock()
			}
		}
	}()

	start := time.Now()
	for i, p := range ps {
		// Still the old version: it read what the upgraded ones wrote.
		if n := metricSum(t, p, "strata_catalog_decode_errors_total"); n != 0 {
			t.Errorf("%s (%s) rejected %v catalog records written beside upgraded agents", p.name, from, n)
		}
		draining.Store(int32(i))
		meshtest.WaitFor(t, 30*time.Second, "the request in flight to "+p.name+" to end", func() bool { return asking.Load() != int32(i) })
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
		earlier[p.name] = p.log.String()
		p.bin = ""
		// Beside agents that do not sign yet (docs/security.md).
		p.args = append(p.args, "-accept-unsigned-gossip")
		startAgent(t, p)
		restarted := time.Now()
		meshtest.WaitFor(t, time.Minute, p.name+" upgraded, alive everywhere, the service healthy", func() bool {
			return allAlive() && healthy()
		})
		if took := time.Since(restarted); took > 10*time.Second {
			// Within the minute an operator might wait, but slow: say why.
			t.Logf("%s took %s to be healthy after its restart; what the agents logged and see:", p.name, took.Round(time.Millisecond))
			dump()
		}
		draining.Store(-1)
		t.Logf("%s upgraded after %s; %d requests so far, %d failed", p.name, time.Since(start).Round(time.Millisecond), sent.Load(), failed.Load())
		if i == 0 {
			// A feature the old agents would misread waits for them.
			out, err := cli(t, p.api, "push", codeDir, "--kind", "code", "--name", "tools", "--version", "1")
			if want := "a code artifact needs every agent at schema 1.1 or newer, and u1, u2 run 1.0"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("push code beside old agents: %v %s; want it refused with %q", err, out, want)
			}
		}
	}
	// The upgrade is done when every agent sees every member at the new
	// schema (docs/install.md); a document an old agent relayed lacks it
	// until the writer's copy arrives.
	meshtest.WaitFor(t, 30*time.Second, "every agent to see every member at schema "+mesh.CurrentSchema.String(), func() bool {
		for _, p := range ps {
			ms := membersOf(t, p.api)
			if len(ms) != len(ps) {
				return false
			}
			for _, m := range ms {
				if m.Schema != mesh.CurrentSchema.String() || m.Build == "" {
					return false
				}
			}
		}
		return true
	})
	if out, err := cli(t, ps[2].api, "push", codeDir, "--kind", "code", "--name", "tools", "--version", "1"); err != nil {
		t.Errorf("push code once every agent is upgraded: %v\n%s", err, out)
	}
	upgraded := sent.Load()
	meshtest.WaitFor(t, 30*time.Second, "30 requests across the upgraded mesh", func() bool { return sent.Load() >= upgraded+30 })
	close(stop)
	wg.Wait()
	t.Logf("rolling upgrade from %s: %d requests, %d failed, in %s", from, sent.Load(), failed.Load(), time.Since(start).Round(time.Millisecond))
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed during the upgrade: %v", failed.Load(), sent.Load(), failures)
	}
	for _, p := range ps {
		if n := metricSum(t, p, "strata_catalog_decode_errors_total"); n != 0 {
			t.Errorf("%s rejected %v catalog records", p.name, n)
		}
	}
}

// buildAt builds cmd/strata as it was at commit, with the product changes
// (not the tests) of the commits fixes applied, from this repository's
// history, and returns the binary's path.
func buildAt(t *testing.T, commit string, fixes ...string) string {
	t.Helper()
	src := t.TempDir()
	archive := exec.Command("git", "archive", "--format=tar", commit)
	archive.Dir = "../.." // the repository's root: the whole tree
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		t.Skipf("no commit %s in this checkout's history (a shallow clone?): %v %s", commit, err, stderr.String())
	}
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v\n%s", commit, err, out)
	}
	for _, fix := range fixes {
		// The fix's change to the product, not to its tests.
		show := exec.Command("git", "show", "--format=", fix, "--", ".", ":(exclude)*_test.go")
		show.Dir = "../.."
		patch, err := show.Output()
		if err != nil {
			t.Skipf("no commit %s in this checkout's history (a shallow clone?): %v", fix, err)
		}
		apply := exec.Command("git", "apply", "-")
		apply.Dir, apply.Stdin = src, bytes.NewReader(patch)
		if out, err := apply.CombinedOutput(); err != nil {
			t.Fatalf("applying %s to %s: %v\n%s", fix, commit, err, out)
		}
	}
	bin := filepath.Join(t.TempDir(), "strata-"+commit)
	build := exec.Command("go", "build", "-o", bin, "./cmd/strata")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building strata at %s: %v\n%s", commit, err, out)
	}
	return bin
}

// metricSum is the sum of an agent's samples of a metric (every label).
func metricSum(t *testing.T, p *proc, name string) float64 {
	resp, err := http.Get("http://" + p.api + "/metrics")
	if err != nil {
		t.Errorf("%s /metrics: %v", p.name, err)
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return sumMetric(b, name)
}

// sumMetric is the sum of the samples of a metric (every label) in a
// /metrics page.
func sumMetric(b []byte, name string) float64 {
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			f := strings.Fields(rest)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}
