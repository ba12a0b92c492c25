package controller

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// TestScaleTo: the count each target asks for, within the bounds.
func TestScaleTo(t *testing.T) {
	t.Parallel()
	rps := &policy.Autoscale{Min: 1, Max: 5, Target: policy.AutoscaleTarget{RPS: 50}}
	inflight := &policy.Autoscale{Min: 2, Max: 5, Target: policy.AutoscaleTarget{Inflight: 4}}
	p99 := &policy.Autoscale{Min: 1, Max: 3, Target: policy.AutoscaleTarget{P99: policy.Duration(20 * time.Millisecond)}}
	for _, tc := range []struct {
		name  string
		a     *policy.Autoscale
		cur   int
		loads []replicaLoad
		want  int
	}{
		{"idle", rps, 3, []replicaLoad{{}, {}, {}}, 1},
		{"120 req/s", rps, 1, []replicaLoad{{rps: 120}}, 3},
		{"exactly 100 req/s", rps, 1, []replicaLoad{{rps: 60}, {rps: 40}}, 2},
		{"over the max", rps, 2, []replicaLoad{{rps: 500}, {rps: 500}}, 5},
		{"in flight", inflight, 2, []replicaLoad{{inflight: 9}, {inflight: 8}}, 5},
		{"in flight under min", inflight, 3, []replicaLoad{{inflight: 1}, {}, {}}, 2},
		{"slow", p99, 1, []replicaLoad{{p99: 35}}, 2},
		{"within", p99, 2, []replicaLoad{{p99: 12}, {p99: 15}}, 2},
		{"fast", p99, 2, []replicaLoad{{p99: 4}, {p99: 9}}, 1},
		{"slow at the max", p99, 3, []replicaLoad{{p99: 40}, {}, {}}, 3},
	} {
		if got, why := scaleTo(tc.a, tc.cur, tc.loads); got != tc.want {
			t.Errorf("%s: %d (%s), want %d", tc.name, got, why, tc.want)
		}
	}
}

// scaledSource is an autoscaled service: 1 to 3 replicas of 50 req/s.
const scaledSource = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: web}
spec:
  model: {name: m, version: "1"}
  resources: {cpu: 100m, memory: 16Mi}
  autoscale: {max: 3, target: {rps: 50}, scaleDownAfter: 1m}
`

// TestAutoscaleFollowsLoad: an autoscaled service starts at min; the
// load its replica reports adds replicas at once, keeping the one that
// serves; a lower load removes them only after scaleDownAfter, and the
// record says each change and why.
func TestAutoscaleFollowsLoad(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("w1", 8000), gpuNode("w2", 8000), gpuNode("w3", 8000), gpuNode("w4", 8000)}}
	for i := 1; i < len(m.nodes); i++ {
		m.nodes[i].Controller = false // w1 owns it
	}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile})
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: scaledSource, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	// serve admits the placement on its nodes, which serve m@1 with the
	// traffic given per node, and runs a pass.
	serve := func(rps map[string]float64) catalog.Placement {
		t.Helper()
		rec := c.placements()[key]
		for i := range m.nodes {
			n := &m.nodes[i]
			n.Assignments, n.Replicas, n.Traffic = nil, nil, nil
			if !slices.Contains(names(rec.Nodes), n.Name) {
				continue
			}
			n.Assignments = []mesh.Assignment{{Key: key, Epoch: rec.Epoch, Accepted: true}}
			n.Replicas = []mesh.Replica{{Policy: key, Model: "m@1", State: mesh.ReplicaServing}}
			if r := rps[n.Name]; r > 0 {
				n.Traffic = []mesh.ModelTraffic{{Model: "m@1", RPS: r, P50: 2, P99: 5}}
			}
		}
		c.reconcile()
		return c.placements()[key]
	}
	// settled moves the last scaling back by scaleSettle, as if it passed.
	settled := func() {
		t.Helper()
		rec := c.placements()[key]
		rec.Scale.At = rec.Scale.At.Add(-scaleSettle)
		if _, err := cat.Placements.Put(rec); err != nil {
			t.Fatal(err)
		}
	}

	c.reconcile()
	rec := serve(nil)
	if rec.State != catalog.StatePlaced || len(rec.Nodes) != 1 || rec.Wanted != 1 || rec.Scale != nil {
		t.Fatalf("first placement: %s %q on %v (wanted %d, scale %+v); want placed on 1", rec.State, rec.Message, names(rec.Nodes), rec.Wanted, rec.Scale)
	}
	first := rec.Nodes[0].Name
	rec = serve(map[string]float64{first: 120})
	if rec.Wanted != 3 || len(rec.Nodes) != 3 || rec.Scale == nil || rec.Scale.Replicas != 3 || rec.Scale.From != 1 {
		t.Fatalf("at 120 req/s: wanted %d on %v, scale %+v; want 3", rec.Wanted, names(rec.Nodes), rec.Scale)
	}
	if !slices.Contains(names(rec.Nodes), first) {
		t.Errorf("scaling up moved the serving replica off %s: %v", first, names(rec.Nodes))
	}
	t.Logf("scaled up: %s", rec.Message)
	epoch := rec.Epoch
	settled() // so that only the load keeps it as it is
	rec = serve(map[string]float64{first: 40, rec.Nodes[1].Name: 40, rec.Nodes[2].Name: 40})
	if rec.Wanted != 3 || rec.Epoch != epoch || rec.State != catalog.StatePlaced {
		t.Errorf("3 replicas at 120 req/s: wanted %d, epoch %d → %d, %s; want it left alone", rec.Wanted, epoch, rec.Epoch, rec.State)
	}
	// The load falls to 60 req/s: 2 replicas, once it has asked for
	// fewer for scaleDownAfter.
	settled()
	ns := names(rec.Nodes)
	low := map[string]float64{ns[0]: 20, ns[1]: 20, ns[2]: 20}
	if rec = serve(low); rec.Wanted != 3 || rec.Epoch != epoch {
		t.Fatalf("at once after the load fell: wanted %d, epoch %d; want 3 still", rec.Wanted, rec.Epoch)
	}
	byName := map[string]mesh.Node{}
	for _, n := range m.nodes {
		byName[n.Name] = n
	}
	a := c.facts(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: scaledSource, Generation: 1}).autoscale
	if _, _, ok := c.autoscale(a, rec, nil, byName, time.Now().Add(30*time.Second)); ok {
		t.Errorf("scaled down after 30s of a 1m scaleDownAfter")
	}
	scaled, why, ok := c.autoscale(a, rec, nil, byName, time.Now().Add(61*time.Second))
	if !ok || scaled.Scale.Replicas != 2 || scaled.Scale.From != 3 {
		t.Fatalf("after scaleDownAfter: %v %+v; want 3 → 2", ok, scaled.Scale)
	}
	want := "autoscaled 3 → 2: 60 req/s over 3 replica(s), target 50 a replica, for 1m0s"
	if why != want {
		t.Errorf("why:\n got %s\nwant %s", why, want)
	}
	c.place(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: scaledSource, Generation: 1}, scaled, true,
		&round{c: c, nodes: m.nodes, byName: byName}, nil, why)
	rec = c.placements()[key]
	if rec.Wanted != 2 || len(rec.Nodes) != 2 || !slices.Contains(names(rec.Nodes), first) {
		t.Errorf("scaled down: wanted %d on %v; want 2, %s among them", rec.Wanted, names(rec.Nodes), first)
	}
	t.Logf("scaled down: %s", rec.Message)
	// While a replica loads, nothing scales.
	rec.Nodes[1].Replica = mesh.ReplicaLoading
	if _, _, ok := c.autoscale(a, rec, nil, byName, time.Now().Add(time.Hour)); ok {
		t.Error("scaled while a replica was loading")
	}
}

// prestageSource is a two-replica service that prestages its model.
const prestageSource = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: web}
spec:
  model: {name: m, version: "1"}
  replicas: 2
  prestage: true
  resources: {cpu: 100m, memory: 16Mi}
`

// TestPrestageStandbys: each replica of a service that prestages names a
// standby that is not one of its replicas; when a replica's node fails,
// the replacement is the standby that holds the model, even where another
// node has since become the roomier choice.
func TestPrestageStandbys(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("w1", 8000), gpuNode("w2", 8000), gpuNode("w3", 8000), gpuNode("w4", 8000), gpuNode("w5", 8000)}}
	for i := 1; i < len(m.nodes); i++ {
		m.nodes[i].Controller = false
	}
	model := storage.Manifest{Name: "m", Version: "1", Digest: "sha256:" + strings.Repeat("ab", 32), Size: 200 << 20}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile, Artifacts: fakeArtifacts{"m@1": model}})
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: prestageSource, Generation: 1}
	if _, err := cat.Policies.Put(p); err != nil {
		t.Fatal(err)
	}
	c.reconcile()
	rec := c.placements()[key]
	if len(rec.Nodes) != 2 {
		t.Fatalf("placed on %v, want 2 nodes", names(rec.Nodes))
	}
	replicas := names(rec.Nodes)
	standby := map[string]string{}
	for _, pn := range rec.Nodes {
		if pn.Standby == "" || slices.Contains(replicas, pn.Standby) {
			t.Fatalf("replica on %s has standby %q; want a node that is not a replica (replicas %v)", pn.Name, pn.Standby, replicas)
		}
		standby[pn.Name] = pn.Standby
	}
	// The standbys pull the model; the first replica's node fails; a node
	// that is neither has more room now.
	failed := replicas[0]
	for i := range m.nodes {
		n := &m.nodes[i]
		switch {
		case slices.Contains(replicas, n.Name):
			n.Assignments = []mesh.Assignment{{Key: key, Epoch: rec.Epoch, Accepted: true, CPU: 100, Memory: 16 << 20}}
			n.Load.FreeCPU -= 100
		case n.Name == standby[failed]:
			n.Locality.Artifacts = []string{model.Digest}
			n.Load.FreeCPU = 1000 // busier than the rest
		}
		if n.Name == failed {
			n.Status = mesh.StatusFailed
		}
	}
	c.tries, c.lastTry = map[string]int{}, map[string]time.Time{}
	c.reconcile()
	rec = c.placements()[key]
	got := names(rec.Nodes)
	if !slices.Contains(got, standby[failed]) || slices.Contains(got, failed) {
		t.Errorf("after %s failed: placed on %v; want its standby %s, which holds the model", failed, got, standby[failed])
	}
}

// burstSource asks 3 replicas within 15ms of edge-a on the edge, and lets
// what the edge cannot hold overflow to on-prem within 35ms.
const burstSource = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: web}
spec:
  model: {name: m, version: "1"}
  replicas: 3
  resources: {cpu: 600m, memory: 16Mi}
  latency: {p99: 15ms, clients: [edge-a]}
  tiers: [edge]
  burst: {tiers: [onprem, cloud], maxExtraLatency: 20ms, scaleDownAfter: 1m}
`

// TestBurstOverflowsAndComesBack: what the edge cannot hold goes to the
// nearest burst tier within the relaxed SLO, marked as burst, and not
// further; once the edge has held room for scaleDownAfter, the burst
// replica comes back to the edge.
func TestBurstOverflowsAndComesBack(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	at := func(n mesh.Node, tier, site string, ms float64) mesh.Node {
		n.Tier, n.Site, n.Region = tier, site, "eu"
		n.Coord = &coordinate.Coordinate{Vec: []float64{ms / 1e3 / 2, 0}}
		return n
	}
	m := &fakeMesh{nodes: []mesh.Node{
		at(gpuNode("dc-1", 8000), "onprem", "dc", 25), // 25ms from edge-a's nodes
		at(gpuNode("e1", 1000), "edge", "edge-a", 0), at(gpuNode("e2", 1000), "edge", "edge-a", 0.5),
		at(gpuNode("cloud-1", 64000), "cloud", "cloud", 80),
	}}
	for i := 1; i < len(m.nodes); i++ {
		m.nodes[i].Controller = false
	}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile})
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: burstSource, Generation: 1}
	if _, err := cat.Policies.Put(p); err != nil {
		t.Fatal(err)
	}
	c.reconcile()
	rec := c.placements()[key]
	var burst, regular []string
	for _, pn := range rec.Nodes {
		if pn.Burst {
			burst = append(burst, pn.Name)
		} else {
			regular = append(regular, pn.Name)
		}
	}
	slices.Sort(regular)
	if len(rec.Nodes) != 3 || !slices.Equal(regular, []string{"e1", "e2"}) || !slices.Equal(burst, []string{"dc-1"}) {
		t.Fatalf("placed %v (burst %v), %q; want e1 and e2, and dc-1 as burst", names(rec.Nodes), burst, rec.Message)
	}
	t.Logf("overflow: %s", rec.Message)
	// Admitted and serving; then the edge gets a third node with room.
	for i := range m.nodes {
		n := &m.nodes[i]
		if slices.Contains(names(rec.Nodes), n.Name) {
			n.Assignments = []mesh.Assignment{{Key: key, Epoch: rec.Epoch, Accepted: true, CPU: 600}}
			n.Load.FreeCPU -= 600
			n.Replicas = []mesh.Replica{{Policy: key, Model: "m@1", State: mesh.ReplicaServing}}
		}
	}
	c.reconcile()
	rec = c.placements()[key]
	if rec.State != catalog.StatePlaced {
		t.Fatalf("state %s %q; want placed", rec.State, rec.Message)
	}
	m.nodes = append(m.nodes, at(gpuNode("e3", 1000), "edge", "edge-a", 0.3))
	m.nodes[len(m.nodes)-1].Controller = false
	byName := map[string]mesh.Node{}
	for _, n := range m.nodes {
		byName[n.Name] = n
	}
	view := &round{c: c, nodes: m.nodes, byName: byName}
	b := c.facts(p).burst
	now := time.Now()
	for _, after := range []time.Duration{0, 30 * time.Second} {
		if why, ok := c.burstBack(p, b, rec, view, now.Add(after)); ok {
			t.Fatalf("came back %s after the edge had room (%s); want after 1m", after, why)
		}
	}
	why, ok := c.burstBack(p, b, rec, view, now.Add(61*time.Second))
	if !ok {
		t.Fatal("the burst replica did not come back after the edge had room for 1m")
	}
	c.returning[key] = true
	c.place(p, rec, true, view, nil, why)
	rec = c.placements()[key]
	got := names(rec.Nodes)
	slices.Sort(got)
	if !slices.Equal(got, []string{"e1", "e2", "e3"}) || slices.ContainsFunc(rec.Nodes, func(pn catalog.PlacedNode) bool { return pn.Burst }) {
		t.Errorf("after coming back: %v, %q; want e1, e2, e3 and no burst", got, rec.Message)
	}
	t.Logf("came back: %s", rec.Message)
}

// siteScaledSource is served per client site, each site's replicas
// autoscaled 1 to 3 at 50 req/s; a replica takes a node.
const siteScaledSource = `apiVersion: strata/v1
kind: InferenceService
metadata: {name: web}
spec:
  model: {name: m, version: "1"}
  perClientSite: true
  resources: {cpu: 600m, memory: 16Mi}
  latency: {p99: 15ms, clients: [edge-a, edge-b]}
  autoscale: {max: 3, target: {rps: 50}, scaleDownAfter: 1m}
`

// TestAutoscaleBySite: a service placed per client site scales each
// site's replicas by the load that comes from that site, whichever
// replica answered it: edge-b's clients, half of them answered by
// edge-a's replica, get two more replicas in edge-b, and edge-a keeps
// its one. The load falling away from edge-b takes them back after
// scaleDownAfter.
func TestAutoscaleBySite(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	at := func(name, site string, ms float64) mesh.Node {
		n := gpuNode(name, 1000)
		n.Tier, n.Site, n.Region, n.Controller = "edge", site, "eu", name == "a1"
		n.Coord = &coordinate.Coordinate{Vec: []float64{ms / 1e3, 0}}
		return n
	}
	base := []mesh.Node{at("a1", "edge-a", 0), at("a2", "edge-a", 0.5), at("a3", "edge-a", 1),
		at("b1", "edge-b", 100), at("b2", "edge-b", 100.5), at("b3", "edge-b", 101)}
	m := &fakeMesh{nodes: slices.Clone(base)}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile})
	p := catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: siteScaledSource, Generation: 1}
	if _, err := cat.Policies.Put(p); err != nil {
		t.Fatal(err)
	}
	// serve admits the placement on its nodes, which serve m@1 with the
	// traffic given per node, and runs a pass.
	serve := func(traffic map[string]mesh.ModelTraffic) catalog.Placement {
		t.Helper()
		rec := c.placements()[key]
		m.nodes = slices.Clone(base)
		for i := range m.nodes {
			n := &m.nodes[i]
			if !slices.Contains(names(rec.Nodes), n.Name) {
				continue
			}
			n.Assignments = []mesh.Assignment{{Key: key, Epoch: rec.Epoch, Accepted: true, CPU: 600}}
			n.Load.FreeCPU -= 600
			n.Replicas = []mesh.Replica{{Policy: key, Model: "m@1", State: mesh.ReplicaServing}}
			if tr, ok := traffic[n.Name]; ok {
				tr.Model = "m@1"
				n.Traffic = []mesh.ModelTraffic{tr}
			}
		}
		c.reconcile()
		return c.placements()[key]
	}
	// bySite counts the replicas placed for each client site, and checks
	// each is in its client's site.
	bySite := func(rec catalog.Placement) map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, pn := range rec.Nodes {
			if pn.Site != pn.Client {
				t.Errorf("%s, in %s, serves %s's clients", pn.Name, pn.Site, pn.Client)
			}
			out[pn.Client]++
		}
		return out
	}
	c.reconcile()
	rec := serve(nil)
	if got := bySite(rec); rec.State != catalog.StatePlaced || got["edge-a"] != 1 || got["edge-b"] != 1 {
		t.Fatalf("first placement: %s %q, %v; want one replica a site", rec.State, rec.Message, got)
	}
	var onA, onB string
	for _, pn := range rec.Nodes {
		if pn.Client == "edge-a" {
			onA = pn.Name
		} else {
			onB = pn.Name
		}
	}
	// edge-b sends 130 req/s: 70 answered by its own replica, 60 by
	// edge-a's (forwarded there while edge-b's was busy). edge-a sends
	// 20.
	rec = serve(map[string]mesh.ModelTraffic{
		onA: {RPS: 80, Sites: map[string]float64{"edge-a": 20, "edge-b": 60}},
		onB: {RPS: 70, Sites: map[string]float64{"edge-b": 70}},
	})
	got := bySite(rec)
	if rec.Scale == nil || rec.Scale.Replicas != 4 || rec.Scale.From != 2 || got["edge-a"] != 1 || got["edge-b"] != 3 {
		t.Fatalf("edge-b at 130 req/s: %v, scale %+v, %q; want edge-a 1, edge-b 3", got, rec.Scale, rec.Message)
	}
	if !slices.Contains(names(rec.Nodes), onA) || !slices.Contains(names(rec.Nodes), onB) {
		t.Errorf("scaling up moved a serving replica: %v, had %s and %s", names(rec.Nodes), onA, onB)
	}
	want := "edge-b 1 → 3: from edge-b, 130 req/s over 2 replica(s), target 50 a replica"
	if rec.Scale.Reason != want || !maps.Equal(rec.Scale.Sites, map[string]int{"edge-a": 1, "edge-b": 3}) {
		t.Errorf("scale: %q, %v\nwant %q, edge-a 1 and edge-b 3", rec.Scale.Reason, rec.Scale.Sites, want)
	}
	t.Logf("scaled up: %s", rec.Message)
	// The load from edge-b falls to 10 req/s: after scaleDownAfter,
	// edge-b is back to 1, and edge-a is left as it is.
	traffic := map[string]mesh.ModelTraffic{onA: {RPS: 20, Sites: map[string]float64{"edge-a": 20}}}
	for _, pn := range rec.Nodes {
		if pn.Client == "edge-b" {
			traffic[pn.Name] = mesh.ModelTraffic{RPS: 3.3, Sites: map[string]float64{"edge-b": 3.3}}
		}
	}
	rec.Scale.At = rec.Scale.At.Add(-scaleSettle)
	if _, err := cat.Placements.Put(rec); err != nil {
		t.Fatal(err)
	}
	if rec = serve(traffic); rec.Scale.Replicas != 4 {
		t.Fatalf("at once after the load fell: %+v; want 4 still", rec.Scale)
	}
	byName := map[string]mesh.Node{}
	for _, n := range m.nodes {
		byName[n.Name] = n
	}
	a := c.facts(p).autoscale
	clients := []string{"edge-a", "edge-b"}
	if _, _, ok := c.autoscale(a, rec, clients, byName, time.Now().Add(30*time.Second)); ok {
		t.Errorf("scaled down after 30s of a 1m scaleDownAfter")
	}
	scaled, why, ok := c.autoscale(a, rec, clients, byName, time.Now().Add(61*time.Second))
	if !ok || !maps.Equal(scaled.Scale.Sites, map[string]int{"edge-a": 1, "edge-b": 1}) {
		t.Fatalf("after scaleDownAfter: %v %+v; want edge-b 3 → 1", ok, scaled.Scale)
	}
	c.place(p, scaled, true, &round{c: c, nodes: m.nodes, byName: byName}, nil, why)
	rec = c.placements()[key]
	if got := bySite(rec); got["edge-a"] != 1 || got["edge-b"] != 1 || !slices.Contains(names(rec.Nodes), onA) {
		t.Errorf("scaled down: %v on %v; want one a site, %s kept", got, names(rec.Nodes), onA)
	}
	t.Logf("scaled down: %s", rec.Message)
}

// TestDeletedPolicyForgotten: what the controller keeps per policy (its
// retries, the autoscaler's wait per client site, the burst's) goes with
// the policy.
func TestDeletedPolicyForgotten(t *testing.T) {
	t.Parallel()
	const key = "InferenceService/web"
	cat := catalog.New(catalogtest.NewStore(), nil)
	m := &fakeMesh{nodes: []mesh.Node{gpuNode("w1", 8000)}}
	c := New(Config{Mesh: m, Catalog: cat, Compile: meshview.Compile})
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "web", Source: scaledSource, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	c.reconcile()
	c.scaleLow[key+"\x00edge-a"] = scaleLow{since: time.Now()}
	c.roomSince[key] = time.Now()
	c.policies()
	if _, ok := c.lastTry[key]; !ok || len(c.scaleLow) != 1 || len(c.roomSince) != 1 {
		t.Fatalf("while the policy exists: lastTry %v, scaleLow %v, roomSince %v; want each kept", c.lastTry, c.scaleLow, c.roomSince)
	}
	if err := cat.Policies.Delete(key); err != nil {
		t.Fatal(err)
	}
	c.policies()
	if len(c.lastTry) != 0 || len(c.scaleLow) != 0 || len(c.roomSince) != 0 {
		t.Errorf("after the delete: lastTry %v, scaleLow %v, roomSince %v; want none", c.lastTry, c.scaleLow, c.roomSince)
	}
}
