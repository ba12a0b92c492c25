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
