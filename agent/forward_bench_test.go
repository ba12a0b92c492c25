package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// forwardPolicy is one replica of a small model on an edge-a node.
const forwardPolicy = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: fwd}
spec:
  model: {name: fwd, version: "1"}
  replicas: 1
  tiers: [edge]
  resources: {cpu: 100m, memory: 32Mi}
`

// BenchmarkForwardCost measures the CPU an inference request costs when
// the agent asked serves the model (direct) and when it forwards it to the
// agent next door that does (forwarded: the asking agent's forwarder, the
// data plane's QUIC and TLS both ways, the serving agent's handler). Two
// agents of edge-a in one process, a small model (8-16-16-2), one request
// at a time, forwardRequests of them an iteration: cpu-us/req is the
// process's CPU time (user and system) over the requests, so the
// difference of the two is what forwarding adds. An edge host whose CPU
// is bounded forwards its overflow at this price.
func BenchmarkForwardCost(b *testing.B) {
	lib := ortLib(b)
	keys, err := NewDevPKI()
	if err != nil {
		b.Fatal(err)
	}
	yes := true // edge agents place nothing by default: these two do
	agents := devMesh(b, 2, func(c *Config) { c.PKI, c.ORTLibrary, c.Controller = keys, lib, &yes })
	model, _, err := onnx.RandomMLP(1, 8, 16, 2)
	if err != nil {
		b.Fatal(err)
	}
	if code, body := post(b, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=fwd&version=1", model); code != http.StatusCreated {
		b.Fatalf("push = %d %s", code, body)
	}
	if code, body := post(b, agents[0].Handler(), http.MethodPost, "/v1/policies", []byte(forwardPolicy)); code != http.StatusOK {
		b.Fatalf("apply = %d %s", code, body)
	}
	var server, forwarder *Agent
	meshtest.WaitFor(b, 60*time.Second, "fwd served, and its replica known to the other agent", func() bool {
		for i, a := range agents {
			n, err := a.Mesh().Node(a.Name())
			if err != nil || len(n.Models) == 0 {
				continue
			}
			server, forwarder = a, agents[1-i]
			return len(forwarder.fwd.ServingNodes("fwd", "")) > 0
		}
		return false
	})
	in := make([]float32, 8)
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 8}, "datatype": "FP32", "data": in}}})
	ask := func(b *testing.B, h http.Handler, want string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v2/models/fwd/infer", bytes.NewReader(body)))
		if rec.Code != http.StatusOK || rec.Header().Get(infer.HeaderServedBy) != want {
			b.Fatalf("infer = %d by %q, want 200 by %s: %s", rec.Code, rec.Header().Get(infer.HeaderServedBy), want, rec.Body)
		}
	}
	cost := map[string]float64{}
	for _, c := range []struct {
		name string
		at   *Agent
	}{{"direct", server}, {"forwarded", forwarder}} {
		b.Run(c.name, func(b *testing.B) {
			ask(b, c.at.Handler(), server.Name()) // warm: connections, the session
			before, start := processCPU(), time.Now()
			b.ResetTimer()
			for range b.N * forwardRequests {
				ask(b, c.at.Handler(), server.Name())
			}
			b.StopTimer()
			n := float64(b.N * forwardRequests)
			cost[c.name] = float64((processCPU() - before).Microseconds()) / n
			b.ReportMetric(cost[c.name], "cpu-us/req")
			b.ReportMetric(float64(time.Since(start).Microseconds())/n, "us/req")
		})
	}
	if cost["direct"] > 0 {
		fmt.Printf("forwarding adds %.0f us of CPU a request (%.1fx a direct one)\n", cost["forwarded"]-cost["direct"], cost["forwarded"]/cost["direct"])
	}
}

// forwardRequests is how many requests one iteration of
// BenchmarkForwardCost sends: make bench runs each benchmark once.
const forwardRequests = 2000

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
