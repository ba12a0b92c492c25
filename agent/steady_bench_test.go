package agent

import (
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// partlyPolicy asks two replicas for edge-b's clients within 15 ms: in the
// dev mesh only edge-b-1 meets that, so it can be placed only in part.
const partlyPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: partly}
spec:
  model: {name: scorer, version: "1"}
  replicas: 2
  tiers: [edge, onprem, cloud]
  resources: {cpu: 100m, memory: 64Mi}
  latency: {p99: 15ms, clients: [edge-b]}
`

// BenchmarkPartlyPlacedUnderLoad applies a service that only edge-b-1 can
// take of the two replicas it asks for, on the 8-agent dev mesh (WAN
// delays between sites, the agent's own failure detection) with
// STRATA_BENCH_BUSY (default 3) busy loops per core beside it, and watches
// it for STRATA_BENCH_SECONDS (default 60; the steadiness target is 600)
// once it serves: the share of once-a-second looks that find it serving
// on edge-b-1, how often its epoch moved, and its events.
func BenchmarkPartlyPlacedUnderLoad(b *testing.B) {
	lib := ortLib(b)
	busy, secs := 3, 60
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_BUSY")); err == nil && v >= 0 {
		busy = v
	}
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	b.Run("impl=strata", func(b *testing.B) {
		for range b.N {
			keys, err := NewDevPKI()
			if err != nil {
				b.Fatal(err)
			}
			agents := devMeshWAN(b, 8, true, func(c *Config) { c.PKI, c.ORTLibrary, c.MeshTimings = keys, lib, nil })
			model, _, err := onnx.RandomMLP(1, 8, 16, 2)
			if err != nil {
				b.Fatal(err)
			}
			if code, body := post(b, agents[5].Handler(), http.MethodPost, "/v1/artifacts?name=scorer&version=1", model); code != http.StatusCreated {
				b.Fatalf("push = %d %s", code, body)
			}
			const key = "InferenceService/partly"
			servingOnB := func() bool {
				n, err := agents[0].Mesh().Node("edge-b-1")
				return err == nil && slices.Contains(n.Models, "scorer@1")
			}
			meshtest.WaitFor(b, 120*time.Second, "the partly placeable service applied", func() bool {
				code, _ := post(b, agents[1].Handler(), http.MethodPost, "/v1/policies", []byte(partlyPolicy))
				return code == http.StatusOK
			})
			meshtest.BusyLoops(b, busy*runtime.NumCPU(), time.Duration(secs)*time.Second+3*time.Minute)
			meshtest.WaitFor(b, 120*time.Second, "it serves on edge-b-1", func() bool {
				rec, ok := placementOf(agents[0], key)
				return ok && rec.State == StatePlaced && servingOnB()
			})
			rec, _ := placementOf(agents[0], key)
			first, epochs, looks, serving := rec.Epoch, 0, 0, 0
			last := rec.Epoch
			evs, _, cancel := agents[0].events.Subscribe(0)
			cancel()
			before := 0
			for _, ev := range evs {
				if ev.Policy == key {
					before++
				}
			}
			end := time.Now().Add(time.Duration(secs) * time.Second)
			for time.Now().Before(end) {
				time.Sleep(time.Second) // one look a second, as a user polling would
				looks++
				if servingOnB() {
					serving++
				}
				if rec, ok := placementOf(agents[0], key); ok && rec.Epoch != last {
					epochs++
					last = rec.Epoch
				}
			}
			evs, _, cancel = agents[0].events.Subscribe(0)
			cancel()
			during, messages := 0, map[string]bool{}
			for _, ev := range evs {
				if ev.Policy == key {
					during++
					messages[ev.Type+": "+ev.Message] = true
				}
			}
			rec, _ = placementOf(agents[0], key)
			b.Logf("after %ds with %d busy loops per core: %s epoch %d (first %d) on %s: %s; %d events kept (%d before the watch): %v",
				secs, busy, rec.State, rec.Epoch, first, rec.NodeNames(), rec.Message, during, before, messages)
			b.ReportMetric(100*float64(serving)/float64(looks), "serving-%")
			b.ReportMetric(float64(epochs), "epoch-moves")
			b.ReportMetric(float64(during-before), "events")
			if rec.NodeNames() != "edge-b-1" {
				b.Errorf("placed on %q, want edge-b-1 only", rec.NodeNames())
			}
		}
	})
}
