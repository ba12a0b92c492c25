package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/strata-mesh/strata/sim"
)

// BenchmarkGenerate is the time to generate and index a topology.
func BenchmarkGenerate(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("nodes=%d/impl=strata", n), func(b *testing.B) {
			var total time.Duration
			for k := range b.N {
				start := time.Now()
				if _, err := sim.Generate(sim.Options{Nodes: n, Seed: uint64(k)}); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkSimReplay is `strata sim`: generate an estate and a trace and
// replay it with all five strategies (two at a time on this machine's
// cores), as wall-clock seconds from start to report.
func BenchmarkSimReplay(b *testing.B) {
	for _, c := range []struct{ nodes, sites, policies int }{{10000, 100, 1000}, {100000, 1000, 10000}} {
		b.Run(fmt.Sprintf("nodes=%d/sites=%d/policies=%d/impl=strata", c.nodes, c.sites, c.policies), func(b *testing.B) {
			var total time.Duration
			var slo float64
			for k := range b.N {
				start := time.Now()
				topo, err := sim.Generate(sim.Options{Nodes: c.nodes, Sites: c.sites, Seed: uint64(k + 1)})
				if err != nil {
					b.Fatal(err)
				}
				rep, err := sim.Run(topo, topo.Trace(sim.TraceOptions{Policies: c.policies, Seed: uint64(k + 1)}), sim.RunOptions{Seed: uint64(k + 1)})
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				slo += rep.Results[0].SLOAttainment
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s")
			b.ReportMetric(100*slo/float64(b.N), "slo%")
			b.ReportMetric(0, "ns/op")
		})
	}
}
