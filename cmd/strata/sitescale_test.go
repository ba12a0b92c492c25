package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/testbed"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// nearLoadPolicy serves one replica in each of edge-a and edge-b, within
// 10 ms of the site's clients, each site autoscaled 1 to 2 at 15
// requests/s a replica.
const nearLoadPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: near}
spec:
  model: {name: near, version: "1"}
  perClientSite: true
  resources: {cpu: 10m, memory: 16Mi}
  latency: {p99: 10ms, clients: [edge-a, edge-b]}
  tiers: [edge]
  autoscale: {max: 2, target: {rps: 15}, scaleDownAfter: 20s}
`

// TestAutoscaleNearTheLoad, on the test bed's namespaces (edge-a and
// edge-b 30 ms apart, the controller in the cloud): a service placed per
// client site, whose requests come from edge-b only, gets its second
// replica in edge-b, and edge-a keeps one; when the load stops, edge-b
// goes back to one after scaleDownAfter. The requests are made at the
// edge-b agent that serves nothing, so each one is forwarded to a
// replica, which counts it for edge-b.
func TestAutoscaleNearTheLoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("two minutes of real time")
	}
	if os.Getenv("STRATA_ORT_LIB") == "" {
		t.Skip("STRATA_ORT_LIB is not set: run `make setup-ort`")
	}
	bed := testbed.Start(t, testbed.Site{Name: "edge-a", Hosts: 2}, testbed.Site{Name: "edge-b", Hosts: 3}, testbed.Site{Name: "cloud", Hosts: 1})
	bed.SetLink("edge-a", "edge-b", 30*time.Millisecond, 0)
	bed.SetLink("edge-a", "cloud", 20*time.Millisecond, 0)
	bed.SetLink("edge-b", "cloud", 20*time.Millisecond, 0)
	pki := bedPKI(t)
	agents := startPool(t, bed, []string{"cloud", "edge-a", "edge-b"}, func(site string) []string {
		tier := "edge"
		if site == "cloud" {
			tier = "cloud"
		}
		return append([]string{"-tier", tier, "-controller", fmt.Sprint(site == "cloud")}, pki...)
	})
	cloud := agents[0]
	dump := func() { logAgents(t, agents) }
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of six", func() bool { return cloud.seesAlive(t, 6) }, dump)

	m, _, err := onnx.RandomMLP(3, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, svc := filepath.Join(dir, "near.onnx"), filepath.Join(dir, "near.yaml")
	os.WriteFile(model, m, 0o600)
	os.WriteFile(svc, []byte(nearLoadPolicy), 0o600)
	if out, err := cloud.run("push", model, "--name", "near", "--version", "1"); err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	if out, err := cloud.run("apply", "-f", svc); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	var p api.PlacementStatus
	// bySite counts the serving replicas of each client site, and says
	// whether every replica is serving and in its client's site.
	bySite := func() (map[string]int, bool) {
		var ps []api.PlacementStatus
		p = api.PlacementStatus{}
		if cloud.get(t, &ps, "placements") != nil {
			return nil, false
		}
		for _, q := range ps {
			if q.Name == "near" {
				p = q
			}
		}
		out, ok := map[string]int{}, p.State == api.StatePlaced
		for _, n := range p.Nodes {
			ok = ok && n.Replica == "serving" && n.Site == n.Client
			out[n.Client]++
		}
		return out, ok
	}
	logPlacement := func() { t.Logf("placement: %s %+v scale %+v: %s", p.State, p.Nodes, p.Scale, p.Message) }
	meshtest.Poll(t, 2*time.Minute, 500*time.Millisecond, "one replica serving in each site", func() bool {
		got, ok := bySite()
		return ok && got["edge-a"] == 1 && got["edge-b"] == 1
	}, func() { logPlacement(); dump() })
	// The requests: at an edge-b host whose agent serves nothing.
	var at testbed.Host
	for _, h := range bed.Hosts("edge-b") {
		placedThere := false
		for _, n := range p.Nodes {
			placedThere = placedThere || n.Name == h.Name
		}
		if !placedThere {
			at = h
			break
		}
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 4}, "datatype": "FP32", "data": []float32{1, 2, 3, 4}}}})
	var sent, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := inHost(at)
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Post("http://127.0.0.1:7470/v2/models/near/infer", "application/json", bytes.NewReader(body))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						failed.Add(1)
					}
				}
				// Four callers pausing 50 ms: about 70 requests/s with
				// the forward's round trip, over twice the target of
				// one replica. The pace is the load under test.
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	meshtest.Poll(t, 90*time.Second, 500*time.Millisecond, "edge-b at two replicas, edge-a at one", func() bool {
		got, ok := bySite()
		return ok && got["edge-a"] == 1 && got["edge-b"] == 2
	}, func() { logPlacement(); dump() })
	stopLoad()
	t.Logf("scaled: %+v; %s", p.Scale, p.Message)
	if p.Scale == nil || p.Scale.Sites["edge-b"] != 2 || p.Scale.Sites["edge-a"] != 1 {
		t.Errorf("scale %+v: want edge-a 1 and edge-b 2", p.Scale)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed", n, sent.Load())
	}
	meshtest.Poll(t, 90*time.Second, 500*time.Millisecond, "edge-b back at one replica once the load stopped", func() bool {
		got, ok := bySite()
		return ok && got["edge-a"] == 1 && got["edge-b"] == 1
	}, func() { logPlacement(); dump() })
	t.Logf("scaled back: %+v", p.Scale)
}
