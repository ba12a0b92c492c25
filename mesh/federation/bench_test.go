package federation_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/federation"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// BenchmarkFederation runs S sites of A agents in one process, each site
// its own pool (in-memory network, memberlist's compression off as in the
// mesh benchmarks), joined by federation over libp2p on loopback TCP with
// the production intervals (summaries every 5s, syncs every 30s) and one
// gateway per site. It reports how long a global record written at one
// agent takes to reach every agent of every site (median and worst of 5),
// and the libp2p bytes all gateways sent and received over a quiet
// minute, per site: the federation's WAN traffic.
func BenchmarkFederation(b *testing.B) {
	for _, size := range []struct{ sites, agents int }{{10, 10}, {100, 10}} {
		b.Run(fmt.Sprintf("sites=%d/agents=%d", size.sites, size.agents), func(b *testing.B) {
			fc := federation.Config{Gateways: 1, SummaryInterval: 5 * time.Second, SyncInterval: 30 * time.Second}
			quiet := func(c *memberlist.Config) { c.EnableCompression = false }
			var sites [][]*agent
			var boot []string
			for i := range size.sites {
				s := siteWith(b, &meshtest.Network{}, fmt.Sprintf("s%03d", i), size.agents, boot, fc, quiet)
				if i == 0 {
					boot = gatewayAddrs(b, s)
				}
				sites = append(sites, s)
			}
			var all []*agent
			for _, s := range sites {
				all = append(all, s...)
			}
			meshtest.Poll(b, 5*time.Minute, time.Second, "every site to hear of every other", func() bool {
				for _, s := range sites {
					if len(federation.Remotes(s[0].m, time.Now())) != size.sites-1 {
						return false
					}
				}
				return true
			}, nil)
			var times []float64
			for r := range 5 {
				src := all[(r*7919)%len(all)]
				key := fmt.Sprintf("policies/bench-%d", r)
				if _, err := src.m.Put(key, json.RawMessage(`1`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
					b.Fatal(err)
				}
				d := meshtest.Elapsed(b, 2*time.Minute, "the record at every agent", func() bool {
					for _, a := range all {
						if _, err := a.m.Get(key); err != nil {
							return false
						}
					}
					return true
				})
				times = append(times, d.Seconds())
			}
			traffic := func() int64 {
				var n int64
				for _, a := range all {
					in, out := a.f.Traffic()
					n += in + out
				}
				return n
			}
			before, start := traffic(), time.Now()
			time.Sleep(time.Minute) // the measurement window: a quiet minute of summaries and syncs
			perSite := float64(traffic()-before) / time.Since(start).Minutes() / float64(size.sites)
			slices.Sort(times)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(times[len(times)/2], "record-median-s")
			b.ReportMetric(times[len(times)-1], "record-max-s")
			b.ReportMetric(perSite/1024, "wan-KiB/site/min")
		})
	}
}
