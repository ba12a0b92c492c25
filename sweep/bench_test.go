package sweep

import (
	"fmt"
	"testing"
)

// BenchmarkSearch compares TPE with random search at equal trial counts
// on the seeded objective: the best value after 16 and 32 sequential
// trials, median of 5 seeds (the objective's minimum is 0.398), and the
// cost of proposing one point.
func BenchmarkSearch(b *testing.B) {
	for _, alg := range []string{Random, TPE} {
		b.Run("impl="+alg, func(b *testing.B) {
			var at16, at32 []float64
			for range b.N {
				at16, at32 = at16[:0], at32[:0]
				for seed := range uint64(5) {
					best := search(b, alg, seed, 32)
					at16 = append(at16, best[15])
					at32 = append(at32, best[31])
				}
			}
			b.ReportMetric(median(at16), "best@16")
			b.ReportMetric(median(at32), "best@32")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*5*32), "ns/proposal")
		})
	}
}

// ExampleNew shows a search's first proposals.
func ExampleNew() {
	space := Space{
		{Name: "learningRate", Kind: Float, Min: 1e-3, Max: 0.1, Log: true},
		{Name: "epochs", Kind: Int, Min: 10, Max: 50},
	}
	alg, _ := New(Grid, space, 1, Options{GridPoints: 2})
	var hist []Trial
	for {
		p, ok := alg.Next(hist)
		if !ok {
			break
		}
		fmt.Println(space.Values(p))
		hist = append(hist, Trial{Point: p})
	}
	// Output:
	// map[epochs:10 learningRate:0.001]
	// map[epochs:10 learningRate:0.1]
	// map[epochs:50 learningRate:0.001]
	// map[epochs:50 learningRate:0.1]
}
