package ui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/strata-mesh/strata/agent"
	"github.com/strata-mesh/strata/internal/ui"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer"
)

// chromePath finds a Chromium to drive: $STRATA_CHROME, else the first of
// the usual names on $PATH.
func chromePath() string {
	if p := os.Getenv("STRATA_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startMesh starts the dev mix of n agents on loopback, with the dev
// mesh's WAN delays between sites (so the map has distances to show) and
// its PKI (so artifacts can be pushed); tweak may change each config.
func startMesh(t *testing.T, n int, tweak func(i int, cfg *agent.Config)) []*agent.Agent {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keys, err := agent.NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wan := &agent.DevNetwork{}
	var agents []*agent.Agent
	done := make(chan struct{}, n)
	t.Cleanup(func() {
		cancel()
		// Bounded: a shutdown that hangs is reported with the stacks that
		// hold it, rather than stalling the whole test run.
		deadline := time.After(30 * time.Second)
		for range agents {
			select {
			case <-done:
			case <-deadline:
				buf := make([]byte, 1<<20)
				buf = buf[:goruntime.Stack(buf, true)]
				t.Errorf("the agents did not stop within 30 s; goroutines:\n%s", buf)
				return
			}
		}
	})
	for i, cfg := range agent.DevConfigs(n, t.TempDir(), "127.0.0.1:0") {
		cfg.GossipKey = base64.StdEncoding.EncodeToString(key)
		cfg.MeshTimings = meshtest.FastTimings
		cfg.LogLevel = "error"
		cfg.ProcRoot = "../../agent/discover/testdata/proc"
		cfg.PKI = keys
		cfg.PacketDelay = wan.Delay(cfg.Site)
		if tweak != nil {
			tweak(i, &cfg)
		}
		if i > 0 {
			cfg.Join = []string{agents[0].Mesh().GossipAddr()}
		}
		a, err := agent.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wan.Register(a.Mesh().GossipAddr(), cfg.Site)
		agents = append(agents, a)
		go func() { a.Run(ctx); done <- struct{}{} }()
	}
	meshtest.WaitFor(t, 20*time.Second, "the dev mesh to form", func() bool {
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
	return agents
}

// browserLog gathers what a page must not do: console errors, uncaught
// exceptions, browser log errors (a blocked script, a refused style) and
// failed requests. It also counts the bytes the page transferred.
type browserLog struct {
	mu       sync.Mutex
	problems []string
	bytes    float64
	requests int
	urls     map[network.RequestID]string
}

func (b *browserLog) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == "error" || ev.Type == "assert" {
			var parts []string
			for _, a := range ev.Args {
				if a.Description != "" {
					parts = append(parts, a.Description)
				} else {
					parts = append(parts, string(a.Value))
				}
			}
			b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " ")))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.problems = append(b.problems, fmt.Sprintf("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError {
			b.problems = append(b.problems, fmt.Sprintf("browser log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	case *network.EventRequestWillBeSent:
		b.urls[ev.RequestID] = ev.Request.URL
	case *network.EventResponseReceived:
		if ev.Response.Status >= 400 {
			b.problems = append(b.problems, fmt.Sprintf("HTTP %d for %s", ev.Response.Status, ev.Response.URL))
		}
	case *network.EventLoadingFailed:
		// A request the page itself ended (the event stream when the page
		// goes away) is not a failure.
		if !ev.Canceled {
			b.problems = append(b.problems, fmt.Sprintf("request failed: %s: %s %s", b.urls[ev.RequestID], ev.ErrorText, ev.BlockedReason))
		}
	case *network.EventLoadingFinished:
		b.bytes += ev.EncodedDataLength
		b.requests++
	}
}

// take returns the problems seen since the last call.
func (b *browserLog) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// reset forgets the problems and the bytes counted so far.
func (b *browserLog) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems, b.bytes, b.requests = nil, 0, 0
}

func (b *browserLog) transferred() (float64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes, b.requests
}

// apiToken is the first agent's API token: its API listens off loopback,
// so every call needs it, the dashboard's included.
var apiToken = func() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}()

// apiCall sends a request to the agent's API and returns the body.
func apiCall(t *testing.T, method, url, ctype string, body io.Reader) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	return b
}

// demoServer serves the dashboard with API answers recorded from `strata
// dev` after its story (drift on screening@1 at edge-a, retraining on gpu-1,
// canary, promotion), plus a transfer under way, so the pages that need that
// story have data to draw.
func demoServer(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("testdata", "demo")
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui.Handler())
	file := func(name, ctype string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", ctype)
			w.Write(b)
		}
	}
	for _, p := range []string{"health", "nodes", "placements", "policies", "artifacts", "transfers", "drift", "jobs"} {
		mux.HandleFunc("GET /v1/"+p, file(p+".json", "application/json"))
	}
	mux.HandleFunc("GET /v1/jobs/screening-retrain-1/logs", file("logs.txt", "text/plain; charset=utf-8"))
	quit := make(chan struct{})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if r.URL.Query().Get("since") == "0" {
			b, err := os.ReadFile(filepath.Join(dir, "events.txt"))
			if err != nil {
				t.Error(err)
			}
			w.Write(b)
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(quit)
		srv.Close()
	})
	return srv.URL
}

// planPolicy has no latency goal, so its explanation does not move with
// the RTT estimates between two calls.
const planPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: plan-probe}
spec:
  model: {name: probe, version: "1"}
  replicas: 2
  resources: {cpu: 500m, memory: 256Mi}
  tiers: [onprem, cloud]
`

// TestDashboard drives the dashboard in headless Chromium against a dev
// mesh: every page loads with no console error and no failed request, the
// mesh page lists every node, an applied policy shows on the placements
// page without a reload, and the plan box explains as POST /v1/plan does.
// Screenshots go to $STRATA_UI_SHOTS, or the test's temporary directory.
func TestDashboard(t *testing.T) {
	chrome := chromePath()
	if chrome == "" {
		t.Skip("no Chromium on this machine (scripts/install-debs.sh installs Debian's chromium; or set STRATA_CHROME)")
	}
	if testing.Short() {
		t.Skip("starts a dev mesh and a browser")
	}
	if raceDetector {
		// This test checks the dashboard, not the agents' concurrency
		// (their own tests do): eight agents and a browser under the race
		// detector on a small machine are slow enough to set off failure
		// detection, and the run takes minutes.
		t.Skip("the browser test does not run under -race")
	}
	shots := os.Getenv("STRATA_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	// The first agent's API listens on every address with a token, so the
	// dashboard meets the token box and then sends the token on every call.
	agents := startMesh(t, agent.DefaultDevAgents, func(i int, cfg *agent.Config) {
		if i == 0 {
			cfg.API = "0.0.0.0:0"
			cfg.APIToken = apiToken
		}
	})
	_, port, err := net.SplitHostPort(agents[0].APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	api := "http://127.0.0.1:" + port

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800),
		chromedp.UserDataDir(t.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bl := &browserLog{urls: map[network.RequestID]string{}}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(bl.listen))
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}

	do := func(t *testing.T, what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, timeout)
		defer tcancel()
		if err := chromedp.Do(tctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitFor polls a JavaScript condition in the page.
	waitFor := func(t *testing.T, what, cond string, timeout time.Duration) {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, timeout+time.Second)
		defer tcancel()
		if _, err := chromedp.Run(tctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	eval := func(t *testing.T, expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
		return v
	}
	shot := func(t *testing.T, name string) {
		t.Helper()
		// From the top: the sticky header would show where the page was
		// scrolled to.
		eval(t, `window.scrollTo(0, 0); ''`)
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", p, len(buf))
	}
	clean := func(t *testing.T, page string) {
		t.Helper()
		for _, p := range bl.take() {
			t.Errorf("%s: %s", page, p)
		}
	}
	// open shows a page by its link in the navigation bar, as a person
	// would, and waits until the page has drawn its data.
	open := func(t *testing.T, page string) {
		t.Helper()
		do(t, "opening "+page, 10*time.Second, chromedp.Click(chromedp.CSS(`nav a[data-page="`+page+`"]`)))
		waitFor(t, page+" to load", `!!document.querySelector('.page-`+page+`[data-loaded]')`, 10*time.Second)
	}

	t.Run("token", func(t *testing.T) {
		do(t, "loading /ui/", 15*time.Second, chromedp.Navigate(api+"/ui/#/mesh"))
		waitFor(t, "the token box", `!document.getElementById('auth').hidden`, 10*time.Second)
		// Every call before the token is refused: the nodes, and the
		// event stream. Nothing else may fail.
		waitFor(t, "the refusals", `!!document.querySelector('.page-mesh .summary .error') && document.getElementById('live').dataset.state === 'needs token'`, 10*time.Second)
		for _, p := range bl.take() {
			if !strings.Contains(p, "401") && !strings.Contains(p, "Unauthorized") {
				t.Errorf("before the token: %s", p)
			}
		}
		shot(t, "token")
		do(t, "entering the token", 5*time.Second,
			chromedp.SetValue(chromedp.ID("auth-token"), apiToken),
			chromedp.Click(chromedp.CSS(`#auth-form button[type="submit"]`)))
		waitFor(t, "the nodes with the token", `document.querySelectorAll('.page-mesh table.nodes tbody tr:not(.group)').length > 0`, 10*time.Second)
		waitFor(t, "the event stream", `document.getElementById('live').dataset.state === 'live'`, 10*time.Second)
		if got := eval(t, `sessionStorage.getItem('strata-token') || ''`); got != apiToken {
			t.Errorf("sessionStorage holds %q, want the token", got)
		}
		clean(t, "token")
	})

	t.Run("mesh", func(t *testing.T) {
		meshtest.WaitFor(t, 15*time.Second, "every node document with a coordinate", func() bool {
			var nodes []struct {
				Coord *json.RawMessage `json:"coord"`
			}
			if json.Unmarshal(apiCall(t, "GET", api+"/v1/nodes", "", nil), &nodes) != nil || len(nodes) != len(agents) {
				return false
			}
			for _, n := range nodes {
				if n.Coord == nil {
					return false
				}
			}
			return true
		})
		// /ui redirects to /ui/; the fragment survives, and so does the
		// token in the tab's sessionStorage. The cache is emptied first so
		// that the bytes counted are a first visit's.
		if _, err := chromedp.Call(ctx, network.ClearBrowserCache, cdp.Empty{}); err != nil {
			t.Fatal(err)
		}
		bl.reset()
		start := time.Now()
		do(t, "loading /ui", 15*time.Second, chromedp.Navigate(api+"/ui#/mesh"))
		waitFor(t, "the node table", fmt.Sprintf(`document.querySelectorAll('.page-mesh table.nodes tbody tr:not(.group)').length === %d`, len(agents)), 15*time.Second)
		loaded := time.Since(start)
		table := eval(t, `document.querySelector('.page-mesh table.nodes').textContent`)
		for _, a := range agents {
			if !strings.Contains(table, a.Name()) {
				t.Errorf("the node table lacks %s", a.Name())
			}
		}
		// The sites table lists every site of the pool, as /v1/sites does,
		// with the RTT estimated to each reachable one and when it was
		// heard from (not the dash of an unknown).
		var sites []struct{ Name, Status string }
		if err := json.Unmarshal(apiCall(t, "GET", api+"/v1/sites", "", nil), &sites); err != nil || len(sites) == 0 {
			t.Fatalf("GET /v1/sites: %v (%d sites)", err, len(sites))
		}
		waitFor(t, "the sites table", fmt.Sprintf(`document.querySelectorAll('.page-mesh table.sites-table tbody tr').length === %d`, len(sites)), 10*time.Second)
		for _, st := range sites {
			row := eval(t, fmt.Sprintf(`(document.querySelector('.page-mesh table.sites-table tr[data-site=%q]') || {}).textContent || ''`, st.Name))
			if !strings.Contains(row, st.Status) || !strings.Contains(row, "this pool") {
				t.Errorf("site %s: row %q, want its status %s, seen through this pool", st.Name, row, st.Status)
			}
			if st.Status != "reachable" {
				continue
			}
			cell := func(class string) string {
				return eval(t, fmt.Sprintf(`(document.querySelector('.page-mesh table.sites-table tr[data-site=%q] td.%s') || {}).textContent || ''`, st.Name, class))
			}
			if rtt := cell("rtt"); !strings.HasSuffix(rtt, " ms") {
				t.Errorf("site %s: RTT %q, want the estimate in ms", st.Name, rtt)
			}
			if heard := cell("heard"); heard != "just now" && !strings.HasSuffix(heard, " ago") {
				t.Errorf("site %s: heard %q, want when", st.Name, heard)
			}
		}
		if n := eval(t, `String(document.querySelectorAll('.page-mesh .mapsvg a.node-link').length)`); n != fmt.Sprint(len(agents)) {
			t.Errorf("the map has %s nodes, want %d", n, len(agents))
		}
		if n := eval(t, `String(document.querySelectorAll('.page-mesh .heatsvg rect').length)`); n != fmt.Sprint(len(agents)*len(agents)) {
			t.Errorf("the RTT matrix has %s cells, want %d", n, len(agents)*len(agents))
		}
		fcp := eval(t, `String(Math.round((performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || -1))`)
		b, reqs := bl.transferred()
		t.Logf("mesh page, empty cache: %.0f bytes transferred in %d finished requests; first contentful paint at %s ms; nodes listed %s after navigation",
			b, reqs, fcp, loaded.Round(time.Millisecond))
		if b > 500<<10 {
			t.Errorf("the mesh page transferred %.0f bytes, more than 500 KB", b)
		}
		shot(t, "mesh")

		// A node's document opens from the map, by keyboard.
		name := agents[3].Name()
		do(t, "focusing a node", 5*time.Second, chromedp.Focus(chromedp.CSS(`.mapsvg a.node-link[data-key="map-`+name+`"]`)))
		do(t, "pressing Enter", 5*time.Second, chromedp.KeyEvent("\r"))
		waitFor(t, "the node's document", `(document.querySelector('.page-mesh .detail pre.json') || {}).textContent?.includes('"name": "`+name+`"')`, 5*time.Second)
		shot(t, "mesh-node")
		clean(t, "mesh")
	})

	t.Run("placements", func(t *testing.T) {
		open(t, "placements")
		eval(t, `window.__sameDocument = 'yes'`)
		yaml, err := os.ReadFile("../../examples/fraud-scorer.yaml")
		if err != nil {
			t.Fatal(err)
		}
		apiCall(t, "POST", api+"/v1/policies?file=fraud-scorer.yaml", "application/yaml", strings.NewReader(string(yaml)))
		applied := time.Now()
		waitFor(t, "the applied policy on the page", `!!document.querySelector('[data-policy="InferenceService/fraud-scorer"]')`, 15*time.Second)
		t.Logf("the applied policy showed %s after POST /v1/policies", time.Since(applied).Round(time.Millisecond))
		if got := eval(t, `String(window.__sameDocument)`); got != "yes" {
			t.Errorf("the page was reloaded (marker %q)", got)
		}
		shot(t, "placements")
		clean(t, "placements")
	})

	t.Run("plan", func(t *testing.T) {
		waitFor(t, "the node list of the why box", `document.querySelectorAll('#plan-why option').length > 1`, 10*time.Second)
		why := agents[1].Name()
		var ui, direct string
		for try := 0; try < 3; try++ {
			do(t, "filling the plan box", 5*time.Second,
				chromedp.SetValue(chromedp.ID("plan-yaml"), planPolicy),
				chromedp.SetValue(chromedp.ID("plan-why"), why),
				chromedp.Evaluate[chromedp.Void](`document.getElementById('plan-out').replaceChildren()`),
				chromedp.Click(chromedp.ID("plan-run")))
			waitFor(t, "the explanation", `!!document.querySelector('#plan-out .plan-explanation, #plan-out .error')`, 10*time.Second)
			ui = eval(t, `[...document.querySelectorAll('#plan-out pre')].map((p) => p.textContent).join('\n--\n')`)
			var docs []struct{ Explanation, Why string }
			if err := json.Unmarshal(apiCall(t, "POST", api+"/v1/plan?why="+why, "application/yaml", strings.NewReader(planPolicy)), &docs); err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, d := range docs {
				parts = append(parts, d.Explanation)
				if d.Why != "" {
					parts = append(parts, d.Why)
				}
			}
			direct = strings.Join(parts, "\n--\n")
			if ui == direct {
				break
			}
		}
		if ui != direct {
			t.Errorf("the plan box shows\n%s\nPOST /v1/plan answers\n%s", ui, direct)
		}
		if !strings.Contains(ui, why) {
			t.Errorf("the plan box says nothing about %s:\n%s", why, ui)
		}
		shot(t, "plan")
		clean(t, "plan")
	})

	t.Run("models", func(t *testing.T) {
		apiCall(t, "POST", api+"/v1/artifacts?name=transactions&version=2026-11&kind=dataset", "application/octet-stream",
			strings.NewReader(strings.Repeat("amount,merchant_risk,hour,is_fraud\n12.5,0.1,13,0\n", 2000)))
		src := t.TempDir()
		os.WriteFile(filepath.Join(src, "train.py"), []byte("print('hello')\n"), 0o600)
		var code bytes.Buffer
		if err := trainer.PackCode(&code, src); err != nil {
			t.Fatal(err)
		}
		apiCall(t, "POST", api+"/v1/artifacts?name=trainer-code&version=1&kind=code", "application/octet-stream", &code)
		open(t, "models")
		waitFor(t, "the dataset", `document.querySelector('.page-models').textContent.includes('transactions')`, 10*time.Second)
		waitFor(t, "the code under Code, not Datasets", `[...document.querySelectorAll('.page-models section')].some((s) => s.querySelector('h2') && s.querySelector('h2').textContent === 'Code' && s.textContent.includes('trainer-code')) && ![...document.querySelectorAll('.page-models section')].some((s) => s.querySelector('h2') && s.querySelector('h2').textContent === 'Datasets' && s.textContent.includes('trainer-code'))`, 10*time.Second)
		shot(t, "models")
		clean(t, "models")
	})

	for _, page := range []string{"drift", "training"} {
		t.Run(page, func(t *testing.T) {
			open(t, page)
			shot(t, page)
			clean(t, page)
		})
	}

	t.Run("events", func(t *testing.T) {
		open(t, "events")
		waitFor(t, "the placement events", `document.querySelectorAll('.events tbody tr[data-type^="placement."]').length > 0`, 10*time.Second)
		shot(t, "events")
		do(t, "hiding placement events", 5*time.Second, chromedp.Click(chromedp.CSS(`button[data-kind="placement"]`)))
		if n := eval(t, `String(document.querySelectorAll('.events tbody tr[data-type^="placement."]').length)`); n != "0" {
			t.Errorf("the placement filter left %s placement events", n)
		}
		if p := eval(t, `document.querySelector('button[data-kind="placement"]').getAttribute('aria-pressed')`); p != "false" {
			t.Errorf("the placement filter button says aria-pressed=%s", p)
		}
		clean(t, "events")
	})

	t.Run("phone", func(t *testing.T) {
		do(t, "a phone's viewport", 5*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
		for _, page := range []string{"mesh", "placements"} {
			open(t, page)
			if w := eval(t, `String(document.documentElement.scrollWidth - window.innerWidth)`); w != "0" {
				t.Errorf("%s on a phone: the page is %s px wider than the screen", page, w)
			}
			shot(t, page+"-phone")
		}
		clean(t, "phone")
	})

	// The pages that need the whole story (drift, a rollout, a job with
	// output, a transfer under way) are checked on recorded answers.
	t.Run("recorded", func(t *testing.T) {
		do(t, "a desktop's viewport", 5*time.Second, chromedp.EmulateViewport(1280, 800))
		base := demoServer(t)
		do(t, "loading the recorded dashboard", 15*time.Second, chromedp.Navigate(base+"/ui/#/drift"))
		waitFor(t, "the drift page", `!!document.querySelector('.page-drift[data-loaded]')`, 10*time.Second)
		if n := eval(t, `String(document.querySelectorAll('.page-drift .monitor').length)`); n != "2" {
			t.Errorf("%s drift monitors shown, want 2 (edge-a-1, edge-b-1)", n)
		}
		var drift []struct {
			Node    string `json:"node"`
			History []any  `json:"history"`
		}
		b, err := os.ReadFile("testdata/demo/drift.json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &drift); err != nil {
			t.Fatal(err)
		}
		for _, d := range drift {
			sel := `.monitor[data-node="` + d.Node + `"]`
			if n := eval(t, `String(document.querySelectorAll('`+sel+` circle.pt').length)`); n != fmt.Sprint(len(d.History)) {
				t.Errorf("%s: %s points drawn, want the %d of its history", d.Node, n, len(d.History))
			}
			if n := eval(t, `String(document.querySelectorAll('`+sel+` .stage-mark').length)`); n != "3" {
				t.Errorf("%s: %s rollout stages marked, want 3 (retraining, canary, promoted)", d.Node, n)
			}
			if n := eval(t, `String(document.querySelectorAll('`+sel+` .threshold').length)`); n != "1" {
				t.Errorf("%s: %s threshold lines", d.Node, n)
			}
		}
		if n := eval(t, `String(document.querySelectorAll('.monitor[data-node="edge-a-1"] .alarm-mark').length)`); n != "1" {
			t.Errorf("edge-a-1: %s alarms marked, want the one of the story", n)
		}
		// KS scores are p-values, and a p-value alarms below its threshold:
		// the page says so wherever it shows the threshold or a score, so
		// that p = 0.998 beside 0.001 does not read as an alarm.
		for sel, want := range map[string]string{
			"p.small.muted":     "ks over 300 samples, alarm below p = 0.001, reference training; 526 samples seen, 527 served, 0 failed",
			".threshold-label":  "alarm below p = 0.001",
			"> h3":              "Latest p-value per feature (alarm below p = 0.001)",
			".features li .num": "p = 0.998",
			"circle.pt title":   " after 300 samples: mean_radius p = 0.839 (alarm below p = 0.001)", // after the local time
		} {
			if got := eval(t, `(document.querySelector('.monitor[data-node="edge-b-1"] `+sel+`') || {}).textContent || ''`); !strings.HasSuffix(got, want) {
				t.Errorf("edge-b-1's %s reads %q, want %q", sel, got, want)
			}
		}
		shot(t, "recorded-drift")
		clean(t, "recorded drift")

		open(t, "training")
		for sel, want := range map[string]string{
			".job-data":    "cases@2",
			".job-metrics": "accuracy=0.9123 classes=2 holdout_rows=114 loss=0.1239 train_accuracy=0.9538 train_rows=455",
			".job-steps":   "40 reported: accuracy 0.886 → 0.9123, loss 0.3116 → 0.1239",
		} {
			if got := eval(t, `(document.querySelector('[data-job="screening-retrain-1"] `+sel+`') || {}).textContent || ''`); got != want {
				t.Errorf("the retrain's %s shows %q, want %q", sel, got, want)
			}
		}
		do(t, "opening the logs", 5*time.Second, chromedp.Click(chromedp.CSS(`[data-job="screening-retrain-1"] a.button`)))
		waitFor(t, "the job's output", `!!document.querySelector('.job-logs')`, 5*time.Second)
		want, err := os.ReadFile("testdata/demo/logs.txt")
		if err != nil {
			t.Fatal(err)
		}
		if got := eval(t, `document.querySelector('.job-logs').textContent`); got != string(want) {
			t.Errorf("the logs show %q, want %q", got, want)
		}
		shot(t, "recorded-training")
		clean(t, "recorded training")

		open(t, "models")
		if got := eval(t, `[...document.querySelectorAll('.progress')].map((p) => p.getAttribute('aria-valuenow')).join(',')`); got != "41,100" {
			t.Errorf("progress bars at %s, want 41,100", got)
		}
		shot(t, "recorded-models")
		clean(t, "recorded models")

		open(t, "placements")
		if got := eval(t, `(document.querySelector('.stages li[aria-current="step"]') || {}).textContent || ''`); got != "promoted" {
			t.Errorf("the rollout's current stage shows %q, want promoted", got)
		}
		// A training job's placement is done whatever became of the job:
		// the badge is coloured by the outcome its message tells.
		if got := eval(t, `(() => { const b = document.querySelector('[data-policy="TrainingJob/screening-sweep-trial-3"] .policy-head .badge'); return b ? b.className + ' ' + b.textContent : ''; })()`); got != "badge st-failed done" {
			t.Errorf("the failed trial's placement badge is %q, want done, coloured as failed (badge st-failed done)", got)
		}
		// A fallback names its tier once, though its message begins with it.
		wantFallbacks := "edge (constraint): 0 of 2 nodes feasible (most rejected: constraint ×2)|cloud (no_gpu): 0 of 2 nodes feasible (most rejected: no_gpu ×2)"
		if got := eval(t, `[...document.querySelectorAll('[data-policy="TrainingJob/screening-big"] ul.small li')].map((li) => li.textContent).join('|')`); got != wantFallbacks {
			t.Errorf("screening-big's fallbacks read %q, want %q", got, wantFallbacks)
		}
		shot(t, "recorded-placements")
		clean(t, "recorded placements")

		open(t, "events")
		// 18 recorded, the 16th a repeat of the 15th: one row, counted.
		if n := eval(t, `String(document.querySelectorAll('.events tbody tr').length)`); n != "17" {
			t.Errorf("%s events listed, want the 17 recorded (one repeated)", n)
		}
		// placement.done is a failure where the job failed (seq 18, a sweep
		// trial), a success where it succeeded (seq 11, the retrain).
		for seq, want := range map[string]string{"11": "badge st-done done", "18": "badge st-failed done"} {
			if got := eval(t, `(() => { const b = document.querySelector('.events tr[data-seq="`+seq+`"] .badge'); return b ? b.className + ' ' + b.textContent : ''; })()`); got != want {
				t.Errorf("event %s's badge is %q, want %q", seq, got, want)
			}
		}
		if got := eval(t, `[...document.querySelectorAll('.events tbody tr')].filter((r) => r.querySelector('.count')).map((r) => r.dataset.seq + r.querySelector('.count').textContent).join(',')`); got != "16 ×2" {
			t.Errorf("counted rows %q, want the repeat, seq 16, counted ×2", got)
		}
		shot(t, "recorded-events")
		clean(t, "recorded events")
	})
}
