package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/testbed"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// rampPolicy is the service BenchmarkLoadRamp loads: autoscaled between 1
// and 4 replicas at rampTarget requests/s each, for clients in edge-a
// within 20 ms, on edge nodes; what edge-a cannot hold overflows to
// on-prem. A replica asks 1.5 of a host's 2 cores, so each edge-a host
// holds one.
const rampPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: ramp}
spec:
  model: {name: ramp, version: "1"}
  resources: {cpu: 1500m, memory: 64Mi}
  tiers: [edge]
  latency: {p99: 20ms, clients: [edge-a]}
  autoscale: {min: 1, max: 4, target: {rps: %d}, scaleDownAfter: 30s}
  burst: {tiers: [onprem], maxExtraLatency: 20ms, scaleDownAfter: 30s}
`

// rampStep is one leg of the load: from rps to rps over d.
type rampStep struct {
	d        time.Duration
	from, to float64
}

// rampSecond is what the client saw in one second of the ramp, and the
// placement the cloud's agent showed at its end.
type rampSecond struct {
	offered       float64
	lat           []time.Duration // answered requests
	failed        int
	burstAnswered int // answered by a node of the burst tier
	replicas      int // placed
	serving       int
	burst         int
	shedByClient  int // the generator could not keep up (not sent)
	failedSamples []string
}

// rampConfig is one load ramp: its peak, the service's target a replica,
// the agents' spill_inflight, edge-a's CPU bound per host (0: none) and
// the model's hidden width.
type rampConfig struct {
	name         string
	peak         float64
	target       int
	spill, width int
	edgeCPU      float64
}

// BenchmarkLoadRamp runs the inference load of a day's peak, compressed,
// on the test bed: edge-a (2 hosts, tier edge), onprem (2 hosts, 5 ms from
// edge-a), cloud (1 host, the controller, 20 ms away), 40 Mbit/s between
// sites. An open-loop client in edge-a spreads requests over edge-a's two
// agents (a site's load balancer) and ramps from 50 requests/s to the peak
// and back: 20 s at 50, a minute up, a minute at the peak, a minute down,
// 90 s at 50. The service (rampPolicy) autoscales at the target a replica
// up to 4 replicas: edge-a holds 2, the rest burst to on-prem, and come
// back when the load falls. Logged, per 10 s: the load offered and
// answered, failures, the client's p50 and p99, and the replicas placed,
// serving and on the burst tier. Reported: requests failed, the most
// replicas and burst replicas, the p99 over the whole run, and the
// seconds whose p99 was over 50 ms (the reaction window). Failed requests
// are counted apart, not in the percentiles.
//
// Two ramps, side by side:
//   - edge-unbounded: a small model (8-16-16-1), a peak of 2,000 req/s,
//     400 a replica, the agents' default spill_inflight (64). Every host
//     shares this machine's cores, so edge-a's replicas never queue, and
//     the burst replicas are placed but answer nothing: the hop costs
//     more than the queue.
//   - edge-0.2cpu: each edge-a host bounded to 0.2 CPU (a control group's
//     quota, as a small edge box), a model that costs milliseconds of CPU
//     a request (8-4096-4096-1), a peak of 400 req/s, 100 a replica, and
//     spill_inflight 1: edge-a cannot answer the peak, and the burst tier
//     answers what it offers on.
//
// STRATA_RAMP_PEAK, STRATA_RAMP_TARGET, STRATA_RAMP_SPILL,
// STRATA_RAMP_EDGE_CPU and STRATA_RAMP_WIDTH override those figures in
// both.
//
//	go test -run '^$' -bench BenchmarkLoadRamp -benchtime 1x ./cmd/strata/
func BenchmarkLoadRamp(b *testing.B) {
	if os.Getenv("STRATA_ORT_LIB") == "" {
		b.Skip("STRATA_ORT_LIB is not set: run `make setup-ort`")
	}
	for _, c := range []rampConfig{
		{name: "edge-unbounded", peak: 2000, target: 400, spill: 64, width: 16},
		{name: "edge-0.2cpu", peak: 400, target: 100, spill: 1, width: 4096, edgeCPU: 0.2},
	} {
		if v, err := strconv.ParseFloat(os.Getenv("STRATA_RAMP_PEAK"), 64); err == nil && v > 0 {
			c.peak = v
		}
		if v, err := strconv.Atoi(os.Getenv("STRATA_RAMP_TARGET")); err == nil && v > 0 {
			c.target = v
		}
		if v, err := strconv.Atoi(os.Getenv("STRATA_RAMP_SPILL")); err == nil && v != 0 {
			c.spill = v
		}
		if v, err := strconv.ParseFloat(os.Getenv("STRATA_RAMP_EDGE_CPU"), 64); err == nil && v > 0 {
			c.edgeCPU = v
		}
		if v, err := strconv.Atoi(os.Getenv("STRATA_RAMP_WIDTH")); err == nil && v > 0 {
			c.width = v
		}
		b.Run(c.name, func(b *testing.B) { loadRamp(b, c) })
	}
}

// loadRamp runs one ramp of BenchmarkLoadRamp.
func loadRamp(b *testing.B, c rampConfig) {
	peak, target, spill, edgeCPU, width := c.peak, c.target, c.spill, c.edgeCPU, c.width
	const clientSLO = 50 * time.Millisecond
	bed := testbed.Start(b, testbed.Site{Name: "edge-a", Hosts: 2, CPU: edgeCPU}, testbed.Site{Name: "onprem", Hosts: 2}, testbed.Site{Name: "cloud", Hosts: 1})
	bed.SetLink("edge-a", "onprem", 5*time.Millisecond, 0)
	bed.SetLink("edge-a", "cloud", 20*time.Millisecond, 0)
	bed.SetLink("onprem", "cloud", 20*time.Millisecond, 0)
	for _, l := range [][2]string{{"edge-a", "onprem"}, {"edge-a", "cloud"}, {"onprem", "cloud"}} {
		bed.SetRate(l[0], l[1], 40e6)
	}
	pki := bedPKI(b)
	all := startPool(b, bed, []string{"cloud", "edge-a", "onprem"}, func(site string) []string {
		tier := map[string]string{"cloud": "cloud", "edge-a": "edge", "onprem": "onprem"}[site]
		return append([]string{"-tier", tier, "-controller", strconv.FormatBool(site == "cloud"), "-spill-inflight", strconv.Itoa(spill)}, pki...)
	})
	cloud := all[0]
	dump := func() { logAgents(b, all) }
	meshtest.Poll(b, 60*time.Second, 250*time.Millisecond, "one mesh of five", func() bool { return cloud.seesAlive(b, 5) }, dump)

	m, _, err := onnx.RandomMLP(1, 8, width, width, 1)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	f := filepath.Join(dir, "ramp.onnx")
	if err := os.WriteFile(f, m, 0o600); err != nil {
		b.Fatal(err)
	}
	if out, err := cloud.run("push", f, "--name", "ramp", "--version", "1"); err != nil {
		b.Fatalf("push: %v\n%s", err, out)
	}
	svc := filepath.Join(dir, "ramp.yaml")
	if err := os.WriteFile(svc, fmt.Appendf(nil, rampPolicy, target), 0o600); err != nil {
		b.Fatal(err)
	}
	if out, err := cloud.run("apply", "-f", svc); err != nil {
		b.Fatalf("apply: %v\n%s", err, out)
	}
	placed := func() api.PlacementStatus {
		var ps []api.PlacementStatus
		if cloud.get(b, &ps, "placements") == nil {
			for _, p := range ps {
				if p.Name == "ramp" {
					return p
				}
			}
		}
		return api.PlacementStatus{}
	}
	count := func(p api.PlacementStatus) (serving, burst int) {
		for _, n := range p.Nodes {
			if n.Replica == "serving" {
				serving++
			}
			if n.Burst {
				burst++
			}
		}
		return serving, burst
	}
	meshtest.Poll(b, 2*time.Minute, 250*time.Millisecond, "one replica serving", func() bool {
		p := placed()
		s, _ := count(p)
		return p.State == api.StatePlaced && s == 1
	}, dump)

	// The clients: on each of edge-a's hosts, keeping their connections
	// to the host's agent; requests go to the two in turn, as a site's
	// load balancer would spread them.
	type client struct {
		c   *http.Client
		url string
	}
	var targets []client
	for _, h := range bed.Hosts("edge-a") {
		targets = append(targets, client{url: "http://127.0.0.1:7470/v2/models/ramp/infer", c: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			// Within the agent's 64 connections a client: a site's load
			// balancer queues the rest (and its wait counts).
			MaxIdleConnsPerHost: 60, MaxConnsPerHost: 60,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				err := h.Do(func() (err error) {
					c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
					return err
				})
				return c, err
			},
		}}})
	}
	onprem := map[string]bool{}
	for _, h := range bed.Hosts("onprem") {
		onprem[h.Name] = true
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 8}, "datatype": "FP32", "data": make([]float32, 8)}}})

	steps := []rampStep{{20 * time.Second, 50, 50}, {time.Minute, 50, peak}, {time.Minute, peak, peak}, {time.Minute, peak, 50}, {90 * time.Second, 50, 50}}
	var total time.Duration
	for _, s := range steps {
		total += s.d
	}
	rate := func(at time.Duration) float64 {
		for _, s := range steps {
			if at < s.d {
				return s.from + (s.to-s.from)*float64(at)/float64(s.d)
			}
			at -= s.d
		}
		return 0
	}
	secs := make([]rampSecond, int(total/time.Second)+1)
	var mu sync.Mutex
	start := time.Now()
	second := func() int { return min(int(time.Since(start)/time.Second), len(secs)-1) }
	// Open loop: the dispatcher puts each request due on a queue that 400
	// workers send from; a request the queue has no room for is counted
	// as not sent (the generator, not the mesh, fell behind). A request's
	// latency runs from when the dispatcher queued it: waiting for a free
	// worker, because the answers are slow, is part of it.
	type due struct {
		sec int
		at  time.Time
	}
	queue := make(chan due, 4096)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 400 {
		wg.Go(func() {
			for d := range queue {
				sec, t0 := d.sec, d.at
				to := targets[next.Add(1)%int64(len(targets))]
				resp, err := to.c.Post(to.url, "application/json", bytes.NewReader(body))
				var failure, by string
				if err != nil {
					failure = err.Error()
				} else {
					by = resp.Header.Get(infer.HeaderServedBy)
					out, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						failure = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(out))
					}
				}
				took := time.Since(t0)
				mu.Lock()
				s := &secs[sec]
				if failure == "" {
					s.lat = append(s.lat, took)
					if onprem[by] {
						s.burstAnswered++
					}
				} else {
					s.failed++
					if len(s.failedSamples) < 3 {
						s.failedSamples = append(s.failedSamples, failure)
					}
				}
				mu.Unlock()
			}
		})
	}
	// The placement, once a second, from the cloud's agent.
	watchDone := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-watchDone:
				return
			case <-time.After(time.Second):
			}
			p := placed()
			s, burst := count(p)
			mu.Lock()
			sec := &secs[second()]
			sec.replicas, sec.serving, sec.burst = len(p.Nodes), s, burst
			mu.Unlock()
		}
	})
	sent := 0.0
	for tick := time.NewTicker(5 * time.Millisecond); time.Since(start) < total; <-tick.C {
		at := time.Since(start)
		owed := 0.0 // requests due by now: the integral of the rate
		for _, s := range steps {
			d := min(at, s.d)
			owed += (s.from + (s.to-s.from)*float64(d)/float64(s.d)/2) * d.Seconds()
			if at -= d; at <= 0 {
				break
			}
		}
		sec := second()
		mu.Lock()
		secs[sec].offered = rate(time.Since(start))
		mu.Unlock()
		for ; sent < owed; sent++ {
			select {
			case queue <- due{sec, time.Now()}:
			default:
				mu.Lock()
				secs[sec].shedByClient++
				mu.Unlock()
			}
		}
	}
	close(queue)
	wg.Wait()
	close(watchDone)
	watch.Wait()

	// Fill the placement into seconds the watcher skipped (a slow CLI).
	for i := 1; i < len(secs); i++ {
		if secs[i].replicas == 0 {
			secs[i].replicas, secs[i].serving, secs[i].burst = secs[i-1].replicas, secs[i-1].serving, secs[i-1].burst
		}
	}
	pct := func(ls []time.Duration, q float64) time.Duration {
		if len(ls) == 0 {
			return 0
		}
		ls = slices.Clone(ls)
		slices.Sort(ls)
		return ls[min(len(ls)-1, int(q*float64(len(ls))))]
	}
	var failed, shed, mostReplicas, mostBurst, overSLO, answeredBurst int
	var every []time.Duration
	var samples []string
	var lines []string
	for i := 0; i < len(secs); i += 10 {
		var lat []time.Duration
		var offered float64
		var f, sh, reps, serving, burst, atBurst int
		for j := i; j < min(i+10, len(secs)); j++ {
			s := secs[j]
			lat = append(lat, s.lat...)
			offered += s.offered
			f += s.failed
			sh += s.shedByClient
			atBurst += s.burstAnswered
			reps, serving, burst = max(reps, s.replicas), max(serving, s.serving), max(burst, s.burst)
			samples = append(samples, s.failedSamples...)
			if pct(s.lat, 0.99) > clientSLO {
				overSLO++
			}
		}
		n := float64(min(i+10, len(secs)) - i)
		lines = append(lines, fmt.Sprintf("%4ds  %7.0f  %8.0f  %6d  %6d  %5.1f  %5.1f  %8d  %7d  %5d  %7.0f",
			i, offered/n, float64(len(lat))/n, f, sh, ms(pct(lat, 0.5)), ms(pct(lat, 0.99)), reps, serving, burst, float64(atBurst)/n))
		answeredBurst += atBurst
		failed += f
		shed += sh
		every = append(every, lat...)
		mostReplicas, mostBurst = max(mostReplicas, reps), max(mostBurst, burst)
	}
	// The table goes to stdout whole (a benchmark's log is cut at ten
	// lines without -v).
	p := placed()
	spilled := 0.0
	for _, h := range bed.Hosts("edge-a") {
		spilled += sumMetric(hostMetrics(b, h), "strata_infer_spilled_total")
	}
	bound := "unbounded"
	if edgeCPU > 0 {
		bound = fmt.Sprintf("%g CPU each (throttled in %s of their quota periods)", edgeCPU, throttled(b, bed.Hosts("edge-a")))
	}
	fmt.Printf("load ramp 50 → %.0f → 50 req/s, an MLP 8-%d-%d-1, %d req/s a replica, spill_inflight %d, edge-a's hosts %s, client SLO p99 %s (per second, over 10 s; replicas: the most placed, serving and burst):\n  from  offered  answered  failed  unsent  p50ms  p99ms  replicas  serving  burst  atburst\n%s\n"+
		"at the end: %s, %d replica(s), %s; %d requests answered on the burst tier, %.0f spilled by edge-a's agents\n",
		peak, width, width, target, spill, bound, clientSLO, strings.Join(lines, "\n"), p.State, len(p.Nodes), p.Message, answeredBurst, spilled)
	if len(samples) > 0 {
		fmt.Printf("failures (samples): %q\n", samples[:min(len(samples), 10)])
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(len(every)), "answered")
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(float64(shed), "unsent")
	b.ReportMetric(float64(mostReplicas), "max-replicas")
	b.ReportMetric(float64(mostBurst), "max-burst")
	b.ReportMetric(ms(pct(every, 0.99)), "p99-ms")
	b.ReportMetric(float64(overSLO), "s-over-slo")
	b.ReportMetric(float64(answeredBurst), "answered-on-burst")
}

// throttled says, for hosts with a CPU bound, in how many of their quota
// periods each was throttled: "N of M" per host.
func throttled(tb testing.TB, hosts []testbed.Host) string {
	var out []string
	for _, h := range hosts {
		periods, n, err := h.Throttled()
		if err != nil {
			tb.Logf("%s: %v", h.Name, err)
			continue
		}
		out = append(out, fmt.Sprintf("%d of %d", n, periods))
	}
	return strings.Join(out, ", ")
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
