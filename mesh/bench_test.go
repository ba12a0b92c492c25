package mesh_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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
	nodes, _ := memClusterOn(b, &meshtest.Network{}, n, nil)
	return nodes
}

// memClusterOn is memCluster on network, with tune (if set) adjusting
// memberlist's configuration after the mesh's own.
func memClusterOn(b *testing.B, network *meshtest.Network, n int, tune func(*memberlist.Config)) ([]*mesh.Mesh, *meshtest.Network) {
	b.Helper()
	return memClusterTrust(b, network, n, tune, nil)
}

// memClusterTrust is memClusterOn with trust (if set) giving each node its
// mesh.Trust.
func memClusterTrust(b *testing.B, network *meshtest.Network, n int, tune func(*memberlist.Config), trust func(name string, id mesh.Identity) *mesh.Trust) ([]*mesh.Mesh, *meshtest.Network) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	var nodes []*mesh.Mesh
	for i := range n {
		name := fmt.Sprintf("n%03d", i)
		id, _ := mesh.NewIdentity()
		tr := network.NewTransport(name)
		var t *mesh.Trust
		if trust != nil {
			t = trust(name, id)
		}
		m, err := mesh.New(mesh.Config{
			Name: name, Identity: id, Transport: tr, Trust: t,
			Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
			// Nothing crosses a wire here: compressing every packet would
			// only spend the CPU hundreds of nodes in one process need.
			Memberlist: func(c *memberlist.Config) {
				c.EnableCompression = false
				if tune != nil {
					tune(c)
				}
			},
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
		func() bool { return formed(nodes, n) }, func() { b.Log(poolCounts(nodes)) })
	return nodes, network
}

func formed(nodes []*mesh.Mesh, n int) bool {
	for _, m := range nodes {
		if m.NumAlive() != n {
			return false
		}
	}
	return true
}

// poolCounts says how many nodes see how many alive members, for a pool
// that did not form: "alive members seen -> nodes".
func poolCounts(nodes []*mesh.Mesh) string {
	seen := map[int]int{}
	for _, m := range nodes {
		seen[m.NumAlive()]++
	}
	keys := slices.Sorted(maps.Keys(seen))
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%d->%d", k, seen[k]))
	}
	return "alive members seen -> nodes: " + strings.Join(out, " ")
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

// BenchmarkFailureDetection measures, at 64 agents in one site's pool, how
// long until every other agent sees a SIGKILLed agent failed (median and
// worst of 5 kills), and how many members are seen failed by an agent that
// is not stalled itself while 3 agents (5%) stall for 2 s, as SIGSTOP or a
// long GC pause would (false positives, over 3 rounds; see
// meshtest.Network.Stall): with strata's timings (probes every 800ms,
// SuspicionMult 3) and with memberlist's LAN defaults (every 1s,
// SuspicionMult 4), both with Lifeguard on. BenchmarkBusyHosts measures
// the same on loaded hosts.
func BenchmarkFailureDetection(b *testing.B) {
	const n = 64
	for _, impl := range []struct {
		name string
		tune func(*memberlist.Config)
	}{
		{"strata", nil},
		{"memberlist-defaults", func(c *memberlist.Config) {
			d := memberlist.DefaultLANConfig()
			c.ProbeInterval, c.ProbeTimeout = d.ProbeInterval, d.ProbeTimeout
			c.SuspicionMult, c.SuspicionMaxTimeoutMult = d.SuspicionMult, d.SuspicionMaxTimeoutMult
		}},
	} {
		b.Run(fmt.Sprintf("nodes=%d/impl=%s", n, impl.name), func(b *testing.B) {
			nodes, network := memClusterOn(b, &meshtest.Network{}, n, impl.tune)
			// False positives first, on the whole pool: any member that a
			// member not stalled itself sees failed. (A stalled member's
			// own view is not counted: here, unlike under SIGSTOP, its
			// timers keep running while it hears nothing.)
			falsePos := 0
			for round := range 3 {
				stalled := map[string]bool{}
				for _, m := range nodes[3*round+1 : 3*round+4] {
					stalled[m.Name()] = true
					network.Stall(m.Name(), 2*time.Second)
				}
				// Watch well past the stall: a suspicion started in it
				// times out seconds later unless refuted.
				marked := map[string]bool{}
				end := time.Now().Add(12 * time.Second)
				for time.Now().Before(end) {
					for _, m := range nodes {
						if stalled[m.Name()] {
							continue
						}
						for _, mb := range m.Members() {
							if mb.Status == mesh.StatusFailed {
								if !marked[mb.Name] {
									b.Logf("round %d: %s sees %s failed (stalled: %v)", round, m.Name(), mb.Name, stalled[mb.Name])
								}
								marked[mb.Name] = true
							}
						}
					}
					time.Sleep(100 * time.Millisecond)
				}
				falsePos += len(marked)
				meshtest.Poll(b, 2*time.Minute, time.Second, "the pool whole again", func() bool { return formed(nodes, n) }, nil)
			}
			var times []float64
			for r := range 5 {
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
			b.ReportMetric(float64(falsePos), "false-failed")
		})
	}
}
