package sim_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

func TestParseChange(t *testing.T) {
	t.Parallel()
	good := map[string]sim.Change{
		"site edge-b down":                      {Op: "site-down", Target: "edge-b"},
		"node  gpu-1   down":                    {Op: "node-down", Target: "gpu-1"},
		"add 4 nodes like gpu-1 in rack rack-2": {Op: "add-nodes", Target: "gpu-1", Count: 4, Rack: "rack-2"},
		"add 1 node like a in site s in rack r": {Op: "add-nodes", Target: "a", Count: 1, Rack: "r", Site: "s"},
		"policy fraud-scorer latency.p99=10ms":  {Op: "policy", Target: "fraud-scorer", P99: 10 * time.Millisecond},
		"policy InferenceService/x replicas=3":  {Op: "policy", Target: "InferenceService/x", Replicas: 3},
		"policy x latency.p99=5ms replicas=2":   {Op: "policy", Target: "x", P99: 5 * time.Millisecond, Replicas: 2},
	}
	for in, want := range good {
		got, err := sim.ParseChange(in)
		want.Text = strings.Join(strings.Fields(in), " ")
		if err != nil || got != want {
			t.Errorf("ParseChange(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	var b strings.Builder
	for _, in := range []string{
		"site edge-b",
		"add many nodes like gpu-1",
		"add 2 nodes like gpu-1 on rack r",
		"policy x latency.p99=fast",
		"policy x replicas=0",
		"policy x colour=red",
		"policy x p99",
		"reboot everything",
	} {
		if _, err := sim.ParseChange(in); err == nil {
			t.Errorf("ParseChange(%q): no error", in)
		} else {
			b.WriteString(err.Error() + "\n")
		}
	}
	golden(t, "change_errors.golden", b.String())
}

// TestWhatIf plans one service near an edge site: its site going dark
// moves it, a 1µs SLO makes it infeasible, a change elsewhere leaves it.
func TestWhatIf(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 600, Seed: 4, DeadFraction: -1})
	client := topo.EdgeSites()[0]
	req := &placement.Request{
		Kind: placement.Inference, Key: "InferenceService/scorer", Replicas: 1,
		Resources: placement.Resources{CPU: 500, Memory: 1 << 30},
		Latency:   placement.Latency{P99: 20 * time.Millisecond, Clients: []string{client}},
		Tiers:     []string{placement.TierEdge, placement.TierCloud},
	}
	pols := []sim.PolicyRequest{{Key: req.Key, Request: req, Snapshot: topo.Snapshot}}
	d, err := placement.Place(topo.Snapshot, req)
	if err != nil || !d.Feasible {
		t.Fatalf("place: %v\n%s", err, d)
	}
	at := d.Placements[0]
	other := topo.EdgeSites()[len(topo.EdgeSites())-1]
	for _, c := range []struct {
		change, status, why string
	}{
		{"site " + at.Site + " down", "moves", "leaves " + at.Node},
		{"node " + at.Node + " down", "moves", "leaves " + at.Node},
		{"policy scorer replicas=5000", "becomes infeasible", "cloud: "},
		{"policy scorer latency.p99=1us", "", ""},
		{"site " + other + " down", "unchanged", ""},
		{"add 3 nodes like " + at.Node, "", ""},
	} {
		ch, err := sim.ParseChange(c.change)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := sim.WhatIf(topo.Snapshot, pols, []sim.Change{ch})
		if err != nil {
			t.Fatalf("%s: %v", c.change, err)
		}
		if len(rep.Outcomes) != 1 || rep.Policies != 1 {
			t.Fatalf("%s: %+v", c.change, rep)
		}
		o := rep.Outcomes[0]
		if c.status != "" && (o.Status != c.status || !strings.Contains(o.Why, c.why)) {
			t.Errorf("%s: %+v, want %s (%s)", c.change, o, c.status, c.why)
		}
		if o.Status == "moves" && (len(o.After) != 1 || o.After[0] == at.Node) {
			t.Errorf("%s: moved to %v", c.change, o.After)
		}
	}
	// A placed policy stays where it is unless a change takes its node
	// down, even where a plan now would choose another node.
	placedOn := topo.Snapshot.Nodes()[len(topo.Nodes)-1].Name
	placed := []sim.PolicyRequest{{Key: req.Key, Request: req, Snapshot: topo.Snapshot, Placed: []string{placedOn}}}
	for change, status := range map[string]string{"site " + at.Site + " down": "unchanged", "node " + placedOn + " down": "moves"} {
		ch, _ := sim.ParseChange(change)
		rep, err := sim.WhatIf(topo.Snapshot, placed, []sim.Change{ch})
		if err != nil {
			t.Fatal(err)
		}
		if o := rep.Outcomes[0]; o.Status != status || o.Before[0] != placedOn {
			t.Errorf("placed on %s, %s: %+v; want %s", placedOn, change, o, status)
		}
	}
	for _, bad := range []string{"site atlantis down", "node nobody down", "add 1 node like nobody", "policy other latency.p99=1ms"} {
		ch, err := sim.ParseChange(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sim.WhatIf(topo.Snapshot, pols, []sim.Change{ch}); !errors.Is(err, sim.ErrUnknown) {
			t.Errorf("%s: err = %v, want ErrUnknown", bad, err)
		}
	}
}

// estate is a small mesh for the what-if verbs: two edge sites 46 ms
// apart, with an on-prem GPU site between them. Vectors are in seconds
// along one axis.
func estate(t *testing.T) *placement.Snapshot {
	t.Helper()
	node := func(name, site, tier string, x float64, gpus int) placement.Node {
		c := coordinate.NewCoordinate(coordinate.DefaultConfig())
		c.Vec[0], c.Height = x, 50e-6
		n := placement.Node{
			ID: name, Name: name, Site: site, Region: "eu", Tier: tier, Alive: true,
			CPU: 8000, FreeCPU: 8000, Memory: 32 << 30, FreeMemory: 32 << 30, Coord: c,
		}
		for range gpus {
			n.GPUs = append(n.GPUs, placement.GPU{Model: "NVIDIA L4", Memory: 24 << 30, Healthy: true, Free: true})
		}
		return n
	}
	var b placement.Builder
	b.Add(
		node("edge-a-1", "edge-a", placement.TierEdge, 0, 0),
		node("edge-a-2", "edge-a", placement.TierEdge, 0.001, 0),
		node("edge-b-1", "edge-b", placement.TierEdge, 0.046, 0),
		node("gpu-1", "dc", placement.TierOnprem, 0.020, 2),
		node("gpu-2", "dc", placement.TierOnprem, 0.021, 2),
	)
	s, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestApplyKeepsClients checks, for each what-if verb, the RTT from a
// client site to a node after the change: clients never move, and a node
// added in another site than its original's is as close to that site's
// clients as the site's own nodes, not where the original is.
func TestApplyKeepsClients(t *testing.T) {
	t.Parallel()
	s := estate(t)
	rtt := func(s *placement.Snapshot, client, node string) time.Duration {
		t.Helper()
		d, err := s.RTT(client, node)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		change, client, node string
		// near: the node is within 1ms of the client; else its RTT is
		// the same as like's before the change.
		near bool
		like string
		// slack is how far the RTT may differ from like's.
		slack time.Duration
	}{
		{change: "site edge-a down", client: "edge-b", node: "edge-b-1", like: "edge-b-1"},
		{change: "site edge-a down", client: "edge-a", node: "edge-a-1", like: "edge-a-1"},
		{change: "node edge-b-1 down", client: "edge-b", node: "edge-b-1", like: "edge-b-1"},
		{change: "node edge-b-1 down", client: "edge-b", node: "gpu-1", like: "gpu-1"},
		{change: "add 2 nodes like gpu-1 in site edge-b", client: "edge-b", node: "gpu-1-whatif-2", near: true},
		{change: "add 2 nodes like gpu-1 in site edge-b", client: "edge-b", node: "edge-b-1", like: "edge-b-1"},
		{change: "add 2 nodes like gpu-1 in site edge-b", client: "edge-b", node: "edge-a-1", like: "edge-a-1"},
		{change: "add 1 nodes like edge-a-1 in site edge-b", client: "edge-b", node: "edge-b-1", like: "edge-b-1"},
		{change: "add 1 nodes like edge-a-1 in site edge-b", client: "edge-b", node: "edge-a-1-whatif-1", near: true},
		{change: "add 1 nodes like edge-a-1 in site edge-b", client: "edge-a", node: "edge-a-1-whatif-1", like: "edge-b-1", slack: 200 * time.Microsecond},
		{change: "add 3 nodes like gpu-1", client: "edge-b", node: "gpu-1-whatif-3", like: "gpu-1"},
		{change: "add 3 nodes like gpu-1 in rack r9", client: "dc", node: "gpu-2", like: "gpu-2"},
		{change: "add 1 node like gpu-1 in site new-site", client: "edge-a", node: "gpu-1-whatif-1", like: "gpu-1"},
		{change: "policy scorer latency.p99=1ms", client: "edge-b", node: "edge-b-1", like: "edge-b-1"},
	} {
		ch, err := sim.ParseChange(c.change)
		if err != nil {
			t.Fatal(err)
		}
		after, err := sim.Apply(s, []sim.Change{ch})
		if err != nil {
			t.Fatalf("%s: %v", c.change, err)
		}
		got := rtt(after, c.client, c.node)
		if c.near {
			if got > time.Millisecond {
				t.Errorf("%s: RTT %s→%s = %s, want under 1ms", c.change, c.client, c.node, got)
			}
			continue
		}
		if want := rtt(s, c.client, c.like); got < want-c.slack || got > want+c.slack {
			t.Errorf("%s: RTT %s→%s = %s, want %s (as %s before)", c.change, c.client, c.node, got, want, c.like)
		}
	}
	ch, _ := sim.ParseChange("add 1 node like gpu-1 in site edge-b")
	after, err := sim.Apply(s, []sim.Change{ch})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := after.Node("gpu-1-whatif-1"); n.Tier != placement.TierEdge || n.Site != "edge-b" || len(n.GPUs) != 2 {
		t.Errorf("added node: tier %s site %s, %d GPUs; want edge, edge-b, 2", n.Tier, n.Site, len(n.GPUs))
	}
}

// TestWhatIfAddNodesInSite is the report that came in: GPU nodes added
// like gpu-1 in site edge-b make the edge-b service feasible on them, not
// on edge-a's nodes; a node added like edge-a-1 in edge-b leaves edge-b's
// own node within the SLO, so two replicas fit there.
func TestWhatIfAddNodesInSite(t *testing.T) {
	t.Parallel()
	s := estate(t)
	gpu := &placement.Request{
		Kind: placement.Inference, Key: "InferenceService/vision", Replicas: 1,
		Resources: placement.Resources{CPU: 500, Memory: 1 << 30, GPUs: 1},
		Latency:   placement.Latency{P99: 15 * time.Millisecond, Clients: []string{"edge-b"}},
		Tiers:     []string{placement.TierEdge},
	}
	cpu := &placement.Request{
		Kind: placement.Inference, Key: "InferenceService/scorer", Replicas: 1,
		Resources: placement.Resources{CPU: 500, Memory: 1 << 30},
		Latency:   placement.Latency{P99: 15 * time.Millisecond, Clients: []string{"edge-b"}},
		Tiers:     []string{placement.TierEdge},
	}
	two := *cpu
	two.Replicas = 2
	for _, c := range []struct {
		change string
		req    *placement.Request
		placed []string
		status string
		after  []string
	}{
		{"add 2 nodes like gpu-1 in site edge-b", gpu, nil, "becomes feasible", []string{"gpu-1-whatif-"}},
		{"add 1 nodes like edge-a-1 in site edge-b", &two, nil, "becomes feasible", []string{"edge-b-1", "edge-a-1-whatif-1"}},
		{"node edge-b-1 down", cpu, []string{"edge-b-1"}, "becomes infeasible", nil},
	} {
		ch, err := sim.ParseChange(c.change)
		if err != nil {
			t.Fatal(err)
		}
		pols := []sim.PolicyRequest{{Key: c.req.Key, Request: c.req, Snapshot: s, Placed: c.placed}}
		rep, err := sim.WhatIf(s, pols, []sim.Change{ch})
		if err != nil {
			t.Fatalf("%s: %v", c.change, err)
		}
		o := rep.Outcomes[0]
		onto := len(o.After) == len(c.after)
		for _, prefix := range c.after {
			onto = onto && slices.ContainsFunc(o.After, func(n string) bool { return strings.HasPrefix(n, prefix) })
		}
		if o.Status != c.status || !onto {
			t.Errorf("%s: %+v; want %s on %v", c.change, o, c.status, c.after)
		}
	}
}
