package mesh_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// memCluster starts n mesh nodes on an in-memory network with memberlist's
// LAN timings, joining them one at a time (paced, each to a random earlier
// node) and waiting until every node sees n alive members.
func memCluster(b *testing.B, n int) []*mesh.Mesh {
	b.Helper()
	network := &meshtest.Network{}
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	var nodes []*mesh.Mesh
	for i := range n {
		name := fmt.Sprintf("n%03d", i)
		id, _ := mesh.NewIdentity()
		tr := network.NewTransport(name)
		m, err := mesh.New(mesh.Config{
			Name: name, Identity: id, Transport: tr,
			Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
			// Nothing crosses a wire here: compressing every packet would
			// only spend the CPU hundreds of nodes in one process need.
			Memberlist: func(c *memberlist.Config) { c.EnableCompression = false },
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		if i > 0 {
			seed := nodes[rng.IntN(len(nodes))].GossipAddr()
			if err := m.Join(context.Background(), []string{seed}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // pace joins: 256 back-to-back joins starve both cores
		}
		nodes = append(nodes, m)
	}
	// Poll cheaply (every view once a second): at 256 nodes a tight poll
	// of every view would steal the CPU gossip needs.
	meshtest.Poll(b, 5*time.Minute, time.Second, fmt.Sprintf("%d nodes to see each other alive", n),
		func() bool { return formed(nodes, n) }, nil)
	return nodes
}

func formed(nodes []*mesh.Mesh, n int) bool {
	for _, m := range nodes {
		if m.NumAlive() != n {
			return false
		}
	}
	return true
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkConvergence measures how long one node's state change takes to
// reach all N agents (real memberlist, in-memory transport, LAN timings),
// next to what epidemic gossip predicts: about log₃N rounds (fanout 3) of
// the 200ms gossip interval.
func BenchmarkConvergence(b *testing.B) {
	for _, n := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := memCluster(b, n)
			cfg := memberlist.DefaultLANConfig()
			rounds := math.Log(float64(n)) / math.Log(float64(cfg.GossipNodes))
			theory := rounds * cfg.GossipInterval.Seconds()
			const repeats = 7
			var times []float64
			b.Run("impl=strata", func(b *testing.B) {
				for r := range repeats {
					src := nodes[(r*7919)%n]
					val := fmt.Sprint(r)
					if err := src.Update(func(s *mesh.NodeState) { s.Labels["bench"] = val }); err != nil {
						b.Fatal(err)
					}
					want := src.Local().Version
					id := src.ID()
					d := meshtest.Elapsed(b, 3*time.Minute, "the change to reach every node", func() bool {
						for _, m := range nodes {
							if v, ok := m.NodeVersion(id); !ok || v < want {
								return false
							}
						}
						return true
					})
					times = append(times, d.Seconds())
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(median(times), "median-s")
				b.ReportMetric(slices.Max(times), "max-s")
			})
			b.Run("impl=gossip-theory", func(b *testing.B) {
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(theory, "median-s")
				b.ReportMetric(theory, "max-s")
			})
		})
	}
}

// BenchmarkFailureDetection measures how long until every other agent sees
// a killed agent failed, next to memberlist's suspicion timeout: Lifeguard
// starts it at SuspicionMaxTimeoutMult × the base and shrinks it toward the
// base, SuspicionMult × log10(N) × ProbeInterval, as independent
// confirmations arrive. Detection adds up to a probe round before suspicion.
func BenchmarkFailureDetection(b *testing.B) {
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := memCluster(b, n)
			cfg := memberlist.DefaultLANConfig()
			base := float64(cfg.SuspicionMult) * math.Max(1, math.Log10(float64(n))) * cfg.ProbeInterval.Seconds()
			const repeats = 3
			var times []float64
			b.Run("impl=strata", func(b *testing.B) {
				for r := range repeats {
					victim := nodes[len(nodes)-1-r]
					others := nodes[:len(nodes)-1-r]
					victim.Close()
					d := meshtest.Elapsed(b, 2*time.Minute, "the killed node to be failed everywhere", func() bool {
						for _, m := range others {
							got, err := m.Node(victim.Name())
							if err != nil || got.Status != mesh.StatusFailed {
								return false
							}
						}
						return true
					})
					times = append(times, d.Seconds())
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(median(times), "median-s")
				b.ReportMetric(slices.Max(times), "max-s")
			})
			b.Run("impl=suspicion-min", func(b *testing.B) {
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(base, "median-s")
				b.ReportMetric(base, "max-s")
			})
			b.Run("impl=suspicion-max", func(b *testing.B) {
				b.ReportMetric(0, "ns/op")
				max := base * float64(cfg.SuspicionMaxTimeoutMult)
				b.ReportMetric(max, "median-s")
				b.ReportMetric(max, "max-s")
			})
		})
	}
}
