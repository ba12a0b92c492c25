package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/testbed"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// BenchmarkFailover measures, on the test bed, what a replica's standby
// saves when its node dies: three edge sites of three hosts each and a
// cloud host, 10 ms and 40 Mbit/s between sites. Each edge site serves its
// own 200 MB model (STRATA_FAILOVER_MB) from one replica pinned to the
// site; edge-b's service prestages, edge-c's prestages with warm: true.
// Once all serve and the standbys hold their models (edge-c's loaded),
// the replicas' agents are killed (SIGKILL) at once, and a client at a
// host of each site that is neither the replica's nor the standby's asks
// every 100 ms, giving up on each request after a second. Reported, per
// service: seconds from the kill until the placement names a replacement,
// and until the client's first request is answered; and the bytes the
// standby pulled ahead of time, as rows warm, prestage and fixed.
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 1x ./cmd/strata/
func BenchmarkFailover(b *testing.B) {
	if os.Getenv("STRATA_ORT_LIB") == "" {
		b.Skip("STRATA_ORT_LIB is not set: run `make setup-ort`")
	}
	mb := 200
	if v, err := strconv.Atoi(os.Getenv("STRATA_FAILOVER_MB")); err == nil && v > 0 {
		mb = v
	}
	bed := testbed.Start(b, testbed.Site{Name: "edge-a", Hosts: 3}, testbed.Site{Name: "edge-b", Hosts: 3}, testbed.Site{Name: "edge-c", Hosts: 3}, testbed.Site{Name: "cloud", Hosts: 1})
	for _, l := range [][2]string{{"edge-a", "edge-b"}, {"edge-a", "edge-c"}, {"edge-b", "edge-c"}, {"edge-a", "cloud"}, {"edge-b", "cloud"}, {"edge-c", "cloud"}} {
		bed.SetLink(l[0], l[1], 10*time.Millisecond, 0)
		bed.SetRate(l[0], l[1], 40e6)
	}
	pki := bedPKI(b)
	all := startPool(b, bed, []string{"cloud", "edge-a", "edge-b", "edge-c"}, func(site string) []string {
		tier := "edge"
		if site == "cloud" {
			tier = "cloud"
		}
		return append([]string{"-tier", tier, "-controller", strconv.FormatBool(site == "cloud")}, pki...)
	})
	agents := map[string]*nsAgent{}
	for _, a := range all {
		agents[a.name] = a
	}
	cloud := all[0]
	dump := func() { logAgents(b, all) }
	meshtest.Poll(b, 60*time.Second, 250*time.Millisecond, "one mesh of ten", func() bool { return cloud.seesAlive(b, 10) }, dump)

	// Three models of mb MB each: 1000 inputs, a wide hidden layer, 2
	// outputs.
	hidden := mb << 20 / 4 / 1002
	dir := b.TempDir()
	for i, name := range []string{"model-a", "model-b", "model-c"} {
		m, _, err := onnx.RandomMLP(int64(i+1), 1000, hidden, 2)
		if err != nil {
			b.Fatal(err)
		}
		f := filepath.Join(dir, name+".onnx")
		if err := os.WriteFile(f, m, 0o600); err != nil {
			b.Fatal(err)
		}
		if out, err := cloud.run("push", f, "--name", name, "--version", "1"); err != nil {
			b.Fatalf("push %s: %v\n%s", name, err, out)
		}
	}
	applyService(b, cloud, "svc-a", "model-a", "  constraints: ['node.site == \"edge-a\"']\n")
	applyService(b, cloud, "svc-b", "model-b", "  prestage: true\n  constraints: ['node.site == \"edge-b\"']\n")
	applyService(b, cloud, "svc-c", "model-c", "  prestage: true\n  warm: true\n  constraints: ['node.site == \"edge-c\"']\n")
	placed := func(name string) api.PlacementStatus {
		var ps []api.PlacementStatus
		if cloud.get(b, &ps, "placements") == nil {
			for _, p := range ps {
				if p.Name == name {
					return p
				}
			}
		}
		return api.PlacementStatus{}
	}
	serving := func(p api.PlacementStatus) string {
		if p.State != api.StatePlaced || len(p.Nodes) != 1 || p.Nodes[0].Replica != "serving" {
			return ""
		}
		return p.Nodes[0].Name
	}
	holds := func(node, model string) bool {
		var ms []api.Model
		if cloud.get(b, &ms, "models") != nil {
			return false
		}
		for _, m := range ms {
			if m.Name == model && len(m.Versions) > 0 {
				return slices.Contains(m.Versions[0].Holders, node)
			}
		}
		return false
	}
	// The standby's agent's metrics say when it has loaded the model.
	warmLoaded := func(node string) bool {
		for _, h := range bed.Hosts("edge-c") {
			if h.Name == node {
				return bytes.Contains(hostMetrics(b, h), []byte(`strata_infer_standby_loaded{model="model-c",version="1"} 1`))
			}
		}
		return false
	}
	start := time.Now()
	standbys := map[string]string{}
	meshtest.Poll(b, 10*time.Minute, time.Second, "all services serving and the standbys holding their models", func() bool {
		if serving(placed("svc-a")) == "" {
			return false
		}
		for _, svc := range []string{"svc-b", "svc-c"} {
			p := placed(svc)
			if serving(p) == "" || p.Nodes[0].Standby == "" || !holds(p.Nodes[0].Standby, "model-"+strings.TrimPrefix(svc, "svc-")) {
				return false
			}
			standbys[svc] = p.Nodes[0].Standby
		}
		return warmLoaded(standbys["svc-c"])
	}, dump)
	b.Logf("all served and the standbys %v held their models (svc-c's loaded) %s after the apply", standbys, time.Since(start).Round(time.Second))

	type result struct{ replaced, served time.Duration }
	results := map[string]*result{}
	victims := map[string]string{}
	svcs := []string{"svc-a", "svc-b", "svc-c"}
	for _, svc := range svcs {
		victims[svc] = serving(placed(svc))
		results[svc] = &result{}
	}
	killed := time.Now()
	for _, v := range victims {
		_ = agents[v].proc.cmd.Process.Kill()
	}
	var wg sync.WaitGroup
	for _, svc := range svcs {
		site := "edge-" + strings.TrimPrefix(svc, "svc-")
		var client testbed.Host
		for _, h := range bed.Hosts(site) {
			if h.Name != victims[svc] && h.Name != standbys[svc] {
				client = h
			}
		}
		model := "model-" + strings.TrimPrefix(svc, "svc-")
		// Two loops, so that a request left waiting on the dead node
		// does not delay seeing the placement, nor the other way round.
		// Their 100 ms pause is the client's pace, part of what is
		// measured (the figures are to that resolution), not a settle.
		r := results[svc]
		wg.Go(func() {
			for deadline := killed.Add(5 * time.Minute); time.Now().Before(deadline) && r.replaced == 0; time.Sleep(100 * time.Millisecond) {
				if p := placed(svc); len(p.Nodes) > 0 && !placedOn(p, victims[svc]) {
					r.replaced = time.Since(killed)
				}
			}
		})
		wg.Go(func() {
			for deadline := killed.Add(5 * time.Minute); time.Now().Before(deadline) && r.served == 0; time.Sleep(100 * time.Millisecond) {
				if by, ok := askModel(client, model); ok && by != victims[svc] {
					r.served = time.Since(killed)
				}
			}
		})
	}
	wg.Wait()
	for _, svc := range svcs {
		if results[svc].served == 0 {
			dump()
			b.Fatalf("%s was not served again within 5 minutes of the kill", svc)
		}
	}
	b.Logf("without a standby (svc-a): replaced after %s, served after %s", results["svc-a"].replaced.Round(100*time.Millisecond), results["svc-a"].served.Round(100*time.Millisecond))
	b.Logf("with a prestaged standby (svc-b): replaced after %s, served after %s", results["svc-b"].replaced.Round(100*time.Millisecond), results["svc-b"].served.Round(100*time.Millisecond))
	b.Logf("with a warm standby (svc-c): replaced after %s, served after %s", results["svc-c"].replaced.Round(100*time.Millisecond), results["svc-c"].served.Round(100*time.Millisecond))
	// One row per strategy, side by side (cmd/benchtable).
	for _, row := range []struct {
		impl, svc string
		mb        int
	}{{"warm", "svc-c", mb}, {"prestage", "svc-b", mb}, {"fixed", "svc-a", 0}} {
		b.Run("impl="+row.impl, func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(results[row.svc].replaced.Seconds(), "s-to-replace")
			b.ReportMetric(results[row.svc].served.Seconds(), "s-to-serve")
			b.ReportMetric(float64(row.mb), "MB-ahead")
		})
	}
}

// placedOn says whether p places its replica on node.
func placedOn(p api.PlacementStatus, node string) bool {
	return slices.ContainsFunc(p.Nodes, func(n api.PlacedNode) bool { return n.Name == node })
}

// askModel sends one inference request for model (1000 inputs) to the
// agent of host h; it says which node answered, when one did.
func askModel(h testbed.Host, model string) (string, bool) {
	x := make([]float32, 1000)
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 1000}, "datatype": "FP32", "data": x}}})
	c := inHost(h)
	c.Timeout = time.Second // one left waiting on the dead node is given up
	resp, err := c.Post(fmt.Sprintf("http://127.0.0.1:7470/v2/models/%s/infer", model), "application/json", bytes.NewReader(body))
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	return resp.Header.Get(infer.HeaderServedBy), resp.StatusCode == http.StatusOK
}
