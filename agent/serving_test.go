package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// ortLib finds the ONNX Runtime library the way `make setup-ort` installs
// it, or skips the test.
func ortLib(t testing.TB) string {
	t.Helper()
	p := os.Getenv("STRATA_ORT_LIB")
	if p == "" {
		p, _ = filepath.Abs("../.deps/onnxruntime/libonnxruntime.so.1")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("ONNX Runtime library not found (%v): run `make setup-ort` or set STRATA_ORT_LIB", err)
	}
	return p
}

const servePolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: scorer}
spec:
  model: {name: scorer, version: "%s"}
  perClientSite: true
  resources: {cpu: 250m, memory: 64Mi}
  # 60ms, not tighter: under a -race run beside other packages' tests,
  # RTT estimates have read 30ms on loopback, and no node would qualify.
  latency: {p99: 60ms, clients: [edge-a, edge-b]}
`

func infer1(t *testing.T, h http.Handler) (int, string, []byte) {
	t.Helper()
	in := make([]float32, 8)
	for i := range in {
		in[i] = float32(i) / 8
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 8}, "datatype": "FP32", "data": in}}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v2/models/scorer/infer", bytes.NewReader(body)))
	return rec.Code, rec.Header().Get(infer.HeaderServedBy), rec.Body.Bytes()
}

// asking sends infer1 to each of hs over and over, one caller each,
// pausing pause after every request (the callers' pacing: the load under
// test, not a wait for a result), until the stop it returns is called;
// stop says how many were answered 200 and how many were not. The first
// failures are logged with the time since the callers started, then
// only counted: a run of hundreds would bury the rest of the output.
func asking(t *testing.T, hs []http.Handler, pause time.Duration) (stop func() (ok, failed int64)) {
	const logged = 10
	var oks, fails, last atomic.Int64 // last: when the last failure came, since start
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(pause):
				}
				if code, _, body := infer1(t, h); code == http.StatusOK {
					oks.Add(1)
				} else {
					at := time.Since(start)
					last.Store(int64(at))
					if n := fails.Add(1); n <= logged {
						t.Logf("request at +%v: %d %s", at.Round(time.Millisecond), code, body)
					}
				}
			}
		})
	}
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		if n := fails.Load(); n > logged {
			t.Logf("%d more requests failed (not logged), the last at +%v", n-logged, time.Duration(last.Load()).Round(time.Millisecond))
		}
		return oks.Load(), fails.Load()
	}
}

// TestServeAtTheEdgeForwardAndSwap pushes a model, applies an
// InferenceService with one replica per client site, and checks that the
// chosen edge nodes serve it, that any other agent forwards to the nearest
// replica (naming it), and that a new version swaps in with no failed
// request.
func TestServeAtTheEdgeForwardAndSwap(t *testing.T) {
	lib := ortLib(t)
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	// agents[6] (cloud-2) plays a compromised agent below: it runs no
	// model loader, which would otherwise correct what it claims.
	agents := devMeshWAN(t, 7, true, func(c *Config) {
		c.PKI, c.ORTLibrary = keys, lib
		if c.Name == "cloud-2" {
			c.without = []string{"serving"}
		}
	})
	push := func(version string, seed int64) {
		model, _, err := onnx.RandomMLP(seed, 8, 16, 2)
		if err != nil {
			t.Fatal(err)
		}
		code, body := post(t, agents[5].Handler(), http.MethodPost, "/v1/artifacts?name=scorer&version="+version, model)
		if code != http.StatusCreated {
			t.Fatalf("push %s = %d %s", version, code, body)
		}
	}
	push("1", 1)
	apply := func(version string) {
		meshtest.WaitFor(t, 90*time.Second, "apply of version "+version, func() bool {
			code, _ := post(t, agents[1].Handler(), http.MethodPost, "/v1/policies", []byte(fmt.Sprintf(servePolicy, version)))
			return code == http.StatusOK
		})
	}
	apply("1")
	servingAt := func(version string) []string {
		var out []string
		for _, n := range agents[0].Mesh().Nodes() {
			if slices.Contains(n.Models, "scorer@"+version) {
				out = append(out, n.Name)
			}
		}
		return out
	}
	meshtest.WaitFor(t, 90*time.Second, "scorer@1 served in both edge sites", func() bool {
		rec, ok := placementOf(agents[0], "InferenceService/scorer")
		if !ok || rec.State != StatePlaced {
			return false
		}
		s := servingAt("1")
		return len(s) == 2 && strings.HasPrefix(s[0], "edge-") && strings.HasPrefix(s[1], "edge-")
	})

	// A cloud agent serves nothing itself: it forwards to the nearest edge
	// replica and the response names it.
	// The mesh's view of who serves reaches the cloud agent a gossip
	// round after the edges'.
	meshtest.WaitFor(t, 30*time.Second, "the cloud agent to see a replica", func() bool {
		return len(agents[5].fwd.ServingNodes("scorer", "")) > 0
	})
	proxied := agents[5].art.Node().Stats().Proxied
	code, by, body := infer1(t, agents[5].Handler())
	if code != http.StatusOK || !strings.HasPrefix(by, "edge-") {
		t.Fatalf("forwarded infer = %d by %q: %s", code, by, body)
	}
	// It went over the data plane (more than once if the nearest replica
	// it knew of had just stopped serving), and the answer is the
	// replica's own.
	if got := agents[5].art.Node().Stats().Proxied; got <= proxied {
		t.Errorf("data-plane requests sent by the forwarding agent: %d before, %d after; want more", proxied, got)
	}
	for _, a := range agents {
		if a.Name() != by {
			continue
		}
		if a.art.Node().Stats().ProxyServed == 0 {
			t.Errorf("%s answered no request over its data plane", by)
		}
		code, by2, direct := infer1(t, a.Handler())
		if code != http.StatusOK || by2 != by || !bytes.Equal(direct, body) {
			t.Errorf("asked directly, %s answered %d %s; forwarded: %s", by, code, direct, body)
		}
	}

	// A compromised agent next door to the cloud agent (its own site)
	// claims to serve the model: its document says so, and it writes
	// its own document. No placement names it, so it is sent nothing.
	liar := agents[6]
	if liar.Name() != "cloud-2" {
		t.Fatalf("agents[6] is %s, want cloud-2", liar.Name())
	}
	if err := liar.Mesh().Update(func(st *mesh.NodeState) { st.Models = append(st.Models, "scorer@1") }); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 30*time.Second, "the cloud agent to hear "+liar.Name()+"'s claim", func() bool {
		n, err := agents[5].Mesh().Node(liar.Name())
		return err == nil && slices.Contains(n.Models, "scorer@1")
	})
	sentLiar := liar.art.Node().Stats().ProxyServed
	for range 10 {
		if code, by, body := infer1(t, agents[5].Handler()); code != http.StatusOK || by == liar.Name() {
			t.Fatalf("beside a liar: %d by %q: %s", code, by, body)
		}
	}
	if n := liar.art.Node().Stats().ProxyServed - sentLiar; n > 0 {
		t.Errorf("%s, which no placement names, was sent %d requests", liar.Name(), n)
	}
	if agents[5].fwd.Unvouched() == 0 {
		t.Errorf("%s's claim was not passed over (strata_forward_unvouched_total 0)", liar.Name())
	}
	liar.Mesh().Update(func(st *mesh.NodeState) {
		st.Models = slices.DeleteFunc(st.Models, func(m string) bool { return m == "scorer@1" })
	})

	// Hot swap: keep calling while version 2 replaces version 1.
	stop := asking(t, []http.Handler{agents[0].Handler(), agents[2].Handler()}, 0)
	push("2", 2)
	apply("2")
	meshtest.Poll(t, 90*time.Second, 50*time.Millisecond, "scorer@2 served in both edge sites",
		func() bool { return len(servingAt("2")) == 2 },
		func() {
			rec, _ := placementOf(agents[0], "InferenceService/scorer")
			t.Logf("placement: %+v", rec)
			for _, n := range agents[0].Mesh().Nodes() {
				t.Logf("%s %s models=%v assignments=%+v", n.Name, n.Status, n.Models, n.Assignments)
			}
		})
	// The replicas under traffic report it, and the cloud agent hears.
	meshtest.WaitFor(t, 30*time.Second, "a replica's traffic report at "+agents[5].Name(), func() bool {
		for _, n := range agents[5].Mesh().Nodes() {
			for _, tr := range n.Traffic {
				if strings.HasPrefix(tr.Model, "scorer@") && tr.RPS > 0 && tr.P99 > 0 && n.Load.QPS > 0 {
					return true
				}
			}
		}
		return false
	})
	ok, failed := stop()
	if failed != 0 || ok == 0 {
		t.Errorf("during the swap: %d ok, %d failed; want none failed", ok, failed)
	}
}

// TestLoadFailureIsShownNotLooped pushes bytes ONNX Runtime cannot load:
// the placement says failed with the runtime's reason and the node that
// reported it, not "placed", and the load is retried with backoff, not in
// a loop.
func TestLoadFailureIsShownNotLooped(t *testing.T) {
	lib := ortLib(t)
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	// Three edge agents, each given the controller role (with a CA only
	// controllers write policies).
	yes := true
	agents := devMesh(t, 3, func(c *Config) { c.PKI, c.ORTLibrary, c.Controller = keys, lib, &yes })
	// A model with an operator ONNX Runtime lacks: the push takes it (the
	// serving agents may run another version) with a warning.
	model, err := os.ReadFile("../infer/testdata/unsupported_op.onnx")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	agents[0].Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/artifacts?name=broken&version=1", bytes.NewReader(model)))
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Header().Get("Strata-Warning"), "unsupported operator Foo") {
		t.Fatalf("push = %d %s (warning %q)", rec.Code, rec.Body, rec.Header().Get("Strata-Warning"))
	}
	policy := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: broken}\nspec:\n  model: {name: broken, version: \"1\"}\n  resources: {cpu: 100m, memory: 16Mi}\n"
	meshtest.WaitFor(t, 30*time.Second, "apply", func() bool {
		code, _ := post(t, agents[1].Handler(), http.MethodPost, "/v1/policies", []byte(policy))
		return code == http.StatusOK
	})
	var st PlacementStatus
	meshtest.WaitFor(t, 60*time.Second, "the placement to say the load failed", func() bool {
		_, body := get(t, agents[2].Handler(), "/v1/placements")
		var all []PlacementStatus
		if json.Unmarshal(body, &all) != nil || len(all) != 1 {
			return false
		}
		st = all[0]
		return st.State == StateFailed && len(st.Nodes) == 1 && st.Nodes[0].Replica == "failed"
	})
	if !strings.Contains(st.Message, st.Nodes[0].Name) || !strings.Contains(st.Nodes[0].Reason, "unsupported operator Foo (opset com.example.custom 1)") || !strings.Contains(st.Message, st.Nodes[0].Reason) {
		t.Errorf("placement = %+v; want the node, the operator and its opset in its message", st)
	}
	// Backoff: a few seconds later the node has not retried more than
	// twice (5s, then 10s). The time that passes is what is under test:
	// without backoff the loader retries every pass (a second).
	time.Sleep(3 * time.Second)
	n, err := agents[0].Mesh().Node(st.Nodes[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range n.Replicas {
		if r.Policy == "InferenceService/broken" && r.Attempts > 2 {
			t.Errorf("replica %+v: %d attempts in seconds, want backoff", r, r.Attempts)
		}
	}
}

// scaledPolicy is an autoscaled service of model scorer@1: 1 to 3
// replicas of 20 requests/s each.
const scaledPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: scorer}
spec:
  model: {name: scorer, version: "1"}
  resources: {cpu: 100m, memory: 64Mi}
  autoscale: {max: 3, target: {rps: 20}}
`

// TestAutoscaleFollowsRequests: an autoscaled service starts on one
// replica; requests forwarded to it by an agent that serves nothing are
// reported in its node document, and the owner adds replicas until each
// would carry its target, every one of them serving. The record and the
// events say why.
func TestAutoscaleFollowsRequests(t *testing.T) {
	lib := ortLib(t)
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	agents := devMesh(t, 7, func(c *Config) { c.PKI, c.ORTLibrary = keys, lib })
	model, _, err := onnx.RandomMLP(1, 8, 16, 2)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=scorer&version=1", model); code != http.StatusCreated {
		t.Fatalf("push = %d %s", code, body)
	}
	meshtest.WaitFor(t, 60*time.Second, "the apply", func() bool {
		code, _ := post(t, agents[1].Handler(), http.MethodPost, "/v1/policies", []byte(scaledPolicy))
		return code == http.StatusOK
	})
	const key = "InferenceService/scorer"
	serving := func(rec PlacementRecord) int {
		n := 0
		for _, pn := range rec.Nodes {
			if pn.Replica == mesh.ReplicaServing {
				n++
			}
		}
		return n
	}
	var rec PlacementRecord
	meshtest.WaitFor(t, 60*time.Second, "one replica serving", func() bool {
		rec, _ = placementOf(agents[0], key)
		return rec.State == StatePlaced && serving(rec) == 1
	})
	if rec.Wanted != 1 {
		t.Fatalf("started with %d replicas wanted, want min 1", rec.Wanted)
	}
	// Requests from an agent that serves nothing: forwarded.
	var from *Agent
	for _, a := range agents {
		if !slices.Contains(strings.Split(rec.NodeNames(), ","), a.Name()) {
			from = a
			break
		}
	}
	// The mesh's view of who serves reaches from a gossip round after
	// agents[0]'s: until it does, from answers 503 (no replica serves yet
	// as it sees the mesh), which is not what is under test.
	meshtest.WaitFor(t, 30*time.Second, from.Name()+" to see a replica", func() bool {
		return len(from.fwd.ServingNodes("scorer", "")) > 0
	})
	// Four callers, each pausing 40ms after a request: about 100
	// requests/s, 5 replicas' worth of the target, capped at 3. The pace
	// is the load under test.
	h := from.Handler()
	stop := asking(t, []http.Handler{h, h, h, h}, 40*time.Millisecond)
	meshtest.Poll(t, 90*time.Second, 100*time.Millisecond, "3 replicas serving", func() bool {
		rec, _ = placementOf(agents[0], key)
		return rec.State == StatePlaced && rec.Wanted == 3 && serving(rec) == 3
	}, func() {
		t.Logf("placement: %s wanted %d, %q, scale %+v", rec.State, rec.Wanted, rec.Message, rec.Scale)
		for _, n := range from.Mesh().Nodes() {
			if len(n.Traffic) > 0 {
				t.Logf("%s traffic %+v", n.Name, n.Traffic)
			}
		}
	})
	// The replicas count the forwarded requests as from's site's.
	site := from.Mesh().Local().Site
	meshtest.WaitFor(t, 30*time.Second, "a replica's traffic from site "+site, func() bool {
		for _, n := range from.Mesh().Nodes() {
			for _, tr := range n.Traffic {
				if tr.Model == "scorer@1" && tr.Sites[site] > 0 {
					return true
				}
			}
		}
		return false
	})
	ok, failed := stop()
	if rec.Scale == nil || rec.Scale.Replicas != 3 || !strings.Contains(rec.Scale.Reason, "target 20 a replica") {
		t.Errorf("scale %+v: want 3 replicas with the load as the reason", rec.Scale)
	}
	if failed > 0 {
		t.Errorf("%d of %d requests failed while the service scaled", failed, failed+ok)
	}
	t.Logf("%d requests; %s", ok, rec.Message)
	// The event stream scans the catalog a moment after each change.
	var scaled []string
	meshtest.WaitFor(t, 10*time.Second, "a placement.scaled event", func() bool {
		past, _, done := agents[0].events.Subscribe(0)
		done()
		scaled = nil
		for _, ev := range past {
			if ev.Type == "placement.scaled" && ev.Policy == key {
				scaled = append(scaled, ev.Message)
			}
		}
		return len(scaled) > 0
	})
	t.Logf("scaled events: %q", scaled)
}

// prestagePolicy serves scorer@1 on one replica and prestages it, with
// extra added to its spec.
func prestagePolicy(extra string) string {
	return `apiVersion: strata/v1
kind: InferenceService
metadata: {name: scorer}
spec:
  model: {name: scorer, version: "1"}
  prestage: true
  resources: {cpu: 100m, memory: 64Mi}
` + extra
}

// TestPrestagedStandbyTakesOver: a service that prestages names its
// replica's standby, which pulls the model ahead of time; when the
// replica's agent stops, the replica moves to the standby, which loads the
// model from its own disk: it fetches nothing after the stop.
func TestPrestagedStandbyTakesOver(t *testing.T) { testStandbyTakesOver(t, false) }

// TestWarmStandbyAnswersAtOnce: with warm: true the standby also loads the
// model ahead of time, and its node document lists it. When the replica's
// agent stops, a request made at the standby is answered there at once,
// and one made at another agent is forwarded to it, before the placement
// has moved; the replica then moves to the standby, which serves without
// loading the model again.
func TestWarmStandbyAnswersAtOnce(t *testing.T) { testStandbyTakesOver(t, true) }

// testStandbyTakesOver is TestPrestagedStandbyTakesOver, with a warm
// standby when warm.
func testStandbyTakesOver(t *testing.T, warm bool) {
	lib := ortLib(t)
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	// When the replica lands on edge-b-1, its site's only node, and its
	// leave is not heard (a busy host), the site looks cut off: a short
	// site_lost_after lets the replica move on within the test.
	agents := devMesh(t, 7, func(c *Config) { c.PKI, c.ORTLibrary, c.SiteLostAfter = keys, lib, time.Second })
	byName := map[string]*Agent{}
	for _, a := range agents {
		byName[a.Name()] = a
	}
	model, _, err := onnx.RandomMLP(1, 8, 16, 2)
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=scorer&version=1", model)
	if code != http.StatusCreated {
		t.Fatalf("push = %d %s", code, body)
	}
	var manifest struct{ Digest string }
	if err := json.Unmarshal(body, &manifest); err != nil || manifest.Digest == "" {
		t.Fatalf("push answer %s: %v", body, err)
	}
	meshtest.WaitFor(t, 60*time.Second, "the apply", func() bool {
		extra := ""
		if warm {
			extra = "  warm: true\n"
		}
		code, _ := post(t, agents[1].Handler(), http.MethodPost, "/v1/policies", []byte(prestagePolicy(extra)))
		return code == http.StatusOK
	})
	const key = "InferenceService/scorer"
	var rec PlacementRecord
	var replica, standby string
	// Every agent has heard it all: one that has not would not forward to
	// the standby (its catalog does not vouch for it yet).
	meshtest.WaitFor(t, 60*time.Second, "the replica serving and its standby holding the model, at every agent", func() bool {
		rec, _ = placementOf(agents[0], key)
		if rec.State != StatePlaced || len(rec.Nodes) != 1 || rec.Nodes[0].Replica != mesh.ReplicaServing || rec.Nodes[0].Standby == "" {
			return false
		}
		replica, standby = rec.Nodes[0].Name, rec.Nodes[0].Standby
		for _, a := range agents {
			r, _ := placementOf(a, key)
			n, err := a.Mesh().Node(standby)
			if r.Epoch != rec.Epoch || len(r.Nodes) != 1 || r.Nodes[0].Standby != standby || err != nil ||
				!slices.Contains(n.Locality.Artifacts, manifest.Digest) || warm && !slices.Contains(n.Standbys, "scorer@1") {
				return false
			}
		}
		return true
	})
	if standby == replica {
		t.Fatalf("the standby is the replica's own node %s", replica)
	}
	var observer *Agent
	for _, a := range agents {
		if a.Name() != replica && a.Name() != standby {
			observer = a
			break
		}
	}
	fetched := byName[standby].art.Node().Stats().ChunksFetched
	stopped := time.Now()
	byName[replica].Close()
	if warm {
		// The mesh still believes the replica alive: the standby's forward
		// to it fails, and the standby answers.
		if code, by, body := infer1(t, byName[standby].Handler()); code != http.StatusOK || by != standby {
			t.Fatalf("infer at the warm standby %s right after the stop = %d by %q: %s; want answered there", standby, code, by, body)
		}
		t.Logf("%s stopped; the warm standby %s answered a request made there after %s", replica, standby, time.Since(stopped).Round(time.Millisecond))
		// Other agents forward to the standby the mesh lists. On a busy
		// machine the observer may hear of the stop, and of the
		// standby's promotion, in a few steps: it may ask again for a
		// moment, well before the placement moves.
		tries, last := 0, ""
		meshtest.Poll(t, 500*time.Millisecond, 50*time.Millisecond, "a request at "+observer.Name()+" answered by the warm standby "+standby, func() bool {
			tries++
			code, by, body := infer1(t, observer.Handler())
			last = fmt.Sprintf("%d by %q: %s", code, by, body)
			return code == http.StatusOK && by == standby
		}, func() { t.Logf("the last answer at %s (try %d): %s", observer.Name(), tries, last) })
		t.Logf("and one made at %s after %s (%d tries)", observer.Name(), time.Since(stopped).Round(time.Millisecond), tries)
	}
	moved := false
	defer func() {
		if !moved {
			t.Logf("the placement %s last saw: %+v", observer.Name(), rec)
		}
	}()
	meshtest.WaitFor(t, 60*time.Second, "the replica serving at the standby "+standby, func() bool {
		rec, _ = placementOf(observer, key)
		return rec.State == StatePlaced && len(rec.Nodes) == 1 && rec.Nodes[0].Name == standby && rec.Nodes[0].Replica == mesh.ReplicaServing
	})
	moved = true
	t.Logf("%s stopped; %s served %s after %s", replica, standby, key, time.Since(stopped).Round(time.Millisecond))
	if got := byName[standby].art.Node().Stats().ChunksFetched; got != fetched {
		t.Errorf("the standby fetched %d chunks after the replica's node stopped; want none: it held the model", got-fetched)
	}
	// The placement (written by the owner) can reach the observer before
	// the standby's own document saying it serves; until then the
	// observer answers 503 "loading", which a client retries.
	var answer string
	defer func() { t.Logf("the last answer at %s: %s", observer.Name(), answer) }()
	meshtest.WaitFor(t, 10*time.Second, "a request at "+observer.Name()+" answered by "+standby, func() bool {
		code, by, body := infer1(t, observer.Handler())
		answer = fmt.Sprintf("%d by %q: %s", code, by, body)
		return code == http.StatusOK && by == standby
	})
	if warm && len(byName[standby].inf.Standbys()) != 0 {
		t.Errorf("the standby %s still holds a standby after taking over: %v; want it promoted", standby, byName[standby].inf.Standbys())
	}
}

// TestNoRuntimeSaysSo: an agent whose ONNX Runtime did not load serves
// nothing; a replica placed on it is reported failed, saying why, where
// users look (the placement), instead of "loading" for ever.
func TestNoRuntimeSaysSo(t *testing.T) {
	t.Parallel()
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	owns := true
	a := devMesh(t, 1, func(c *Config) {
		c.PKI, c.ORTLibrary, c.Controller = keys, filepath.Join(t.TempDir(), "libonnxruntime.so.1"), &owns
	})[0]
	model, _, err := onnx.RandomMLP(1, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	publishFile(t, a, storage.PublishSpec{Kind: storage.KindModel, Name: "m", Version: "1"}, model)
	src := []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: svc}\nspec:\n  model: {name: m, version: \"1\"}\n  resources: {cpu: 10m, memory: 16Mi}\n")
	if code, body := post(t, a.Handler(), http.MethodPost, "/v1/policies", src); code != http.StatusOK {
		t.Fatalf("apply = %d %s", code, body)
	}
	var last string
	reported := false
	defer func() {
		if !reported {
			t.Logf("placements: %s", last)
		}
	}()
	meshtest.WaitFor(t, 30*time.Second, "the replica reported failed for want of ONNX Runtime", func() bool {
		code, body := post(t, a.Handler(), http.MethodGet, "/v1/placements", nil)
		last = string(body)
		var ps []struct {
			State string
			Nodes []struct{ Replica, Reason string }
		}
		return code == http.StatusOK && json.Unmarshal(body, &ps) == nil && len(ps) == 1 && ps[0].State == "failed" &&
			len(ps[0].Nodes) == 1 && ps[0].Nodes[0].Replica == "failed" && strings.Contains(ps[0].Nodes[0].Reason, "ONNX Runtime is not loaded")
	})
	reported = true
}
