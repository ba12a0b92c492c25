package drift

import (
	"encoding/csv"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// streamScenario is a seeded synthetic change of feature 0 of a
// three-feature N(0, 1) stream, from row at on.
type streamScenario struct {
	name string
	// shifted returns the value of the changed feature after the change
	// point, given a fresh N(0, 1) draw x and the stream's source.
	shifted func(x float64, rng *rand.Rand) float64
}

var streamScenarios = []streamScenario{
	{"abrupt-2sd", func(x float64, _ *rand.Rand) float64 { return x + 2 }},
	{"abrupt-1sd", func(x float64, _ *rand.Rand) float64 { return x + 1 }},
	{"abrupt-half-sd", func(x float64, _ *rand.Rand) float64 { return x + 0.5 }},
	// 10% of rows come from another class, 3σ away: the mean moves by
	// 0.3σ and the spread grows.
	{"mixed-10pct-3sd", func(x float64, rng *rand.Rand) float64 {
		if rng.Float64() < 0.1 {
			return x + 3
		}
		return x
	}},
}

// BenchmarkStreamDelay compares the monitor with its streaming detector
// (impl=strata: rank scale, the default ARL of 10⁶ rows per model and
// design shift of 1σ; impl=stream-moments: moments scale;
// impl=stream-shift-half: tuned for a shift of σ/2) with the windowed
// detectors alone (impl=windowed-*, the default Config: window 500,
// evaluated every 100 rows, 3 evaluations in a row; windowed-ks-w300: a
// 300-row window evaluated every 60), on the same seeded streams: 3 N(0, 1)
// features, one of which changes after 10,000 stationary rows. It reports
// the delay (rows from the change point to the monitor's first alarm,
// counting the alarming row) as percentiles over the streams, the streams
// with no alarm within 3,000 rows ("missed"), and the false alarms per
// 10,000 rows over the stationary prefixes (500,000 rows per row of the
// table). One iteration (-benchtime 1x) is enough.
func BenchmarkStreamDelay(b *testing.B) {
	const (
		streams   = 50
		preChange = 10000
		after     = 3000
		features  = 3
	)
	ref := testReference(b, features, 20000, 1)
	impls := []struct {
		name string
		cfg  Config
	}{
		{"strata", Config{Stream: &StreamConfig{}}},
		{"stream-moments", Config{Stream: &StreamConfig{Scale: ScaleMoments}}},
		{"stream-shift-half", Config{Stream: &StreamConfig{Shift: 0.5}}},
		{"windowed-ks", Config{Detector: DetectorKS}},
		{"windowed-psi", Config{Detector: DetectorPSI}},
		{"windowed-wasserstein", Config{Detector: DetectorWasserstein}},
		// The agent's shape at a 300-row window: evaluated every 60 rows.
		{"windowed-ks-w300", Config{Detector: DetectorKS, Window: 300, Every: 60}},
	}
	for _, sc := range streamScenarios {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("shift=%s/impl=%s", sc.name, impl.name), func(b *testing.B) {
				var delays []float64
				var falseAlarms, missed int
				for range b.N {
					delays, falseAlarms, missed = delays[:0], 0, 0
					row := make([]float64, features)
					for s := range streams {
						m, err := New(ref, impl.cfg)
						if err != nil {
							b.Fatal(err)
						}
						rng := rand.New(rand.NewPCG(uint64(500+s), 17))
						detected := false
						for i := 0; i < preChange+after && !detected; i++ {
							for j := range row {
								row[j] = rng.NormFloat64()
							}
							if i >= preChange {
								row[0] = sc.shifted(row[0], rng)
							}
							ev, err := m.Observe(row)
							if err != nil {
								b.Fatal(err)
							}
							if ev == nil || ev.Kind != EventAlarm {
								continue
							}
							if i < preChange {
								falseAlarms++
								continue
							}
							delays = append(delays, float64(i-preChange+1))
							detected = true
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

// BenchmarkStreamFalseAlarms measures the streaming detector's false-alarm
// rate against the one configured: for each of 20 seeded references (3
// features summarised from 20,000 rows, so each carries its own sampling
// error), 100,000 stationary rows from the same distribution, Gaussian or
// log-normal (skewed), counting rows on which any feature alarms. It
// reports the measured false alarms per 10,000 rows beside the budget
// (10⁴/ARL), for the rank scale (impl=strata) and the moments scale.
func BenchmarkStreamFalseAlarms(b *testing.B) {
	const (
		refs     = 20
		rows     = 100000
		features = 3
	)
	dists := []struct {
		name string
		draw func(*rand.Rand) float64
	}{
		{"normal", (*rand.Rand).NormFloat64},
		{"lognormal", func(r *rand.Rand) float64 { return math.Exp(r.NormFloat64()) }},
	}
	for _, dist := range dists {
		for _, arl := range []float64{1e4, 1e5, 1e6} {
			for _, impl := range []struct {
				name  string
				scale Scale
			}{{"strata", ScaleRank}, {"moments", ScaleMoments}} {
				b.Run(fmt.Sprintf("dist=%s/arl=%.0e/impl=%s", dist.name, arl, impl.name), func(b *testing.B) {
					var alarms int
					for range b.N {
						alarms = 0
						for r := range refs {
							rng := rand.New(rand.NewPCG(uint64(900+r), 5))
							x := make([]float64, features*20000)
							for i := range x {
								x[i] = dist.draw(rng)
							}
							ref, err := SummarizeColumns([]string{"a", "b", "c"}, x, SummaryOptions{Seed: uint64(r)})
							if err != nil {
								b.Fatal(err)
							}
							cs := make([]*CUSUM, features)
							for j := range cs {
								if cs[j], err = NewCUSUM(ref.Features[j], StreamConfig{ARL: arl, Scale: impl.scale}, features); err != nil {
									b.Fatal(err)
								}
							}
							for range rows {
								hit := false
								for _, c := range cs {
									if c.Observe(dist.draw(rng)) {
										hit = true
									}
								}
								if hit {
									alarms++
								}
							}
						}
					}
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(float64(alarms)/(refs*rows/10000.0), "false-alarms/10k")
					b.ReportMetric(1e4/arl, "budget/10k")
				})
			}
		}
	}
}

// BenchmarkStreamCost measures the streaming detector's cost per row per
// feature on 16 features: the CUSUM alone (impl=strata: rank scale, a
// binary search of the 512-value reference sample; impl=moments), and the
// whole monitor (window upkeep and the default KS evaluations) with and
// without it.
func BenchmarkStreamCost(b *testing.B) {
	const (
		features = 16
		samples  = 200000
	)
	ref := testReference(b, features, 20000, 1)
	rng := rand.New(rand.NewPCG(5, 5))
	rows := make([][]float64, 4096)
	for i := range rows {
		rows[i] = make([]float64, features)
		for j := range rows[i] {
			rows[i][j] = rng.NormFloat64()
		}
	}
	report := func(b *testing.B, d time.Duration) {
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(d.Nanoseconds())/samples/features, "ns/sample/feature")
	}
	for _, impl := range []struct {
		name  string
		scale Scale
	}{{"strata", ScaleRank}, {"moments", ScaleMoments}} {
		b.Run("part=cusum/impl="+impl.name, func(b *testing.B) {
			var d time.Duration
			for range b.N {
				cs := make([]*CUSUM, features)
				for j := range cs {
					var err error
					if cs[j], err = NewCUSUM(ref.Features[j], StreamConfig{Scale: impl.scale}, features); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				for i := range samples {
					for j, x := range rows[i%len(rows)] {
						cs[j].Observe(x)
					}
				}
				d = time.Since(start)
			}
			report(b, d)
		})
	}
	for _, impl := range []struct {
		name string
		cfg  Config
	}{{"strata", Config{Stream: &StreamConfig{}}}, {"windowed-only", Config{}}} {
		b.Run("part=monitor/impl="+impl.name, func(b *testing.B) {
			var d time.Duration
			for range b.N {
				m, err := New(ref, impl.cfg)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < m.Config().Window; i++ {
					if _, err := m.Observe(rows[i%len(rows)]); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				for i := range samples {
					if _, err := m.Observe(rows[i%len(rows)]); err != nil {
						b.Fatal(err)
					}
				}
				d = time.Since(start)
			}
			report(b, d)
		})
	}
}

// loadBreastCancer reads scikit-learn's breast_cancer.csv (a header line,
// then 30 features and a label per row: 0 malignant, 1 benign) from the
// repository's .deps/data, as scripts/install-data.sh leaves it. It skips
// the benchmark when the file is absent.
func loadBreastCancer(b *testing.B) (benign, malignant [][]float64) {
	b.Helper()
	f, err := os.Open(filepath.Join("..", "..", ".deps", "data", "breast_cancer.csv"))
	if err != nil {
		b.Skipf("no dataset (scripts/install-data.sh extracts it): %v", err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = -1 // the header line is shorter
	recs, err := cr.ReadAll()
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range recs[1:] {
		row := make([]float64, len(r)-1)
		for j := range row {
			if row[j], err = strconv.ParseFloat(r[j], 64); err != nil {
				b.Fatal(err)
			}
		}
		if r[len(r)-1] == "0" {
			malignant = append(malignant, row)
		} else {
			benign = append(benign, row)
		}
	}
	return benign, malignant
}

// BenchmarkStreamBreastCancer runs the monitor on a real, skewed dataset
// (Wisconsin diagnostic breast cancer, 30 features): the reference
// summarises the benign rows; each seeded stream draws benign rows (with
// replacement) for 5,000 rows, then switches to malignant rows (abrupt
// class switch) or mixes 10% malignant rows in. It reports the delay to the
// monitor's first alarm and the false alarms per 10,000 rows on the benign
// prefixes (100,000 rows per row of the table), for the streaming
// detector (rank scale at the defaults, moments scale, rank scale tuned
// for a σ/2 shift) and the windowed detectors alone.
func BenchmarkStreamBreastCancer(b *testing.B) {
	const (
		streams   = 20
		preChange = 5000
		after     = 2000
	)
	benign, malignant := loadBreastCancer(b)
	features := len(benign[0])
	names := make([]string, features)
	x := make([]float64, 0, len(benign)*features)
	for j := range names {
		names[j] = fmt.Sprintf("f%d", j)
	}
	for _, r := range benign {
		x = append(x, r...)
	}
	ref, err := SummarizeColumns(names, x, SummaryOptions{})
	if err != nil {
		b.Fatal(err)
	}
	impls := []struct {
		name string
		cfg  Config
	}{
		{"strata", Config{Stream: &StreamConfig{}}},
		{"stream-moments", Config{Stream: &StreamConfig{Scale: ScaleMoments}}},
		{"stream-shift-half", Config{Stream: &StreamConfig{Shift: 0.5}}},
		{"windowed-ks", Config{Detector: DetectorKS}},
		{"windowed-psi", Config{Detector: DetectorPSI}},
		{"windowed-wasserstein", Config{Detector: DetectorWasserstein}},
	}
	for _, mix := range []struct {
		name string
		p    float64 // share of malignant rows after the change
	}{{"class-switch", 1}, {"mixed-10pct", 0.1}} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("shift=%s/impl=%s", mix.name, impl.name), func(b *testing.B) {
				var delays []float64
				var falseAlarms, missed int
				for range b.N {
					delays, falseAlarms, missed = delays[:0], 0, 0
					for s := range streams {
						m, err := New(ref, impl.cfg)
						if err != nil {
							b.Fatal(err)
						}
						rng := rand.New(rand.NewPCG(uint64(700+s), 19))
						detected := false
						for i := 0; i < preChange+after && !detected; i++ {
							row := benign[rng.IntN(len(benign))]
							if i >= preChange && rng.Float64() < mix.p {
								row = malignant[rng.IntN(len(malignant))]
							}
							ev, err := m.Observe(row)
							if err != nil {
								b.Fatal(err)
							}
							if ev == nil || ev.Kind != EventAlarm {
								continue
							}
							if i < preChange {
								falseAlarms++
								continue
							}
							delays = append(delays, float64(i-preChange+1))
							detected = true
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
