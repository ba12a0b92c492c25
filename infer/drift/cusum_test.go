package drift

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCUSUMThresholdInvertsARL(t *testing.T) {
	for _, tc := range []struct{ arl, k float64 }{
		{100, 0.5}, {1e4, 0.5}, {6e6, 0.5}, {1e5, 0.25}, {1e5, 1}, {1e3, 0.05},
	} {
		h := CUSUMThreshold(tc.arl, tc.k)
		if got := CUSUMARL(-tc.k, h); math.Abs(got/tc.arl-1) > 1e-6 {
			t.Errorf("arl %g k %g: h %g gives ARL %g", tc.arl, tc.k, h, got)
		}
		if h2 := CUSUMThreshold(10*tc.arl, tc.k); !(h2 > h) {
			t.Errorf("arl %g k %g: h %g does not grow with the ARL (%g)", tc.arl, tc.k, h, h2)
		}
	}
	// Table 5.1-style values: k = 0.5, h = 4 gives an ARL near 336 under
	// no drift and near 8.4 after a 1σ shift (Siegmund's approximation).
	if got := CUSUMARL(-0.5, 4); math.Abs(got-336) > 3 {
		t.Errorf("ARL(−0.5, 4) = %g, want ≈ 336", got)
	}
	if got := CUSUMARL(0.5, 4); math.Abs(got-8.38) > 0.05 {
		t.Errorf("ARL(0.5, 4) = %g, want ≈ 8.38", got)
	}
	if got := CUSUMThreshold(1, 0.5); got != 0 {
		t.Errorf("an ARL of 1 needs threshold 0, got %g", got)
	}
}

// exactReference is a reference N(mean, std) with a huge Count (so the
// estimation margin vanishes) and a sample of the normal quantiles.
func exactReference(n int) FeatureReference {
	s := make([]float64, n)
	for i := range s {
		s[i] = normalQuantile((float64(i) + 0.5) / float64(n))
	}
	return FeatureReference{Name: "x", Count: 1 << 40, Mean: 0, Std: 1, Edges: []float64{0}, Proportions: []float64{0.5, 0.5}, Sample: s}
}

// TestCUSUMRunLengthCalibrated checks that under no drift the mean gap
// between alarms is the configured ARL (within sampling error) when the
// reference is exact, for Gaussian values: Siegmund's approximation for
// the mean sides alone, and at least the ARL (Lorden's bound for the
// spread side makes it conservative) with all three sides.
func TestCUSUMRunLengthCalibrated(t *testing.T) {
	for _, tc := range []struct {
		name     string
		scale    Scale
		spread   float64
		arl      float64
		features int
		atMost   float64 // the measured gap's upper bound, in ARLs
	}{
		{"moments/arl=500", ScaleMoments, 1, 500, 1, 1.25},
		{"moments/arl=300/features=4", ScaleMoments, 1, 300, 4, 1.25},
		{"rank/arl=500", ScaleRank, 1, 500, 1, 1.25},
		{"rank/spread/arl=500", ScaleRank, 0, 500, 1, 3},
		{"moments/spread/arl=2000", ScaleMoments, 0, 2000, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCUSUM(exactReference(100000), StreamConfig{ARL: tc.arl, Scale: tc.scale, Spread: tc.spread}, tc.features)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(21, 21))
			const alarms = 400
			var rows int
			for n := 0; n < alarms; rows++ {
				if c.Observe(rng.NormFloat64()) {
					n++
				}
			}
			// One of the model's features: its mean gap is features·ARL.
			want := tc.arl * float64(tc.features)
			got := float64(rows) / alarms
			// 400 roughly exponential gaps: a 5% standard error; Siegmund's
			// approximation is good to a few percent at these thresholds.
			if got < 0.8*want || got > tc.atMost*want {
				t.Fatalf("mean gap between false alarms %.0f rows, want %.0f (h %.3f)", got, want, c.Threshold())
			}
			t.Logf("mean gap %.0f rows, want %.0f", got, want)
		})
	}
}

func TestCUSUMStandardizeRank(t *testing.T) {
	ref := FeatureReference{Name: "x", Count: 4, Std: 1, Edges: []float64{2}, Proportions: []float64{0.5, 0.5}, Sample: []float64{1, 2, 2, 3}}
	c, err := NewCUSUM(ref, StreamConfig{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		x    float64
		rank float64 // mid-rank among the 4 sample values
	}{{0, 0}, {1, 0.5}, {1.5, 1}, {2, 2}, {2.5, 3}, {3, 3.5}, {9, 4}} {
		want := normalQuantile((tc.rank + 0.5) / 5)
		if got := c.Standardize(tc.x); math.Abs(got-want) > 1e-12 {
			t.Errorf("x %g: z %g, want %g (rank %g)", tc.x, got, want, tc.rank)
		}
	}
	if got := c.Standardize(2); math.Abs(got) > 1e-12 {
		t.Errorf("the median scores %g, want 0", got)
	}
	// A binary feature: runs of ties of every length.
	for zeros := 0; zeros <= 9; zeros++ {
		s := make([]float64, 9)
		for i := zeros; i < 9; i++ {
			s[i] = 1
		}
		ref := FeatureReference{Name: "b", Count: 9, Std: 0.5, Edges: []float64{0}, Proportions: []float64{0.5, 0.5}, Sample: s}
		c, err := NewCUSUM(ref, StreamConfig{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range []float64{0, 1} {
			lo, hi := 0, 0
			for _, v := range s {
				if v < x {
					lo++
				}
				if v <= x {
					hi++
				}
			}
			want := normalQuantile((float64(lo+hi)/2 + 0.5) / 10)
			if got := c.Standardize(x); math.Abs(got-want) > 1e-12 {
				t.Errorf("%d zeros, x %g: z %g, want %g", zeros, x, got, want)
			}
		}
	}
}

// TestCUSUMDetectsShift checks the delay to abrupt shifts over seeded
// streams: the median within the targets and every stream within a bound.
func TestCUSUMDetectsShift(t *testing.T) {
	ref := testReference(t, 3, 20000, 1)
	for _, scale := range []Scale{ScaleRank, ScaleMoments} {
		for _, tc := range []struct {
			name          string
			delta         float64
			median, worst int
		}{
			{name: "up-2sd", delta: 2, median: 30, worst: 60},
			{name: "down-2sd", delta: -2, median: 30, worst: 60},
			{name: "up-1sd", delta: 1, median: 100, worst: 200},
			{name: "down-1sd", delta: -1, median: 100, worst: 200},
		} {
			t.Run(string(scale)+"/"+tc.name, func(t *testing.T) {
				var delays []int
				for s := range 25 {
					c, err := NewCUSUM(ref.Features[0], StreamConfig{Scale: scale}, 3)
					if err != nil {
						t.Fatal(err)
					}
					rng := rand.New(rand.NewPCG(uint64(30+s), 3))
					const at = 2000
					delay := -1
					for i := 0; i < at+1000; i++ {
						x := rng.NormFloat64()
						if i >= at {
							x += tc.delta
						}
						if c.Observe(x) {
							if i < at {
								t.Fatalf("stream %d: false alarm at row %d", s, i)
							}
							delay = i - at + 1
							break
						}
					}
					if delay < 0 || delay > tc.worst {
						t.Fatalf("stream %d: delay %d, want at most %d (h %.2f)", s, delay, tc.worst, c.Threshold())
					}
					delays = append(delays, delay)
				}
				slices.Sort(delays)
				if med := delays[len(delays)/2]; med > tc.median {
					t.Fatalf("median delay %d, want at most %d (delays %v)", med, tc.median, delays)
				}
				t.Logf("delays %v", delays)
			})
		}
	}
}

// TestMonitorStreamQuiet runs the monitor with its streaming detector on
// seeded stationary streams, Gaussian and skewed (log-normal, summarised
// from its own reference draw): no streaming alarm in 100,000 rows at the
// default ARL of 10⁶.
func TestMonitorStreamQuiet(t *testing.T) {
	for _, tc := range []struct {
		name string
		draw func(*rand.Rand) float64
	}{
		{"normal", (*rand.Rand).NormFloat64},
		{"lognormal", func(r *rand.Rand) float64 { return math.Exp(r.NormFloat64()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const features = 4
			rng := rand.New(rand.NewPCG(41, 41))
			x := make([]float64, features*20000)
			for i := range x {
				x[i] = tc.draw(rng)
			}
			ref, err := SummarizeColumns([]string{"a", "b", "c", "d"}, x, SummaryOptions{Seed: 41})
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(ref, Config{Stream: &StreamConfig{}})
			if err != nil {
				t.Fatal(err)
			}
			row := make([]float64, features)
			for i := range 100000 {
				for j := range row {
					row[j] = tc.draw(rng)
				}
				ev, err := m.Observe(row)
				if err != nil {
					t.Fatal(err)
				}
				// The windowed detector may alarm on its own (at its
				// own rate); only streaming alarms count here.
				if ev != nil && ev.Source == SourceStream {
					t.Fatalf("false streaming alarm at row %d: %+v", i, ev.Stream)
				}
			}
			for _, s := range m.Stream() {
				if s.Alarms != 0 || s.Upper > s.Threshold || s.Lower > s.Threshold {
					t.Fatalf("stream scores %+v", m.Stream())
				}
			}
		})
	}
}

// TestMonitorStreamAlarm checks that a monitor with the streaming detector
// alarms within tens of rows of an abrupt shift, names the shifted feature,
// holds the alarm while the shift lasts and clears after it ends.
func TestMonitorStreamAlarm(t *testing.T) {
	ref := testReference(t, 3, 20000, 1)
	for _, tc := range []struct {
		name  string
		shift shift
		bound int
	}{
		{"2sd", shift{at: 3000, delta: 2, feature: 1, until: 6000}, 30},
		{"1sd", shift{at: 3000, delta: 1, feature: 2, until: 6000}, 100},
		{"down-2sd", shift{at: 300, delta: -2, feature: 0, until: 3000}, 30}, // before the window fills
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(ref, Config{Model: "m", Stream: &StreamConfig{}})
			if err != nil {
				t.Fatal(err)
			}
			cfg := m.Config()
			events, at := run(t, m, 9000, tc.shift, 2, 0)
			if len(events) != 2 || events[0].Kind != EventAlarm || events[1].Kind != EventClear {
				t.Fatalf("want alarm then clear, got %v at %v", kinds(events), at)
			}
			ev := events[0]
			if delay := at[0] - tc.shift.at + 1; delay < 1 || delay > tc.bound {
				t.Fatalf("alarm %d rows after the change, want 1…%d", delay, tc.bound)
			}
			if ev.Source != SourceStream || ev.Model != "m" || ev.Samples != int64(at[0]+1) || len(ev.Stream) != 3 {
				t.Fatalf("event %+v", ev)
			}
			for j, s := range ev.Stream {
				if want := j == tc.shift.feature; s.Drifted != want {
					t.Errorf("feature %s drifted=%v, want %v", s.Name, s.Drifted, want)
				}
				if j == tc.shift.feature && (s.Alarms != 1 || s.LastAlarm != ev.Samples || s.Side != wantSide(tc.shift.delta)) {
					t.Errorf("shifted feature's stream score %+v", s)
				}
			}
			// Cleared by the detector that raised it.
			if clr := at[1] - tc.shift.until; events[1].Source != SourceStream || clr < 0 || clr > cfg.Window+cfg.Every {
				t.Fatalf("cleared %d rows after the shift ended (source %s); want within %d", clr, events[1].Source, cfg.Window+cfg.Every)
			}
		})
	}
}

// TestMonitorStreamStateRoundTrip stops a monitor with the streaming
// detector mid-stream, persists and restores it: the events are those of
// an uninterrupted run.
func TestMonitorStreamStateRoundTrip(t *testing.T) {
	ref := testReference(t, 3, 5000, 9)
	s := shift{at: 3000, delta: 1.5, feature: 1, until: 6000}
	cfg := Config{Window: 300, Every: 50, Stream: &StreamConfig{ARL: 1e4}}
	whole, err := New(ref, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, wantAt := run(t, whole, 9000, s, 10, 0)
	if len(want) < 2 {
		t.Fatalf("scenario should alarm and clear, got %v", kinds(want))
	}
	for _, cut := range []int{1234, 3010, 4321} {
		first, err := New(ref, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, gotAt := run(t, first, cut, s, 10, 0)
		raw, err := json.Marshal(first.State())
		if err != nil {
			t.Fatal(err)
		}
		var st State
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		second, err := Restore(ref, st)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first.Stream(), second.Stream()); diff != "" {
			t.Fatalf("cut %d: stream scores (-before +after):\n%s", cut, diff)
		}
		more, moreAt := run(t, second, 9000-cut, s, 10, cut)
		got, gotAt = append(got, more...), append(gotAt, moreAt...)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("cut %d: events (-want +got):\n%s", cut, diff)
		}
		if diff := cmp.Diff(wantAt, gotAt); diff != "" {
			t.Fatalf("cut %d: event samples (-want +got):\n%s", cut, diff)
		}
	}
}

func TestStreamConfigRejects(t *testing.T) {
	ref := testReference(t, 2, 100, 1)
	for _, sc := range []StreamConfig{
		{ARL: 5}, {ARL: -1}, {ARL: math.Inf(1)}, {ARL: math.NaN()},
		{Shift: -1}, {Shift: 20}, {Scale: "zscore"},
	} {
		if _, err := New(ref, Config{Stream: &sc}); !errors.Is(err, ErrInvalid) {
			t.Errorf("stream config %+v: want ErrInvalid, got %v", sc, err)
		}
	}
	m, err := New(ref, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Stream() != nil || m.Config().Stream != nil {
		t.Fatal("the zero Config should leave the streaming detector off")
	}
	st := m.State()
	st.Config.Stream = &StreamConfig{}
	st.Stream = []StreamState{{}}
	if _, err := Restore(ref, st); !errors.Is(err, ErrInvalid) {
		t.Errorf("state with 1 streaming detector for 2 columns: want ErrInvalid, got %v", err)
	}
}

func wantSide(delta float64) Side {
	if delta < 0 {
		return SideDown
	}
	return SideUp
}

// TestCUSUMDetectsSpread checks the spread side: a minority of rows from
// another class mixed in, and a doubled variance, both with (nearly) the
// same mean, over seeded streams.
func TestCUSUMDetectsSpread(t *testing.T) {
	ref := testReference(t, 3, 20000, 1)
	for _, tc := range []struct {
		name          string
		draw          func(*rand.Rand) float64
		median, worst int
		spread        float64
	}{
		{name: "mixed-10pct-3sd", draw: func(r *rand.Rand) float64 {
			if r.Float64() < 0.1 {
				return r.NormFloat64() + 3
			}
			return r.NormFloat64()
		}, median: 600, worst: 2500},
		{name: "variance-x2", draw: func(r *rand.Rand) float64 { return math.Sqrt2 * r.NormFloat64() }, median: 200, worst: 600},
		// Without the spread side the variance change goes unseen far longer.
		{name: "variance-x2/spread-off", draw: func(r *rand.Rand) float64 { return math.Sqrt2 * r.NormFloat64() }, median: 5000, worst: 5000, spread: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var delays []int
			for s := range 25 {
				c, err := NewCUSUM(ref.Features[0], StreamConfig{Spread: tc.spread}, 3)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(60+s), 3))
				const at = 2000
				delay := 5000
				for i := 0; i < at+5000; i++ {
					x := rng.NormFloat64()
					if i >= at {
						x = tc.draw(rng)
					}
					if c.Observe(x) {
						if i < at {
							t.Fatalf("stream %d: false alarm at row %d", s, i)
						}
						delay = i - at + 1
						break
					}
				}
				if tc.spread == 1 {
					delays = append(delays, delay)
					continue
				}
				if delay > tc.worst {
					t.Fatalf("stream %d: delay %d, want at most %d", s, delay, tc.worst)
				}
				delays = append(delays, delay)
			}
			slices.Sort(delays)
			med := delays[len(delays)/2]
			if tc.spread == 1 {
				if med < 1000 {
					t.Fatalf("mean sides alone: median delay %d, want it slow (≥ 1000) for the spread side to matter", med)
				}
			} else if med > tc.median {
				t.Fatalf("median delay %d, want at most %d (delays %v)", med, tc.median, delays)
			}
			t.Logf("delays %v", delays)
		})
	}
}

// TestMonitorStreamAlarmHoldsUnderMixture: a minority of rows from another
// class (10% of one feature's rows, 3σ away) is caught by the streaming
// detector and not by the window. The alarm it raised is held while the
// mixture lasts (the windowed rule, which does not see the drift, no
// longer clears it between two streaming alarms) and clears by the
// streaming detector once the mixture ends.
func TestMonitorStreamAlarmHoldsUnderMixture(t *testing.T) {
	ref := testReference(t, 3, 20000, 1)
	const (
		streams = 10
		start   = 2000
		end     = start + 10000
	)
	flaps := 0
	for s := range streams {
		m, err := New(ref, Config{Stream: &StreamConfig{}})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(900+s), 3))
		row := make([]float64, 3)
		var kinds []EventKind
		var at []int
		for i := 0; i < end+2000; i++ {
			for j := range row {
				row[j] = rng.NormFloat64()
			}
			if i >= start && i < end && rng.Float64() < 0.1 {
				row[0] += 3
			}
			ev, err := m.Observe(row)
			if err != nil {
				t.Fatal(err)
			}
			if ev == nil {
				continue
			}
			kinds, at = append(kinds, ev.Kind), append(at, i)
			if ev.Kind == EventClear && i < end {
				flaps++
			}
			if ev.Kind == EventClear && ev.Source != SourceStream {
				t.Errorf("stream %d: a streaming alarm cleared by %s at row %d", s, ev.Source, i)
			}
		}
		if len(kinds) == 0 || kinds[0] != EventAlarm || at[0] < start {
			t.Fatalf("stream %d: events %v at %v, want a first alarm after row %d", s, kinds, at, start)
		}
		if m.Alarmed() {
			t.Errorf("stream %d: still alarmed 2000 rows after the mixture ended (events %v at %v)", s, kinds, at)
		}
	}
	// Measured on these seeds: 102 clears while the window cleared the
	// streaming alarm, 20 with the feature's sides held up to their
	// thresholds, 7 held up to twice them.
	t.Logf("%d clears during %d mixed rows", flaps, streams*(end-start))
	if flaps > streams {
		t.Errorf("%d clears during the mixture in %d streams of 10,000 mixed rows, want at most one per stream", flaps, streams)
	}
}

// TestCUSUMReportsCrossingStatistic: the statistic an alarm reports is the
// one that crossed the threshold, although that side restarts from 0 on
// the same row.
func TestCUSUMReportsCrossingStatistic(t *testing.T) {
	ref := testReference(t, 1, 5000, 3)
	c, err := NewCUSUM(ref.Features[0], StreamConfig{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if c.Observe(3) {
			up, _ := c.Statistics()
			if up != 0 {
				t.Fatalf("upper side %v after its alarm, want the restart at 0", up)
			}
			if x := c.Crossed(); !(x > 1 && x < 1.5) {
				t.Fatalf("crossed %v at row %d, want just over 1 (the statistic over its threshold)", x, i)
			}
			if !c.Holding() {
				t.Fatal("not holding right after an alarm")
			}
			return
		}
	}
	t.Fatal("no alarm on a 3σ shift")
}

// TestMonitorWarmsUpBeforeJudging: a fresh monitor has not judged until
// its first evaluation that is not over, or its alarm; traffic drifted from
// the first row never makes it look clear.
func TestMonitorWarmsUpBeforeJudging(t *testing.T) {
	ref := testReference(t, 2, 20000, 5)
	for _, tc := range []struct {
		name   string
		delta  float64
		judged int // rows after which it has judged
	}{
		{"clean", 0, 500},           // the first evaluation, at a full window
		{"drifted", 2, 500 + 2*100}, // the third over evaluation alarms
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(ref, Config{Detector: DetectorPSI})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(8, 8))
			row := make([]float64, 2)
			for i := 1; i <= 1000; i++ {
				row[0], row[1] = rng.NormFloat64()+tc.delta, rng.NormFloat64()
				if _, err := m.Observe(row); err != nil {
					t.Fatal(err)
				}
				if want := i >= tc.judged; m.Judged() != want {
					t.Fatalf("after %d rows Judged() = %v, want %v (alarmed %v)", i, m.Judged(), want, m.Alarmed())
				}
				if !m.Judged() && m.Alarmed() {
					t.Fatalf("alarmed after %d rows but not judged", i)
				}
			}
			if tc.delta != 0 && !m.Alarmed() {
				t.Fatal("drifted stream did not alarm")
			}
		})
	}
}
