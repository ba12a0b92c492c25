package mesh_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// busyForEnv sets how long BenchmarkBusyHosts watches each level (a Go
// duration).
const busyForEnv = "STRATA_BUSY_FOR"

// BenchmarkBusyHosts runs 8 agents in this process on loopback sockets
// (encrypted gossip) while 0, 1, 3 and 12 (the 24 on 2 cores)
// busy loops per core spin in separate processes, and reports, with
// strata's settings and with memberlist's LAN defaults (and no RTT
// filter):
//
//   - false-failed: times an agent saw a live peer failed (target 0);
//   - suspect-seen: times an agent saw a live peer turn suspect, polled
//     every 200ms;
//   - detect-median-s, detect-max-s: how long until every other agent saw
//     a killed agent failed, 3 kills under the same load (target ≤ 6s);
//   - rtt-err-ms, rtt-err-max-ms: the Vivaldi RTT estimate between two
//     agents, median and worst over every pair; their true RTT is that of
//     loopback (well under 0.1ms), so the estimate is the error (target
//     ≤ 3ms).
//
// Each level is watched for 30s by default; the 5 minutes:
//
//	STRATA_BUSY_FOR=5m go test -run '^$' -bench BusyHosts -benchtime 1x -timeout 2h ./mesh/
func BenchmarkBusyHosts(b *testing.B) {
	watch := 30 * time.Second
	if s := os.Getenv(busyForEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive duration such as 5m", busyForEnv, s)
		}
		watch = d
	}
	for _, loops := range []int{0, 1, 3, 12} {
		for _, impl := range []struct {
			name string
			tune func(*mesh.Config)
		}{
			{"strata", nil},
			{"memberlist-defaults", func(c *mesh.Config) {
				mesh.UnfilteredRTT(c)
				c.Memberlist = func(c *memberlist.Config) {
					d := memberlist.DefaultLANConfig()
					c.ProbeInterval, c.ProbeTimeout = d.ProbeInterval, d.ProbeTimeout
					c.SuspicionMult, c.SuspicionMaxTimeoutMult = d.SuspicionMult, d.SuspicionMaxTimeoutMult
					c.AwarenessMaxMultiplier, c.TCPTimeout = d.AwarenessMaxMultiplier, d.TCPTimeout
				}
			}},
		} {
			b.Run(fmt.Sprintf("loops-per-core=%d/impl=%s", loops, impl.name), func(b *testing.B) {
				busyHosts(b, loops, watch, impl.tune)
			})
		}
	}
}

func busyHosts(b *testing.B, loops int, watch time.Duration, tune func(*mesh.Config)) {
	const n, kills = 8, 3
	key := bytes.Repeat([]byte{7}, 32)
	var nodes []*mesh.Mesh
	for i := range n {
		id, err := mesh.NewIdentity()
		if err != nil {
			b.Fatal(err)
		}
		cfg := mesh.Config{
			Name: fmt.Sprintf("b%d", i), Identity: id, BindAddr: "127.0.0.1:0", GossipKey: key,
			Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
		}
		if tune != nil {
			tune(&cfg)
		}
		m, err := mesh.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		if i > 0 {
			if err := m.Join(context.Background(), []string{nodes[0].GossipAddr()}); err != nil {
				b.Fatal(err)
			}
		}
		nodes = append(nodes, m)
	}
	meshtest.Poll(b, time.Minute, 100*time.Millisecond, "8 agents to see each other alive",
		func() bool { return formed(nodes, n) }, func() { b.Log(poolCounts(nodes)) })

	meshtest.BusyLoops(b, loops*runtime.NumCPU(), watch+3*time.Minute)

	// Watch every agent's view of every peer; count turns to suspect and
	// to failed. A killed agent's turn to failed is not counted.
	last := map[[2]string]mesh.Status{}
	killed := map[string]bool{}
	suspects, falseFailed := 0, 0
	look := func() {
		for _, m := range nodes {
			if killed[m.Name()] {
				continue
			}
			for _, mb := range m.Members() {
				k := [2]string{m.Name(), mb.Name}
				if mb.Status != last[k] && !killed[mb.Name] {
					switch mb.Status {
					case mesh.StatusSuspect:
						suspects++
					case mesh.StatusFailed:
						falseFailed++
						b.Logf("%s sees %s failed", m.Name(), mb.Name)
					}
				}
				last[k] = mb.Status
			}
		}
	}
	for end := time.Now().Add(watch); time.Now().Before(end); {
		look()
		time.Sleep(200 * time.Millisecond) // the polling interval
	}

	var errs []float64
	for _, a := range nodes {
		for _, c := range nodes {
			if a == c {
				continue
			}
			d, err := a.RTT(a.Name(), c.Name())
			if err != nil {
				b.Fatalf("%s: RTT to %s: %v", a.Name(), c.Name(), err)
			}
			errs = append(errs, float64(d)/float64(time.Millisecond))
		}
	}

	var times []float64
	for r := range kills {
		victim := nodes[n-1-r]
		killed[victim.Name()] = true
		victim.Close()
		others := nodes[:n-1-r]
		start := time.Now()
		meshtest.Poll(b, 2*time.Minute, 20*time.Millisecond, "the killed agent to be failed everywhere", func() bool {
			look()
			for _, m := range others {
				got, err := m.Node(victim.Name())
				if err != nil || got.Status != mesh.StatusFailed {
					return false
				}
			}
			return true
		}, nil)
		times = append(times, time.Since(start).Seconds())
	}

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(falseFailed), "false-failed")
	b.ReportMetric(float64(suspects), "suspect-seen")
	b.ReportMetric(median(times), "detect-median-s")
	b.ReportMetric(slices.Max(times), "detect-max-s")
	b.ReportMetric(median(errs), "rtt-err-ms")
	b.ReportMetric(slices.Max(errs), "rtt-err-max-ms")
}
