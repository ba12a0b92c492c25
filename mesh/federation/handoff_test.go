package federation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

func TestHandOff(t *testing.T) {
	t.Parallel()
	remote := func(s Summary, st mesh.SiteStatus) Remote { return Remote{Summary: s, Status: st, Heard: time.Now()} }
	edge := Summary{Site: "edge-b", Region: "eu", Tiers: map[string]Capacity{
		"edge": {Nodes: 4, Millicores: 16000, Memory: 16 << 30, FreeCPU: 12000, FreeMemory: 12 << 30}}}
	cloud := Summary{Site: "cloud", Region: "eu", Tiers: map[string]Capacity{
		"cloud": {Nodes: 2, Millicores: 64000, Memory: 256 << 30, GPUs: 16, FreeCPU: 60000, FreeMemory: 200 << 30, FreeGPUs: 16}},
		Fabrics: map[string]int{"ib-0": 16}}
	big := Summary{Site: "cloud-2", Region: "us", Tiers: map[string]Capacity{
		"cloud": {Nodes: 4, Millicores: 64000, Memory: 256 << 30, GPUs: 32, FreeCPU: 60000, FreeMemory: 200 << 30, FreeGPUs: 32}},
		Fabrics: map[string]int{"ib-1": 16, "ib-2": 16}}
	// Ten nodes with 2 cores free each: 20 cores free in all, but no node
	// takes a replica of 4.
	small := Summary{Site: "edge-c", Region: "eu", Tiers: map[string]Capacity{
		"edge": {Nodes: 10, Millicores: 40000, Memory: 40 << 30, FreeCPU: 20000, FreeMemory: 30 << 30,
			Shapes: []Shape{{FreeCPU: 2000, FreeMemory: 3 << 30, Nodes: 10}}}}}
	shapedCloud := cloud
	shapedCloud.Tiers = map[string]Capacity{"cloud": {Nodes: 2, Millicores: 64000, Memory: 256 << 30, GPUs: 16, FreeCPU: 60000, FreeMemory: 200 << 30, FreeGPUs: 16,
		Shapes: []Shape{{FreeCPU: 40000, FreeMemory: 150 << 30, FreeGPUs: 8, Nodes: 1}, {FreeCPU: 20000, FreeMemory: 50 << 30, FreeGPUs: 8, Nodes: 1}}}}
	inference := func(replicas int, cpu int64) *placement.Request {
		return &placement.Request{Kind: placement.Inference, Replicas: replicas, Resources: placement.Resources{CPU: cpu, Memory: 1 << 30}}
	}
	constraint := func(src string) placement.Constraint {
		x, err := policy.CompileConstraint(src)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	gang := func(nodes, gpus int) *placement.Request {
		return &placement.Request{Kind: placement.Training, Resources: placement.Resources{CPU: 1000, Memory: 1 << 30},
			Gang: placement.Gang{Nodes: nodes, GPUsPerNode: gpus, SameFabric: true}}
	}
	// WAN coordinates on a line, in milliseconds from this site, edge-a.
	at := func(ms ...float64) *coordinate.Coordinate {
		c := &coordinate.Coordinate{}
		for _, x := range ms {
			c.Vec = append(c.Vec, x/1e3)
		}
		return c
	}
	own := at(0, 0)
	placed := func(s Summary, c *coordinate.Coordinate) Remote {
		s.Coordinate = c
		return remote(s, mesh.SiteReachable)
	}
	near := []Remote{placed(edge, at(10, 0)), placed(cloud, at(40, 0)), placed(big, at(100, 0))}
	bounded := func(p99 time.Duration, clients ...string) *placement.Request {
		r := inference(1, 500)
		r.Latency = placement.Latency{P99: p99, Clients: clients}
		return r
	}
	for _, tc := range []struct {
		name    string
		remotes []Remote
		req     *placement.Request
		want    string
	}{
		{"a latency-bound service goes to its clients' site", near, bounded(20*time.Millisecond, "edge-b"), "edge-b"},
		{"or to the nearest site within the bound", near, bounded(15*time.Millisecond, "edge-a"), "edge-b"},
		{"the bound holds for every client", near, bounded(25*time.Millisecond, "edge-a", "cloud"), ""},
		{"the nearest to the farthest client wins", near, bounded(65*time.Millisecond, "edge-a", "cloud-2"), "cloud"},
		{"no site is near enough", near, bounded(5*time.Millisecond, "edge-a"), ""},
		{"no bound: the most free GPUs win", near, inference(1, 500), "cloud-2"},
		{"a client region cannot be judged", near, bounded(100*time.Millisecond, "eu"), ""},
		{"a latency bound without coordinates", []Remote{remote(cloud, mesh.SiteReachable)}, bounded(time.Second, "cloud"), ""},
		{"a site without a coordinate is not chosen", []Remote{remote(edge, mesh.SiteReachable), placed(cloud, at(40, 0))},
			bounded(time.Second, "edge-a"), "cloud"},
		{"a coordinate of other dimensions is not compared", []Remote{placed(edge, at(10, 0, 0)), placed(cloud, at(40, 0))},
			bounded(time.Second, "edge-a"), "cloud"},
		{"a GPU gang goes where the GPUs are", []Remote{remote(edge, mesh.SiteReachable), remote(cloud, mesh.SiteReachable)}, gang(2, 8), "cloud"},
		{"the most free GPUs win", []Remote{remote(cloud, mesh.SiteReachable), remote(big, mesh.SiteReachable)}, gang(2, 4), "cloud-2"},
		{"a gang fits one fabric", []Remote{remote(cloud, mesh.SiteReachable), remote(big, mesh.SiteReachable)}, gang(4, 8), ""},
		{"an unreachable site is not chosen", []Remote{remote(cloud, mesh.SiteUnreachable)}, gang(2, 8), ""},
		{"a site constraint is kept", []Remote{remote(edge, mesh.SiteReachable), remote(cloud, mesh.SiteReachable)},
			&placement.Request{Kind: placement.Inference, Replicas: 2, Resources: placement.Resources{CPU: 500, Memory: 64 << 20},
				Constraints: []placement.Constraint{constraint(`node.site == "edge-b"`)}}, "edge-b"},
		{"a label constraint matches no summary", []Remote{remote(cloud, mesh.SiteReachable)},
			&placement.Request{Kind: placement.Inference, Constraints: []placement.Constraint{constraint(`node.labels["zone"] == "a"`)}}, ""},
		{"not enough nodes", []Remote{remote(edge, mesh.SiteReachable)},
			&placement.Request{Kind: placement.Inference, Replicas: 5, Resources: placement.Resources{CPU: 100}}, ""},
		{"room in sum but on no node", []Remote{remote(small, mesh.SiteReachable)}, inference(2, 4000), ""},
		{"room on enough nodes", []Remote{remote(small, mesh.SiteReachable)}, inference(2, 1500), "edge-c"},
		{"more replicas than nodes that fit one", []Remote{remote(small, mesh.SiteReachable), remote(shapedCloud, mesh.SiteReachable)}, inference(3, 20000), ""},
		{"a gang member per node with its GPUs", []Remote{remote(shapedCloud, mesh.SiteReachable)}, gang(2, 8), "cloud"},
		{"a gang member needs its GPUs on one node", []Remote{remote(shapedCloud, mesh.SiteReachable)}, gang(1, 16), ""},
	} {
		site, why := HandOff("edge-a", own, tc.remotes, tc.req)
		if site != tc.want || (site != "" && !strings.Contains(why, "free")) {
			t.Errorf("%s: HandOff = %q (%s), want %q", tc.name, site, why, tc.want)
		}
	}
	if site, _ := HandOff("edge-a", nil, near, bounded(time.Second, "edge-b")); site != "" {
		t.Errorf("a latency bound without this site's coordinate: handed to %q", site)
	}
}

// TestPingOnceDropsLostSamples: a probe whose channel closes unanswered
// (libp2p's timeout), fails, or says 0 ms is a lost sample, not a
// distance of 0.
func TestPingOnceDropsLostSamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	closed := make(chan ping.Result)
	close(closed)
	failed := make(chan ping.Result, 1)
	failed <- ping.Result{Error: errors.New("stream reset")}
	zero := make(chan ping.Result, 1)
	zero <- ping.Result{}
	good := make(chan ping.Result, 1)
	good <- ping.Result{RTT: 42 * time.Millisecond}
	for _, tt := range []struct {
		name string
		ch   chan ping.Result
		want time.Duration
		ok   bool
	}{
		{"closed on timeout", closed, 0, false},
		{"failed", failed, 0, false},
		{"zero", zero, 0, false},
		{"answered", good, 42 * time.Millisecond, true},
	} {
		if got, ok := pingOnce(ctx, tt.ch); got != tt.want || ok != tt.ok {
			t.Errorf("%s: pingOnce = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
