package agent

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

func writeFile(tb testing.TB, path, s string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// devMesh starts n dev-mix agents in this process on loopback.
func devMesh(t testing.TB, n int, tweaks ...func(*Config)) []*Agent {
	return devMeshWAN(t, n, false, tweaks...)
}

// devMeshWAN starts n dev-mix agents; with wan, gossip between sites is
// delayed as in `strata dev`, so RTT estimates follow DevSiteRTT.
func devMeshWAN(t testing.TB, n int, wan bool, tweaks ...func(*Config)) []*Agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var agents []*Agent
	dn := &DevNetwork{}
	done := make(chan struct{}, n)
	// A key of its own: a mesh from another test (or another package's
	// test processes) whose freed port this mesh reuses must not gossip
	// its way in.
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	// Gossip runs on an in-memory network of the test's own, unless the
	// test wants WAN delays (those are added on real sockets).
	network := &meshtest.Network{}
	for i, cfg := range DevConfigs(n, t.TempDir(), "127.0.0.1:0") {
		cfg.GossipKey = base64.StdEncoding.EncodeToString(key)
		cfg.MeshTimings = meshtest.FastTimings
		cfg.LogLevel = "error"
		if lvl := os.Getenv("STRATA_TEST_LOG"); lvl != "" {
			cfg.LogLevel = lvl // debugging a test: STRATA_TEST_LOG=info
		}
		cfg.ProcRoot = "discover/testdata/proc"
		// The tests call Handler with httptest.NewRequest, whose Host is
		// example.com.
		cfg.APIAllowedHosts = []string{"example.com"}
		if wan {
			cfg.PacketDelay = dn.Delay(cfg.Site)
		} else {
			cfg.GossipTransport = network.NewTransport(cfg.Name)
		}
		for _, tw := range tweaks {
			tw(&cfg)
		}
		if i > 0 {
			cfg.Join = []string{agents[0].Mesh().GossipAddr()}
		}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dn.Register(a.Mesh().GossipAddr(), cfg.Site)
		agents = append(agents, a)
		go func() { a.Run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range agents {
			<-done
		}
	})
	meshtest.WaitFor(t, 15*time.Second, "the dev mesh to form", func() bool {
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
			// What forwarding needs of each peer's document: its role
			// and its data plane.
			for _, b := range agents {
				want := b.Mesh().Local()
				got, err := a.Mesh().Node(b.Name())
				if err != nil || got.Controller != want.Controller || got.Addrs.Data != want.Addrs.Data {
					return false
				}
			}
		}
		return true
	})
	return agents
}

func get(t testing.TB, h http.Handler, path string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusOK || !strings.HasPrefix(path, "/metrics") {
		if !strings.HasPrefix(ct, "application/json") {
			t.Errorf("GET %s: content type %q, want JSON", path, ct)
		}
	}
	return rec.Code, rec.Body.Bytes()
}

func TestAPI(t *testing.T) {
	agents := devMesh(t, 7)
	h := agents[0].Handler()

	// /v1/nodes: every node with the documented fields.
	code, body := get(t, h, "/v1/nodes")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/nodes = %d %s", code, body)
	}
	var nodes []map[string]any
	if err := json.Unmarshal(body, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 7 {
		t.Fatalf("got %d nodes, want 7", len(nodes))
	}
	for _, n := range nodes {
		for _, f := range []string{"name", "id", "tier", "site", "region", "labels", "addrs", "capabilities", "load", "version", "status"} {
			if _, ok := n[f]; !ok {
				t.Errorf("node %v lacks field %q", n["name"], f)
			}
		}
		addrs := n["addrs"].(map[string]any)
		if addrs["gossip"] == "" || addrs["api"] == "" {
			t.Errorf("node %v addrs = %v", n["name"], addrs)
		}
	}

	// Filters.
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"?tier=onprem", []string{"gpu-1", "gpu-2"}},
		{"?site=edge-a", []string{"edge-a-1", "edge-a-2"}},
		{"?label=city=boston", []string{"edge-b-1"}},
		{"?tier=edge&label=city=lyon", []string{"edge-a-1", "edge-a-2"}},
		{"?tier=cloud&site=edge-a", []string{}},
	} {
		code, body := get(t, h, "/v1/nodes"+tc.query)
		var got []mesh.Node
		if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
			t.Fatalf("GET /v1/nodes%s = %d %s", tc.query, code, body)
		}
		names := []string{}
		for _, n := range got {
			names = append(names, n.Name)
		}
		if strings.Join(names, ",") != strings.Join(tc.want, ",") {
			t.Errorf("GET /v1/nodes%s = %v, want %v", tc.query, names, tc.want)
		}
	}

	// One node by name and by ID; GPUs declared on the rack.
	code, body = get(t, h, "/v1/nodes/gpu-1")
	var gpu mesh.Node
	if code != http.StatusOK || json.Unmarshal(body, &gpu) != nil {
		t.Fatalf("GET /v1/nodes/gpu-1 = %d %s", code, body)
	}
	if len(gpu.Capabilities.GPUs) != 8 || gpu.Capabilities.GPUSource != mesh.SourceDeclared || gpu.Capabilities.Fabric != "ib:rack-1" {
		t.Errorf("gpu-1 capabilities = %+v", gpu.Capabilities)
	}
	if code, _ := get(t, h, "/v1/nodes/"+gpu.ID); code != http.StatusOK {
		t.Errorf("GET by ID = %d", code)
	}

	// self, members, health
	code, body = get(t, h, "/v1/agent/self")
	var self mesh.Node
	if code != http.StatusOK || json.Unmarshal(body, &self) != nil || self.Name != agents[0].Name() {
		t.Errorf("GET /v1/agent/self = %d %s", code, body)
	}
	code, body = get(t, h, "/v1/members")
	var members []mesh.Member
	if code != http.StatusOK || json.Unmarshal(body, &members) != nil || len(members) != 7 {
		t.Errorf("GET /v1/members = %d %s", code, body)
	}
	for _, m := range members {
		if m.Status != mesh.StatusAlive || m.ID == "" || m.Addr == "" {
			t.Errorf("member %+v", m)
		}
	}
	if code, _ := get(t, h, "/v1/health"); code != http.StatusOK {
		t.Errorf("GET /v1/health = %d", code)
	}

	// Errors: JSON with the right status.
	for _, tc := range []struct {
		path  string
		code  int
		field string
	}{
		{"/v1/nodes/nope", http.StatusNotFound, ""},
		{"/v1/nodes?tier=fog", http.StatusBadRequest, "tier"},
		{"/v1/nodes?label=novalue", http.StatusBadRequest, "label"},
		{"/v1/nodes?color=red", http.StatusBadRequest, "color"},
		{"/v1/rtt?from=edge-a-1", http.StatusBadRequest, "to"},
		{"/v1/rtt?from=edge-a-1&to=nope", http.StatusNotFound, ""},
		{"/v1/nope", http.StatusNotFound, ""},
	} {
		code, body := get(t, h, tc.path)
		var e httpjson.ErrorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
			t.Errorf("GET %s: body %s is not a JSON error", tc.path, body)
		}
		if code != tc.code || e.Field != tc.field {
			t.Errorf("GET %s = %d field %q, want %d field %q (%s)", tc.path, code, e.Field, tc.code, tc.field, body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/v1/nodes", nil))
	if rec.Code != http.StatusMethodNotAllowed || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Errorf("DELETE /v1/nodes = %d %s, want 405 JSON", rec.Code, rec.Body)
	}

	// RTT between two other nodes, once coordinates have spread.
	meshtest.WaitFor(t, 20*time.Second, "an RTT estimate between two other nodes", func() bool {
		code, _ := get(t, h, "/v1/rtt?from=gpu-1&to=edge-b-1")
		return code == http.StatusOK
	})
	_, body = get(t, h, "/v1/rtt?from=gpu-1&to=edge-b-1")
	var rtt httpapi.RTTResponse
	// Loopback, but pings measured on a loaded machine (a -race run beside
	// other packages' tests) have read tens of milliseconds.
	if err := json.Unmarshal(body, &rtt); err != nil || rtt.RTTMs < 0 || rtt.RTTMs > 100 {
		t.Errorf("rtt = %s; want a loopback-sized estimate", body)
	}

	// Metrics are served in Prometheus text format.
	code, body = get(t, h, "/metrics")
	if code != http.StatusOK || !strings.Contains(string(body), "strata_mesh_members") {
		t.Errorf("GET /metrics = %d, lacks strata_mesh_members", code)
	}
}

func TestIdentitySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := DevConfigs(1, dir, "127.0.0.1:0")[0]
	cfg.LogLevel = "error"
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := a.ID()
	a.Close()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.ID() != id {
		t.Errorf("ID after restart = %s, want %s", b.ID(), id)
	}
	other := cfg
	other.DataDir = t.TempDir()
	c, err := New(other)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ID() == id {
		t.Error("a fresh data dir got the same ID")
	}
}

// TestDataDirInUse: a second agent on a data dir in use says which process
// holds it, and the dir is free again once the first closes.
func TestDataDirInUse(t *testing.T) {
	cfg := DevConfigs(1, t.TempDir(), "127.0.0.1:0")[0]
	cfg.LogLevel = "error"
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg)
	want := fmt.Sprintf("is in use by pid %d", os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		a.Close()
		t.Fatalf("second agent on the data dir: err = %v, want it to say %q", err, want)
	}
	a.Close()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	b.Close()
}
