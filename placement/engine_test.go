package placement_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

func TestTierFallback(t *testing.T) {
	// e1 and e2 are 2 ms from the shop; only e1 has room. o1 is 8 ms away,
	// c1 40 ms.
	e1 := box("e1", placement.TierEdge, "shop", "west", 4, 8, at(2, 0))
	e2 := box("e2", placement.TierEdge, "shop", "west", 4, 8, at(2, 1))
	e2.FreeCPU = 0
	o1 := box("o1", placement.TierOnprem, "dc", "west", 64, 256, at(8, 0))
	c1 := box("c1", placement.TierCloud, "cloud", "west", 32, 128, at(40, 0))
	for _, tc := range []struct {
		name      string
		replicas  int
		p99       float64 // ms
		wantNodes []string
		wantTiers []string
		fallbacks []string
		feasible  bool
	}{
		{name: "preferred tier holds it", replicas: 1, p99: 20, wantNodes: []string{"e1"}, wantTiers: []string{"edge"}, feasible: true},
		{
			name: "capacity spills to the next tier", replicas: 2, p99: 20,
			wantNodes: []string{"e1", "o1"}, wantTiers: []string{"edge", "onprem"},
			fallbacks: []string{"edge: 2 of 2 nodes meet p99 20ms from site shop, 1 of them feasible; 1 placed here, 1 still needed"},
			feasible:  true,
		},
		{
			name: "cloud only when nothing closer fits", replicas: 3, p99: 50,
			wantNodes: []string{"e1", "o1", "c1"}, wantTiers: []string{"edge", "onprem", "cloud"},
			fallbacks: []string{
				"edge: 2 of 2 nodes meet p99 50ms from site shop, 1 of them feasible; 1 placed here, 2 still needed",
				"onprem: 1 of 1 nodes meet p99 50ms from site shop; 1 placed here, 1 still needed",
			},
			feasible: true,
		},
		{
			name: "SLO rules the cloud out", replicas: 3, p99: 20,
			wantNodes: []string{"e1", "o1"}, wantTiers: []string{"edge", "onprem"},
			fallbacks: []string{
				"edge: 2 of 2 nodes meet p99 20ms from site shop, 1 of them feasible; 1 placed here, 2 still needed",
				"onprem: 1 of 1 nodes meet p99 20ms from site shop; 1 placed here, 1 still needed",
				"cloud: 0 of 1 nodes meet p99 20ms from site shop",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b placement.Builder
			b.Add(e1, e2, o1, c1)
			b.SetClient("shop", at(0, 0))
			s, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := place(t, s, &placement.Request{
				Kind: placement.Inference, Replicas: tc.replicas,
				Resources: placement.Resources{CPU: 1000, Memory: gib},
				Latency:   placement.Latency{P99: durMS(tc.p99), Clients: []string{"shop"}},
				Tiers:     []string{placement.TierEdge, placement.TierOnprem, placement.TierCloud},
			})
			var nodes []string
			for _, p := range d.Placements {
				nodes = append(nodes, p.Node)
			}
			var fbs []string
			for _, f := range d.Fallbacks {
				fbs = append(fbs, f.Message)
			}
			if diff := cmp.Diff(tc.wantNodes, nodes); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTiers, d.Tiers); diff != "" {
				t.Errorf("tiers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.fallbacks, fbs); diff != "" {
				t.Errorf("fallbacks (-want +got):\n%s", diff)
			}
			if d.Feasible != tc.feasible {
				t.Errorf("feasible %v, want %v", d.Feasible, tc.feasible)
			}
		})
	}
}

func durMS(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func TestPerClientSite(t *testing.T) {
	// Two shops 100 ms apart, each with two boxes; a cloud node between.
	s := build(t,
		box("a1", placement.TierEdge, "shop-a", "west", 4, 8, at(0, 0)),
		box("a2", placement.TierEdge, "shop-a", "west", 8, 8, at(0, 1)),
		box("b1", placement.TierEdge, "shop-b", "east", 4, 8, at(100, 0)),
		box("b2", placement.TierEdge, "shop-b", "east", 8, 8, at(100, 1)),
		box("c1", placement.TierCloud, "cloud", "mid", 32, 64, at(50, 0)),
	)
	d := place(t, s, &placement.Request{
		Kind: placement.Inference, PerClientSite: true,
		Resources: placement.Resources{CPU: 1000, Memory: gib},
		Latency:   placement.Latency{P99: 10 * time.Millisecond, Clients: []string{"shop-a", "shop-b"}},
		Tiers:     []string{placement.TierEdge, placement.TierCloud},
	})
	got := map[string]string{}
	for _, p := range d.Placements {
		got[p.Client] = p.Node
	}
	// The 8-core box of each shop has more headroom.
	if diff := cmp.Diff(map[string]string{"shop-a": "a2", "shop-b": "b2"}, got); diff != "" {
		t.Errorf("replica per client site (-want +got):\n%s", diff)
	}
	if !d.Feasible || d.Wanted != 2 {
		t.Errorf("feasible %v wanted %d, want true 2", d.Feasible, d.Wanted)
	}
	// c1 is 50 ms from both shops.
	if r, _ := d.Rejection("c1"); r.Reason != placement.ReasonTierNotReached {
		t.Errorf("c1: %s, want %s", r.Reason, placement.ReasonTierNotReached)
	}
	// a1 is feasible for shop-a but lost to a2; for shop-b it is too far.
	// The furthest it came counts.
	if r, _ := d.Rejection("a1"); r.Reason != placement.ReasonNotSelected || !strings.Contains(r.Detail, "shop-a") {
		t.Errorf("a1: %+v", r)
	}
}

// TestSiteReplicas: a request placed per client site takes each site's
// own count where SiteReplicas names it, Replicas elsewhere; a count for a
// site that is not a client, or one without PerClientSite, is refused.
func TestSiteReplicas(t *testing.T) {
	s := build(t,
		box("a1", placement.TierEdge, "shop-a", "west", 4, 8, at(0, 0)),
		box("a2", placement.TierEdge, "shop-a", "west", 8, 8, at(0, 1)),
		box("a3", placement.TierEdge, "shop-a", "west", 8, 8, at(0, 2)),
		box("b1", placement.TierEdge, "shop-b", "east", 4, 8, at(100, 0)),
		box("b2", placement.TierEdge, "shop-b", "east", 8, 8, at(100, 1)),
	)
	req := func() *placement.Request {
		return &placement.Request{
			Kind: placement.Inference, PerClientSite: true, Replicas: 1,
			SiteReplicas: map[string]int{"shop-a": 3},
			Resources:    placement.Resources{CPU: 1000, Memory: gib},
			Latency:      placement.Latency{P99: 10 * time.Millisecond, Clients: []string{"shop-a", "shop-b"}},
		}
	}
	d := place(t, s, req())
	got := map[string][]string{}
	for _, p := range d.Placements {
		got[p.Client] = append(got[p.Client], p.Node)
	}
	for _, ns := range got {
		slices.Sort(ns)
	}
	if diff := cmp.Diff(map[string][]string{"shop-a": {"a1", "a2", "a3"}, "shop-b": {"b2"}}, got); diff != "" {
		t.Errorf("replicas per client site (-want +got):\n%s", diff)
	}
	if !d.Feasible || d.Wanted != 4 {
		t.Errorf("feasible %v wanted %d, want true 4", d.Feasible, d.Wanted)
	}
	for _, c := range []struct {
		name string
		edit func(*placement.Request)
		want string
	}{
		{"not a client", func(r *placement.Request) { r.SiteReplicas["shop-c"] = 1 }, "siteReplicas[shop-c]: not one of latency.clients"},
		{"not per site", func(r *placement.Request) { r.PerClientSite = false }, "siteReplicas: only with perClientSite"},
		{"none", func(r *placement.Request) { r.SiteReplicas["shop-a"] = 0 }, "siteReplicas[shop-a] 0: must be at least 1"},
	} {
		r := req()
		c.edit(r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestSpreadRegion(t *testing.T) {
	s := build(t,
		box("w1", placement.TierEdge, "w-1", "west", 8, 8, at(0, 0)),
		box("w2", placement.TierEdge, "w-2", "west", 8, 8, at(1, 0)),
		box("e1", placement.TierEdge, "e-1", "east", 4, 8, at(2, 0)),
	)
	d := place(t, s, &placement.Request{
		Kind: placement.Inference, Replicas: 2, Spread: placement.SpreadRegion,
		Resources: placement.Resources{CPU: 1000},
	})
	var nodes []string
	for _, p := range d.Placements {
		nodes = append(nodes, p.Node)
	}
	slices.Sort(nodes)
	if len(nodes) != 2 || nodes[0] != "e1" {
		t.Fatalf("placed %v, want e1 and one of w1, w2", nodes)
	}
	if r, _ := d.Rejection(map[string]string{"w1": "w2", "w2": "w1"}[nodes[1]]); r.Reason != placement.ReasonSpread {
		t.Errorf("other west node: %+v, want %s", r, placement.ReasonSpread)
	}
}

func TestDeterminism(t *testing.T) {
	topo, err := sim.Generate(sim.Options{Nodes: 2000, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 20 {
		req := topo.InferenceRequest(uint64(k))
		a := place(t, topo.Snapshot, req)
		b := place(t, topo.Snapshot, req)
		if diff := cmp.Diff(exported(a), exported(b)); diff != "" {
			t.Fatalf("request %d: same input, different decision (-first +second):\n%s", k, diff)
		}
		if a.String() != b.String() {
			t.Fatalf("request %d: renderings differ", k)
		}
	}
	// Ten identical nodes: only the seed decides, and different seeds must
	// not all pick the same node.
	var nodes []placement.Node
	for k := range 10 {
		nodes = append(nodes, box(fmt.Sprintf("n%d", k), placement.TierEdge, "s", "r", 4, 8, at(0, 0)))
	}
	s := build(t, nodes...)
	picked := map[string]bool{}
	for seed := range uint64(20) {
		r := &placement.Request{Kind: placement.Inference, Resources: placement.Resources{CPU: 1000}, Seed: seed}
		first := place(t, s, r).Placements[0].Node
		if again := place(t, s, r).Placements[0].Node; again != first {
			t.Fatalf("seed %d: %s then %s", seed, first, again)
		}
		picked[first] = true
	}
	if len(picked) < 3 {
		t.Errorf("20 seeds picked only %v among 10 identical nodes", picked)
	}
}

// TestGangAllOrNothing places random gangs on random topologies: a gang is
// either whole — every member distinct, on one fabric, with room — or has
// no member at all.
func TestGangAllOrNothing(t *testing.T) {
	topo, err := sim.Generate(sim.Options{Nodes: 3000, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 1))
	placed, refused := 0, 0
	for k := range 200 {
		req := topo.TrainingRequest(uint64(k), 1+rng.IntN(40), 1+rng.IntN(8))
		d := place(t, topo.Snapshot, req)
		switch {
		case len(d.Placements) == 0:
			refused++
			if d.Feasible || d.Domain != nil {
				t.Fatalf("request %d: empty decision marked feasible", k)
			}
			continue
		case len(d.Placements) != req.Gang.Nodes || !d.Feasible:
			t.Fatalf("request %d: partial gang: %d of %d", k, len(d.Placements), req.Gang.Nodes)
		}
		placed++
		seen := map[string]bool{}
		for _, p := range d.Placements {
			if seen[p.Node] {
				t.Fatalf("request %d: %s twice", k, p.Node)
			}
			seen[p.Node] = true
			if p.Fabric == "" || p.Fabric != d.Placements[0].Fabric || p.Fabric != d.Domain.Fabric {
				t.Fatalf("request %d: members on fabrics %q and %q", k, p.Fabric, d.Placements[0].Fabric)
			}
			if p.Rank != len(seen)-1 {
				t.Fatalf("request %d: rank %d at position %d", k, p.Rank, len(seen)-1)
			}
		}
		// Every member's reservation fits, together.
		after, err := d.Apply()
		if err != nil {
			t.Fatalf("request %d: %v", k, err)
		}
		for _, p := range d.Placements {
			n, _ := after.Node(p.Node)
			before, _ := topo.Snapshot.Node(p.Node)
			if free(n) != free(before)-req.Gang.GPUsPerNode {
				t.Fatalf("request %d: %s has %d free GPUs after, %d before", k, p.Node, free(n), free(before))
			}
		}
	}
	if placed == 0 || refused == 0 {
		t.Errorf("placed %d, refused %d: the test wants both outcomes", placed, refused)
	}
}

func free(n placement.Node) int {
	k := 0
	for _, g := range n.GPUs {
		if g.Free && g.Healthy {
			k++
		}
	}
	return k
}

func TestGangWithoutCommonFabric(t *testing.T) {
	s := gangScenario(t)
	r := gangRequest(4)
	r.Gang.SameFabric = false
	d := place(t, s, r)
	if !d.Feasible || len(d.Placements) != 4 {
		t.Fatalf("want 4 members anywhere in the tier:\n%s", d)
	}
}

func TestApplyThenPlaceAgain(t *testing.T) {
	s := gangScenario(t)
	d := place(t, s, gangRequest(2))
	after, err := d.Apply()
	if err != nil {
		t.Fatal(err)
	}
	// ib-2 is now full; the next gang of 2 goes to ib-1.
	d2 := place(t, after, gangRequest(2))
	if d2.Domain == nil || d2.Domain.Fabric != "ib-1" {
		t.Fatalf("second gang:\n%s", d2)
	}
	// The original snapshot is untouched.
	if again := place(t, s, gangRequest(2)); again.Domain.Fabric != "ib-2" {
		t.Errorf("original snapshot changed:\n%s", again)
	}
}

func TestPlaceErrors(t *testing.T) {
	s := edgeScenario(t)
	for _, tc := range []struct {
		name string
		req  placement.Request
		want error
	}{
		{"bad kind", placement.Request{Kind: "batch"}, placement.ErrInvalidRequest},
		{"bad tier", placement.Request{Kind: placement.Inference, Tiers: []string{"fog"}}, placement.ErrInvalidRequest},
		{"p99 without clients", placement.Request{Kind: placement.Inference, Latency: placement.Latency{P99: time.Millisecond}}, placement.ErrInvalidRequest},
		{"gpu model without gpus", placement.Request{Kind: placement.Inference, Resources: placement.Resources{GPUModel: "H100"}}, placement.ErrInvalidRequest},
		{"data without a name", placement.Request{Kind: placement.Inference, Data: []placement.DataRef{{Bytes: 1}}}, placement.ErrInvalidRequest},
		{"unknown client", placement.Request{Kind: placement.Inference, Latency: placement.Latency{P99: time.Millisecond, Clients: []string{"mars"}}}, placement.ErrUnknownClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := placement.Place(s, &tc.req)
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
	// Validate gathers every problem.
	err := (&placement.Request{Kind: "x", Replicas: -1, Spread: "rack"}).Validate()
	for _, want := range []string{"kind", "replicas", "spread"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v does not mention %s", err, want)
		}
	}
}

func TestRejectionsCoverEveryNode(t *testing.T) {
	topo, err := sim.Generate(sim.Options{Nodes: 1500, Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	d := place(t, topo.Snapshot, topo.InferenceRequest(4))
	rs := d.Rejections()
	if len(rs)+len(d.Placements) != len(topo.Nodes) {
		t.Fatalf("%d rejections + %d placements, want %d nodes", len(rs), len(d.Placements), len(topo.Nodes))
	}
	counts := map[placement.Reason]int{}
	for _, r := range rs {
		counts[r.Reason]++
	}
	if diff := cmp.Diff(d.Rejected, counts); diff != "" {
		t.Errorf("counts disagree with per-node reasons (-Rejected +Rejections):\n%s", diff)
	}
}

// TestIndexPrunes checks that a latency-bound request looks at nodes near
// its clients only: the cost of a decision does not grow with nodes that
// cannot qualify.
func TestIndexPrunes(t *testing.T) {
	topo, err := sim.Generate(sim.Options{Nodes: 10000, Seed: 21})
	if err != nil {
		t.Fatal(err)
	}
	for k := range uint64(10) {
		req := topo.InferenceRequest(k)
		req.Latency.P99 = 5 * time.Millisecond
		d := place(t, topo.Snapshot, req)
		if d.Evaluated > d.Nodes/20 {
			t.Errorf("request %d: evaluated %d of %d nodes, want ≤ 5%%", k, d.Evaluated, d.Nodes)
		}
	}
}

// TestSiteClientsSkipHeights: a site's clients reach its own nodes without
// crossing the nodes' access links, so a one-node WAN-facing site whose
// coordinate has a 12 ms height is 0 ms from its own clients, not 24 ms,
// and meets a 20 ms SLO; from another site the heights count.
func TestSiteClientsSkipHeights(t *testing.T) {
	high := func(x float64) *coordinate.Coordinate {
		c := at(x, 0)
		c.Height = 0.012
		return c
	}
	s := build(t,
		box("a1", placement.TierEdge, "edge-a", "west", 4, 8, high(0)),
		box("b1", placement.TierEdge, "edge-b", "west", 4, 8, high(5)),
	)
	for _, tc := range []struct {
		client, node string
		want         time.Duration
	}{
		{"edge-a", "a1", 0},
		{"edge-b", "b1", 0},
		{"edge-a", "b1", 29 * time.Millisecond},  // 5 ms apart plus both heights
		{"west", "a1", 26500 * time.Microsecond}, // a region: heights count
	} {
		if got, err := s.RTT(tc.client, tc.node); err != nil || got != tc.want {
			t.Errorf("RTT %s → %s = %v, %v; want %v", tc.client, tc.node, got, err, tc.want)
		}
	}
	d := place(t, s, &placement.Request{
		Kind: placement.Inference, PerClientSite: true,
		Resources: placement.Resources{CPU: 1000, Memory: gib},
		Latency:   placement.Latency{P99: 20 * time.Millisecond, Clients: []string{"edge-a", "edge-b"}},
		Tiers:     []string{placement.TierEdge},
	})
	got := map[string]string{}
	for _, p := range d.Placements {
		got[p.Client] = p.Node
	}
	if diff := cmp.Diff(map[string]string{"edge-a": "a1", "edge-b": "b1"}, got); diff != "" || !d.Feasible {
		t.Errorf("feasible %v; replica per site (-want +got):\n%s", d.Feasible, diff)
	}
}
