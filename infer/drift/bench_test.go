package drift

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkDriftDelay measures, per detector at the default Config, the
// detection delay (samples from the change point to the alarm) over seeded
// streams of 3 N(0, 1) features where one feature's mean moves by one
// reference standard deviation, abruptly or linearly over 1000 samples;
// and the false alarms per 10,000 samples over the 10,000 stationary
// samples before each change point. It also runs half-σ shifts, near the
// default PSI threshold's sensitivity ("missed" counts the streams with no
// alarm within 4,000 samples of the change). It reports its own
// percentiles over the streams, so one iteration (-benchtime 1x) is
// enough.
func BenchmarkDriftDelay(b *testing.B) {
	const (
		streams   = 20
		preChange = 10000
		after     = 4000
	)
	ref := testReference(b, 3, 20000, 1)
	for _, sc := range []struct {
		name  string
		ramp  int
		delta float64
	}{{"abrupt", 0, 1}, {"gradual", 1000, 1}, {"abrupt-half-sd", 0, 0.5}, {"gradual-half-sd", 1000, 0.5}} {
		for _, det := range Detectors {
			b.Run(fmt.Sprintf("shift=%s/detector=%s/impl=strata", sc.name, det), func(b *testing.B) {
				var delays []float64
				var falseAlarms, missed int
				for range b.N {
					delays, falseAlarms, missed = delays[:0], 0, 0
					for s := range streams {
						m, err := New(ref, Config{Detector: det})
						if err != nil {
							b.Fatal(err)
						}
						sh := shift{at: preChange, ramp: sc.ramp, delta: sc.delta, feature: s % 3}
						events, at := run(b, m, preChange+after, sh, uint64(100+s), 0)
						detected := false
						for k, ev := range events {
							if ev.Kind != EventAlarm {
								continue
							}
							if at[k] < preChange {
								falseAlarms++
								continue
							}
							if !detected {
								delays = append(delays, float64(at[k]-preChange))
								detected = true
							}
						}
						if !detected {
							missed++
						}
					}
				}
				slices.Sort(delays)
				b.ReportMetric(0, "ns/op")
				if len(delays) > 0 {
					b.ReportMetric(percentile(delays, 0.5), "p50-samples")
					b.ReportMetric(percentile(delays, 0.9), "p90-samples")
				}
				b.ReportMetric(float64(missed), "missed")
				b.ReportMetric(float64(falseAlarms)/(streams*preChange/10000.0), "false-alarms/10k")
			})
		}
	}
}

func percentile(sorted []float64, q float64) float64 {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkDriftCost measures the monitor's cost per sample per feature
// (keeping the sorted window plus the amortised evaluations) on 16
// features, at the default cadence (impl=strata) and evaluating after
// every sample once the window is full (impl=every-sample), the cost a
// per-request check would pay.
func BenchmarkDriftCost(b *testing.B) {
	const features = 16
	ref := testReference(b, features, 20000, 1)
	rng := rand.New(rand.NewPCG(5, 5))
	rows := make([][]float64, 4096)
	for i := range rows {
		rows[i] = make([]float64, features)
		for j := range rows[i] {
			rows[i][j] = rng.NormFloat64()
		}
	}
	for _, det := range Detectors {
		for _, impl := range []struct {
			name    string
			every   int
			samples int
		}{{"strata", DefaultEvery, 100000}, {"every-sample", 1, 2000}} {
			b.Run(fmt.Sprintf("detector=%s/impl=%s", det, impl.name), func(b *testing.B) {
				var perSample time.Duration
				for range b.N {
					m, err := New(ref, Config{Detector: det, Every: impl.every})
					if err != nil {
						b.Fatal(err)
					}
					// Fill the window first: before that nothing is evaluated.
					for i := 0; i < m.Config().Window; i++ {
						if _, err := m.Observe(rows[i%len(rows)]); err != nil {
							b.Fatal(err)
						}
					}
					start := time.Now()
					for i := 0; i < impl.samples; i++ {
						if _, err := m.Observe(rows[i%len(rows)]); err != nil {
							b.Fatal(err)
						}
					}
					perSample = time.Since(start) / time.Duration(impl.samples)
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(perSample.Nanoseconds())/features, "ns/sample/feature")
			})
		}
	}
}
