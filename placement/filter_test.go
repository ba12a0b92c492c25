package placement_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// oneNode is the node the filter table varies: a 4-core, 8 GiB edge box
// with one free T4, 5 ms from the client site "shop".
func oneNode() placement.Node {
	n := box("x", placement.TierEdge, "s1", "west", 4, 8, at(5, 0))
	n.GPUs = []placement.GPU{{Model: "Tesla T4", Memory: 16 * gib, Healthy: true, Free: true}}
	n.Labels["disk"] = "ssd"
	return n
}

func oneRequest() *placement.Request {
	return &placement.Request{
		Kind:      placement.Inference,
		Resources: placement.Resources{CPU: 1000, Memory: 2 * gib},
		Latency:   placement.Latency{P99: 20e6, Clients: []string{"shop"}},
		Tiers:     []string{placement.TierEdge},
	}
}

func TestFilters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  func(n *placement.Node)
		req   func(r *placement.Request)
		extra []placement.Node // more nodes in the snapshot
		want  placement.Reason // "" means x is chosen
	}{
		{name: "fits", want: ""},
		{name: "not alive", node: func(n *placement.Node) { n.Alive = false }, want: placement.ReasonNotAlive},
		{name: "excluded by id", req: func(r *placement.Request) { r.Exclude = []string{"id-x"} }, want: placement.ReasonExcluded},
		{name: "excluded by name", req: func(r *placement.Request) { r.Exclude = []string{"x"} }, want: placement.ReasonExcluded},
		{name: "dead beats excluded", node: func(n *placement.Node) { n.Alive = false }, req: func(r *placement.Request) { r.Exclude = []string{"x"} }, want: placement.ReasonNotAlive},
		{name: "tier not allowed", node: func(n *placement.Node) { n.Tier = placement.TierCloud }, want: placement.ReasonTier},
		{
			name: "tier not reached",
			node: func(n *placement.Node) { n.Tier = placement.TierCloud },
			req: func(r *placement.Request) {
				r.Tiers = []string{placement.TierEdge, placement.TierCloud}
			},
			extra: []placement.Node{box("y", placement.TierEdge, "s1", "west", 4, 8, at(5, 0))},
			want:  placement.ReasonTierNotReached,
		},
		{name: "no gpu", node: func(n *placement.Node) { n.GPUs = nil }, req: func(r *placement.Request) { r.Resources.GPUs = 1 }, want: placement.ReasonNoGPU},
		{name: "gpu model", req: func(r *placement.Request) { r.Resources.GPUs, r.Resources.GPUModel = 1, "H100" }, want: placement.ReasonGPUModel},
		{name: "gpu model matches as substring", req: func(r *placement.Request) { r.Resources.GPUs, r.Resources.GPUModel = 1, "t4" }, want: ""},
		{
			name: "no fabric",
			req: func(r *placement.Request) {
				r.Kind, r.Latency = placement.Training, placement.Latency{}
				r.Gang = placement.Gang{Nodes: 1, SameFabric: true}
			},
			want: placement.ReasonNoFabric,
		},
		{name: "too far", node: func(n *placement.Node) { n.Coord = at(25, 0) }, want: placement.ReasonLatencySLO},
		{name: "exactly at the SLO", node: func(n *placement.Node) { n.Coord = at(20, 0) }, want: ""},
		{name: "no coordinate", node: func(n *placement.Node) { n.Coord = nil }, want: placement.ReasonLatencySLO},
		{name: "cpu", node: func(n *placement.Node) { n.FreeCPU = 999 }, want: placement.ReasonInsufficientCPU},
		{name: "memory", node: func(n *placement.Node) { n.FreeMemory = gib }, want: placement.ReasonInsufficientMemory},
		{name: "cpu before memory", node: func(n *placement.Node) { n.FreeCPU, n.FreeMemory = 0, 0 }, want: placement.ReasonInsufficientCPU},
		{name: "gpu busy", node: func(n *placement.Node) { n.GPUs[0].Free = false }, req: func(r *placement.Request) { r.Resources.GPUs = 1 }, want: placement.ReasonInsufficientGPU},
		{name: "gpu unhealthy", node: func(n *placement.Node) { n.GPUs[0].Healthy = false }, req: func(r *placement.Request) { r.Resources.GPUs = 1 }, want: placement.ReasonInsufficientGPU},
		{name: "gpu memory", req: func(r *placement.Request) { r.Resources.GPUs, r.Resources.GPUMemory = 1, 24*gib }, want: placement.ReasonInsufficientGPU},
		{name: "two gpus wanted", req: func(r *placement.Request) { r.Resources.GPUs = 2 }, want: placement.ReasonInsufficientGPU},
		{name: "constraint true", req: func(r *placement.Request) { r.Constraints = []placement.Constraint{labelIs("disk", "ssd")} }, want: ""},
		{name: "constraint false", req: func(r *placement.Request) { r.Constraints = []placement.Constraint{labelIs("disk", "hdd")} }, want: placement.ReasonConstraint},
		{name: "constraint error", req: func(r *placement.Request) { r.Constraints = []placement.Constraint{labelIs("zone", "a")} }, want: placement.ReasonConstraint},
		{
			name: "constraint sees free resources and rtt",
			req: func(r *placement.Request) {
				r.Constraints = []placement.Constraint{matchFunc{expr: "rtt", f: func(n *policy.Node) (bool, error) {
					return n.FreeCPU == 4000 && n.RTT["shop"] == 5 && n.GPUs[0].Free, nil
				}}}
			},
			want: "",
		},
		{name: "latency filter is cheaper than cpu", node: func(n *placement.Node) { n.Coord, n.FreeCPU = at(50, 0), 0 }, want: placement.ReasonLatencySLO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := oneNode()
			if tc.node != nil {
				tc.node(&n)
			}
			r := oneRequest()
			if tc.req != nil {
				tc.req(r)
			}
			var b placement.Builder
			b.Add(append([]placement.Node{n}, tc.extra...)...)
			b.SetClient("shop", at(0, 0))
			s, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := place(t, s, r)
			got, rejected := d.Rejection("x")
			if tc.want == "" {
				if rejected {
					t.Fatalf("x rejected: %s: %s", got.Reason, got.Detail)
				}
				if len(d.Placements) == 0 || d.Placements[0].Node != "x" {
					t.Fatalf("x not placed:\n%s", d)
				}
				return
			}
			if !rejected {
				t.Fatalf("x chosen, want %s", tc.want)
			}
			if got.Reason != tc.want {
				t.Errorf("reason %s (%s), want %s", got.Reason, got.Detail, tc.want)
			}
			if got.Detail == "" {
				t.Errorf("empty detail for %s", got.Reason)
			}
			if d.Rejected[tc.want] < 1 {
				t.Errorf("Rejected[%s] = %d, want ≥ 1", tc.want, d.Rejected[tc.want])
			}
		})
	}
}

func TestScorers(t *testing.T) {
	holder := box("h", placement.TierEdge, "s1", "west", 4, 8, at(5, 0))
	holder.FreeCPU = 0 // holds the data but cannot run the replica
	holder.Artifacts = []string{"sha256:m"}
	for _, tc := range []struct {
		name string
		node func(n *placement.Node)
		req  func(r *placement.Request)
		want []placement.Score // Detail ignored
	}{
		{
			// 5 ms of a 20 ms budget; 3 of 4 cores and 6 of 8 GiB left.
			name: "latency and headroom",
			want: []placement.Score{{Name: "latency", Value: 0.75, Weight: 2}, {Name: "headroom", Value: 0.75, Weight: 1}},
		},
		{
			name: "latency without an SLO",
			req:  func(r *placement.Request) { r.Latency.P99 = 0 },
			want: []placement.Score{{Name: "latency", Value: 0.667, Weight: 2}, {Name: "headroom", Value: 0.75, Weight: 1}},
		},
		{
			name: "headroom counts GPUs when asked for",
			req:  func(r *placement.Request) { r.Resources.GPUs = 1 },
			want: []placement.Score{{Name: "latency", Value: 0.75, Weight: 2}, {Name: "headroom", Value: 0.5, Weight: 1}},
		},
		{
			name: "data held by the node",
			node: func(n *placement.Node) { n.Artifacts = []string{"sha256:m"} },
			req: func(r *placement.Request) {
				r.Latency = placement.Latency{}
				r.Data = []placement.DataRef{{Digest: "sha256:m", Bytes: 6e9}}
			},
			want: []placement.Score{{Name: "headroom", Value: 0.75, Weight: 1}, {Name: "data", Value: 1, Weight: 2}},
		},
		{
			// 6 GB from a holder in the same site at 1.25 GB/s: 4.8 s,
			// 60 / (60 + 4.8).
			name: "data from the same site",
			req: func(r *placement.Request) {
				r.Latency = placement.Latency{}
				r.Data = []placement.DataRef{{Digest: "sha256:m", Bytes: 6e9}}
			},
			want: []placement.Score{{Name: "headroom", Value: 0.75, Weight: 1}, {Name: "data", Value: 0.926, Weight: 2}},
		},
		{
			// Nobody holds it: 6 GB at 25 MB/s, 240 s: 60 / 300.
			name: "data from outside",
			req: func(r *placement.Request) {
				r.Latency = placement.Latency{}
				r.Data = []placement.DataRef{{Digest: "sha256:other", Bytes: 6e9}}
			},
			want: []placement.Score{{Name: "headroom", Value: 0.75, Weight: 1}, {Name: "data", Value: 0.2, Weight: 2}},
		},
		{
			name: "affinities are clamped and errors score zero",
			req: func(r *placement.Request) {
				r.Latency = placement.Latency{}
				r.Affinities = []placement.Affinity{
					{Weight: 3, Expr: scoreFunc{expr: "big", f: func(*policy.Node) (float64, error) { return 7, nil }}},
					{Weight: 1, Expr: scoreFunc{expr: "bad", f: func(*policy.Node) (float64, error) { return 1, errors.New("no such key") }}},
					{Weight: 0.5, Expr: scoreFunc{expr: "half", f: func(*policy.Node) (float64, error) { return 0.5, nil }}},
				}
			},
			want: []placement.Score{
				{Name: "headroom", Value: 0.75, Weight: 1},
				{Name: "affinity `big`", Value: 1, Weight: 3},
				{Name: "affinity `bad`", Value: 0, Weight: 1},
				{Name: "affinity `half`", Value: 0.5, Weight: 0.5},
			},
		},
		{
			name: "training packs",
			req: func(r *placement.Request) {
				r.Kind, r.Latency = placement.Training, placement.Latency{}
				r.Gang = placement.Gang{Nodes: 1}
			},
			want: []placement.Score{{Name: "binpack", Value: 0.25, Weight: 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := oneNode()
			if tc.node != nil {
				tc.node(&n)
			}
			r := oneRequest()
			if tc.req != nil {
				tc.req(r)
			}
			var b placement.Builder
			b.Add(n, holder)
			b.SetClient("shop", at(0, 0))
			s, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := place(t, s, r)
			if len(d.Placements) != 1 || d.Placements[0].Node != "x" {
				t.Fatalf("x not placed:\n%s", d)
			}
			p := d.Placements[0]
			if diff := cmp.Diff(tc.want, p.Scores, cmp.Comparer(func(a, b placement.Score) bool {
				return a.Name == b.Name && a.Value == b.Value && a.Weight == b.Weight
			})); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
			// The total is the weighted mean of the parts.
			sum, w := 0.0, 0.0
			for _, s := range p.Scores {
				sum += s.Value * s.Weight
				w += s.Weight
			}
			if diff := sum/w - p.Total; diff > 0.002 || diff < -0.002 {
				t.Errorf("total %v, weighted mean of scores %v", p.Total, sum/w)
			}
		})
	}
}
