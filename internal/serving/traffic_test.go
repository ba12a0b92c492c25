package serving

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/policy"
)

// docMesh is a node's own document, for a TrafficReporter.
type docMesh struct {
	mu      sync.Mutex
	s       mesh.NodeState
	updates int
}

func (m *docMesh) Local() mesh.NodeState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s.Clone()
}

func (m *docMesh) Update(fn func(*mesh.NodeState)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(&m.s)
	m.updates++
	return nil
}

// TestTrafficReports: the reporter publishes requests/s over the time
// since its last reading with the handling times, leaves idle models out,
// and writes the document again only when a figure moved by more than
// noise.
func TestTrafficReports(t *testing.T) {
	t.Parallel()
	m := &docMesh{s: mesh.NodeState{Models: []string{"fraud@1", "idle@3"}}}
	counters := map[string]infer.Traffic{}
	r := NewTrafficReporter(m, func(name, ver string) infer.Traffic { return counters[name+"@"+ver] }, nil)
	t0 := time.Now()
	report := func(at time.Duration) []mesh.ModelTraffic {
		t.Helper()
		if err := r.Report(t0.Add(at)); err != nil {
			t.Fatal(err)
		}
		return m.Local().Traffic
	}
	if got := report(0); len(got) != 0 || m.updates != 0 {
		t.Fatalf("nothing served yet: %+v, %d updates", got, m.updates)
	}
	counters["fraud@1"] = infer.Traffic{Served: 200, Inflight: 3, P50: 4 * time.Millisecond, P99: 12500 * time.Microsecond, Recent: 200}
	got := report(2 * time.Second)
	want := []mesh.ModelTraffic{{Model: "fraud@1", RPS: 100, Inflight: 3, P50: 4, P99: 12.5}}
	if len(got) != 1 || !got[0].Equal(want[0]) || m.updates != 1 {
		t.Fatalf("after 200 requests in 2s: %+v (%d updates), want %+v", got, m.updates, want)
	}
	if q := m.Local().Load.QPS; q != 100 {
		t.Errorf("node QPS %v, want 100", q)
	}
	// 210 requests in the next 2s: 105/s, within a quarter of 100.
	counters["fraud@1"] = infer.Traffic{Served: 410, Inflight: 4, P50: 4 * time.Millisecond, P99: 13 * time.Millisecond, Recent: 400}
	if report(4 * time.Second); m.updates != 1 {
		t.Errorf("a 5%% change was published (%d updates)", m.updates)
	}
	// Twice the rate: published.
	counters["fraud@1"] = infer.Traffic{Served: 810, Inflight: 4, P50: 4 * time.Millisecond, P99: 13 * time.Millisecond, Recent: 512}
	if got := report(6 * time.Second); m.updates != 2 || got[0].RPS != 200 {
		t.Errorf("doubled rate: %+v (%d updates)", got, m.updates)
	}
	// Small drift is published once the report is trafficRefresh old.
	counters["fraud@1"] = infer.Traffic{Served: 810 + 210*30, Inflight: 4, P50: 4 * time.Millisecond, P99: 13 * time.Millisecond, Recent: 512}
	if got := report(6*time.Second + trafficRefresh); m.updates != 3 || got[0].RPS != 210 {
		t.Errorf("after %s: %+v (%d updates)", trafficRefresh, got, m.updates)
	}
	// Idle: the model leaves the report.
	counters["fraud@1"] = infer.Traffic{Served: 810 + 210*30}
	if got := report(8*time.Second + trafficRefresh); len(got) != 0 || m.Local().Load.QPS != 0 {
		t.Errorf("idle: %+v, QPS %v", got, m.Local().Load.QPS)
	}
}

// TestTrafficBySite: the report says requests/s by client site, and a
// shift of the load between sites is published though the total stays.
func TestTrafficBySite(t *testing.T) {
	t.Parallel()
	m := &docMesh{s: mesh.NodeState{Models: []string{"fraud@1"}}}
	var counters infer.Traffic
	r := NewTrafficReporter(m, func(string, string) infer.Traffic { return counters }, nil)
	t0 := time.Now()
	report := func(at time.Duration) mesh.ModelTraffic {
		t.Helper()
		if err := r.Report(t0.Add(at)); err != nil {
			t.Fatal(err)
		}
		got := m.Local().Traffic
		if len(got) != 1 {
			t.Fatalf("report %+v, want fraud@1", got)
		}
		return got[0]
	}
	r.Report(t0)
	counters = infer.Traffic{Served: 200, Recent: 200, Sites: map[string]uint64{"edge-a": 150, "edge-b": 40}}
	got := report(2 * time.Second)
	if got.RPS != 100 || len(got.Sites) != 2 || got.Sites["edge-a"] != 75 || got.Sites["edge-b"] != 20 {
		t.Fatalf("after 2s: %+v; want 100 req/s, 75 from edge-a and 20 from edge-b", got)
	}
	// The same total, most of it from edge-b now.
	counters = infer.Traffic{Served: 400, Recent: 400, Sites: map[string]uint64{"edge-a": 160, "edge-b": 220}}
	if got := report(4 * time.Second); m.updates != 2 || got.Sites["edge-a"] != 5 || got.Sites["edge-b"] != 90 {
		t.Errorf("load moved to edge-b: %+v (%d updates); want 5 and 90 published", got, m.updates)
	}
	// At most mesh.MaxTrafficSites sites, the busiest.
	counters.Served += 1000
	counters.Sites = maps.Clone(counters.Sites)
	for i := range 2 * mesh.MaxTrafficSites {
		counters.Sites[fmt.Sprintf("site-%02d", i)] = uint64(i + 1)
	}
	counters.Sites["edge-b"] += 500
	got = report(6 * time.Second)
	if len(got.Sites) != mesh.MaxTrafficSites || got.Sites["edge-b"] != 250 || got.Sites["site-00"] != 0 {
		t.Errorf("%d sites: %v; want the %d busiest, edge-b at 250", len(got.Sites), got.Sites, mesh.MaxTrafficSites)
	}
}

// TestForwardByLoad: with no load reported, requests go to the nearest
// replica and rarely to one across the WAN; a near replica that reports
// a queue sheds most requests to an idle one a little further away.
func TestForwardByLoad(t *testing.T) {
	t.Parallel()
	rtts := map[string]time.Duration{"near": 500 * time.Microsecond, "next": 800 * time.Microsecond, "cloud": 40 * time.Millisecond}
	node := func(name string, tr ...mesh.ModelTraffic) cand {
		n := mesh.Node{Status: mesh.StatusAlive}
		n.Name, n.Models, n.Traffic = name, []string{"fraud@1"}, tr
		return cand{n, rtts[name], true}
	}
	count := func(cs []cand) map[string]int {
		f := NewForwarder(ForwarderConfig{})
		rng := rand.New(rand.NewPCG(1, 2))
		f.draw = rng.Float64
		n := map[string]int{}
		for range 10000 {
			out := f.byLoad(cs, "fraud", "")
			if len(out) != len(cs) {
				t.Fatalf("%d nodes out of %d", len(out), len(cs))
			}
			n[out[0].Name]++
		}
		return n
	}
	idle := count([]cand{node("near"), node("next"), node("cloud")})
	t.Logf("idle: %v", idle)
	if idle["near"] < idle["next"] || idle["cloud"] > 100 {
		t.Errorf("idle replicas: %v; want near first and cloud under 1%%", idle)
	}
	busy := count([]cand{node("near", mesh.ModelTraffic{Model: "fraud@1", RPS: 900, Inflight: 12, P50: 3}), node("next"), node("cloud")})
	t.Logf("near one busy: %v", busy)
	if busy["next"] < 2*busy["near"] || busy["cloud"] > 2000 {
		t.Errorf("near replica with 12 in flight: %v; want most to next", busy)
	}
	// One alive node, or none: nearest-first order as it was.
	if out := count([]cand{node("cloud")}); out["cloud"] != 10000 {
		t.Errorf("one replica: %v", out)
	}
}

// farPeers are peers whose coordinates put each node rtt[name] away.
type farPeers struct {
	peers
	rtt map[string]time.Duration
}

func (p farPeers) RTT(a, b string) (time.Duration, error) { return p.rtt[b], nil }

// TestSameSiteFirstWhenCoordinatesDisagree: a busy host's coordinates can
// put the replica next door further than another site's; a node of this
// agent's own site counts as at most siteRTT away, so it is still first.
func TestSameSiteFirstWhenCoordinatesDisagree(t *testing.T) {
	t.Parallel()
	node := func(name, site string) mesh.Node {
		n := mesh.Node{Status: mesh.StatusAlive}
		n.ID, n.Name, n.Site, n.Addrs.Data = name, name, site, name+":7471"
		if name != "self" {
			n.Models = []string{"fraud@1"}
		}
		return n
	}
	f := NewForwarder(ForwarderConfig{Mesh: farPeers{
		peers: peers{node("self", "edge-a"), node("edge-b-1", "edge-b"), node("edge-a-2", "edge-a")},
		rtt:   map[string]time.Duration{"edge-a-2": 87 * time.Millisecond, "edge-b-1": 30 * time.Millisecond},
	}})
	for range 100 {
		if got := f.byLoad(f.servingNodes("fraud", ""), "fraud", ""); got[0].Name != "edge-a-2" {
			t.Fatalf("first target %s, want edge-a-2 of this agent's site", got[0].Name)
		}
	}
}

// TestForwardWithinTheSLO: a replica beyond the tightest SLO of the
// services that serve the model gets no request while one within it is
// alive, however busy that one is; with no SLO known, load decides.
func TestForwardWithinTheSLO(t *testing.T) {
	t.Parallel()
	busy := mesh.Node{Status: mesh.StatusAlive}
	busy.Name, busy.Models = "near", []string{"fraud@1"}
	busy.Traffic = []mesh.ModelTraffic{{Model: "fraud@1", RPS: 900, Inflight: 12, P50: 3}}
	idle := mesh.Node{Status: mesh.StatusAlive}
	idle.Name, idle.Models = "next", []string{"fraud@1"}
	cs := []cand{{busy, 500 * time.Microsecond, true}, {idle, 12 * time.Millisecond, true}}
	count := func(slo time.Duration) map[string]int {
		f := NewForwarder(ForwarderConfig{SLO: func(model string) time.Duration {
			if model == "fraud" {
				return slo
			}
			return 0
		}})
		rng := rand.New(rand.NewPCG(1, 2))
		f.draw = rng.Float64
		n := map[string]int{}
		for range 1000 {
			n[f.byLoad(cs, "fraud", "")[0].Name]++
		}
		return n
	}
	if got := count(10 * time.Millisecond); got["next"] != 0 {
		t.Errorf("SLO 10ms: %v; want none to next, 12ms away", got)
	}
	if got := count(0); got["next"] < 900 {
		t.Errorf("no SLO: %v; want most to the idle next", got)
	}
	if got := count(100 * time.Microsecond); got["next"] < 900 {
		t.Errorf("SLO no replica meets: %v; want load to decide", got)
	}
}

// TestSLOsFollowPolicies: the index holds each model's tightest SLO over
// the services that serve it, and follows policies as they change, also
// where each read lists them afresh.
func TestSLOsFollowPolicies(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]catalog.Store{"by key": catalogtest.NewStore(), "listed afresh": catalogtest.Relisting{S: catalogtest.NewStore()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			slosFollowPolicies(t, catalog.New(store, nil))
		})
	}
}

// slosFollowPolicies is TestSLOsFollowPolicies over cat.
func slosFollowPolicies(t *testing.T, cat *catalog.Catalog) {
	put := func(name, p99 string) {
		t.Helper()
		src := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: " + name + "}\nspec:\n  model: {name: fraud}\n  latency: {p99: " + p99 + ", clients: [edge-a]}\n"
		if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: name, Source: src, Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSLOs(cat)
	lookup := func() time.Duration {
		s.mu.Lock()
		s.read = time.Time{} // as if a refresh were due
		s.mu.Unlock()
		return s.For("fraud")
	}
	put("a", "20ms")
	put("b", "10ms")
	if got := lookup(); got != 10*time.Millisecond {
		t.Errorf("two services: %s, want the tighter 10ms", got)
	}
	put("b", "40ms")
	if got := lookup(); got != 20*time.Millisecond {
		t.Errorf("b relaxed to 40ms: %s, want 20ms", got)
	}
	if err := cat.Policies.Delete("InferenceService/a"); err != nil {
		t.Fatal(err)
	}
	if got := lookup(); got != 40*time.Millisecond {
		t.Errorf("a deleted: %s, want 40ms", got)
	}
	if got := s.For("other"); got != 0 {
		t.Errorf("a model no service serves: %s", got)
	}
}

// TestClientSite: a request made at this agent's API is from its site; a
// forwarded one is from the site its sender names, believed only where
// the data plane named the sender; a name that is not one counts in no
// site.
func TestClientSite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		peer, site string
		want       string
	}{
		{"made here", "", "", "edge-a"},
		{"made here, naming a site", "", "edge-b", "edge-a"},
		{"forwarded", "b1", "edge-b", "edge-b"},
		{"forwarded by an older agent", "b1", "", ""},
		{"forwarded with a control character", "b1", "edge\x01b", ""},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", nil)
		if c.peer != "" {
			r.Header.Set(dataplane.HeaderPeer, c.peer)
		}
		if c.site != "" {
			r.Header.Set(HeaderClientSite, c.site)
		}
		if got := ClientSite(r, "edge-a"); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
