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

func TestMonitorDetectsShifts(t *testing.T) {
	ref := testReference(t, 3, 20000, 1)
	for _, det := range Detectors {
		for _, tc := range []struct {
			name  string
			shift shift
		}{
			{name: "abrupt", shift: shift{at: 3000, delta: 1, feature: 1}},
			{name: "gradual", shift: shift{at: 3000, ramp: 1000, delta: 1, feature: 2}},
		} {
			t.Run(string(det)+"/"+tc.name, func(t *testing.T) {
				m, err := New(ref, Config{Model: "m", Version: "v3", Site: "edge-a", Detector: det})
				if err != nil {
					t.Fatal(err)
				}
				cfg := m.Config()
				events, at := run(t, m, 8000, tc.shift, 2, 0)
				if len(events) == 0 || events[0].Kind != EventAlarm {
					t.Fatalf("want an alarm, got %d events", len(events))
				}
				delay := at[0] - tc.shift.at
				bound := tc.shift.ramp + cfg.Window + (cfg.Consecutive+1)*cfg.Every
				if delay < 0 || delay > bound {
					t.Fatalf("alarm at sample %d: delay %d outside [0, %d]", at[0], delay, bound)
				}
				t.Logf("alarm %d samples after the change point (bound %d)", delay, bound)
				ev := events[0]
				if ev.Model != "m" || ev.Version != "v3" || ev.Site != "edge-a" || ev.Detector != det || ev.Samples != int64(at[0]+1) {
					t.Fatalf("event labels %+v", ev)
				}
				for j, s := range ev.Scores {
					if want := j == tc.shift.feature; s.Drifted != want {
						t.Errorf("feature %s drifted=%v, want %v (scores %+v)", s.Name, s.Drifted, want, ev.Scores)
					}
				}
				if len(events) != 1 {
					t.Fatalf("want the alarm to hold while the shift lasts, got %d events", len(events))
				}
			})
		}
	}
}

func TestMonitorNoAlarmWithoutShift(t *testing.T) {
	ref := testReference(t, 4, 20000, 3)
	for _, det := range Detectors {
		t.Run(string(det), func(t *testing.T) {
			m, err := New(ref, Config{Detector: det})
			if err != nil {
				t.Fatal(err)
			}
			events, at := run(t, m, 20000, shift{}, 4, 0)
			if len(events) != 0 {
				t.Fatalf("false alarm at samples %v: %+v", at, events[0])
			}
			if _, ok := m.Last(); !ok || m.Seen() != 20000 {
				t.Fatalf("want evaluations over 20000 samples, seen %d", m.Seen())
			}
		})
	}
}

func TestMonitorClearsWithHysteresis(t *testing.T) {
	ref := testReference(t, 2, 20000, 5)
	for _, det := range Detectors {
		t.Run(string(det), func(t *testing.T) {
			m, err := New(ref, Config{Detector: det})
			if err != nil {
				t.Fatal(err)
			}
			cfg := m.Config()
			s := shift{at: 2000, delta: 1.5, feature: 0, until: 4000}
			events, at := run(t, m, 8000, s, 6, 0)
			if len(events) != 2 || events[0].Kind != EventAlarm || events[1].Kind != EventClear {
				t.Fatalf("want alarm then clear, got %v at %v", kinds(events), at)
			}
			if delay := at[1] - s.until; delay < 0 || delay > cfg.Window+cfg.Every {
				t.Fatalf("cleared %d samples after the shift ended; want within %d", delay, cfg.Window+cfg.Every)
			}
			if m.Alarmed() {
				t.Fatal("still alarmed after clearing")
			}
		})
	}
}

func kinds(evs []*Event) []EventKind {
	var k []EventKind
	for _, e := range evs {
		k = append(k, e.Kind)
	}
	return k
}

func TestMonitorPrediction(t *testing.T) {
	ref := testReference(t, 3, 20000, 7)
	p := ref.Features[0]
	p.Name = "prediction"
	ref.Prediction = &p
	m, err := New(ref, Config{Prediction: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Width() != 4 {
		t.Fatalf("width %d, want 4", m.Width())
	}
	events, _ := run(t, m, 5000, shift{at: 1000, delta: 1, feature: 3}, 8, 0)
	if len(events) != 1 {
		t.Fatalf("want one alarm, got %v", kinds(events))
	}
	for _, s := range events[0].Scores {
		if s.Drifted != (s.Name == "prediction") {
			t.Fatalf("scores %+v: want only the prediction drifted", events[0].Scores)
		}
	}
}

func TestMonitorStateRoundTrip(t *testing.T) {
	ref := testReference(t, 3, 5000, 9)
	s := shift{at: 3000, ramp: 500, delta: 1.2, feature: 1, until: 6000}
	for _, det := range Detectors {
		t.Run(string(det), func(t *testing.T) {
			cfg := Config{Detector: det, Window: 300, Every: 50}
			whole, err := New(ref, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want, wantAt := run(t, whole, 9000, s, 10, 0)
			if len(want) < 2 {
				t.Fatalf("scenario should alarm and clear, got %v", kinds(want))
			}
			// Stop mid-alarm, persist, restore, go on.
			first, err := New(ref, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cut := 4321
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
			more, moreAt := run(t, second, 9000-cut, s, 10, cut)
			got, gotAt = append(got, more...), append(gotAt, moreAt...)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantAt, gotAt); diff != "" {
				t.Fatalf("event samples (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMonitorRejects(t *testing.T) {
	ref := testReference(t, 2, 100, 1)
	m, err := New(ref, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range [][]float64{{1}, {1, 2, 3}, {math.NaN(), 1}, {math.Inf(1), 0}} {
		if _, err := m.Observe(row); !errors.Is(err, ErrInvalid) {
			t.Errorf("row %v: want ErrInvalid, got %v", row, err)
		}
	}
	if _, err := m.ObserveFloat32([]float32{float32(math.NaN()), 0}); !errors.Is(err, ErrInvalid) {
		t.Errorf("float32 NaN: want ErrInvalid, got %v", err)
	}
	if m.Seen() != 0 {
		t.Fatalf("rejected rows were counted: %d", m.Seen())
	}
	bad := []Config{
		{Detector: "chi2"},
		{Window: 1},
		{Every: -1},
		{Detector: DetectorKS, Alarm: 0.1, Clear: 0.05},
		{Detector: DetectorPSI, Alarm: 0.1, Clear: 0.2},
		{Correction: "holm"},
		{Prediction: true},
	}
	for _, cfg := range bad {
		if _, err := New(ref, cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("config %+v: want ErrInvalid, got %v", cfg, err)
		}
	}
	if _, err := New(Reference{}, Config{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty reference: want ErrInvalid, got %v", err)
	}
}

func TestReplaceSortedKeepsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	const w = 64
	ring := make([]float64, 0, w)
	var sorted []float64
	for i := 0; i < 5000; i++ {
		v := float64(rng.IntN(20)) // many ties
		if len(ring) < w {
			ring = append(ring, v)
			sorted = insertSorted(sorted, v)
		} else {
			replaceSorted(sorted, ring[i%w], v)
			ring[i%w] = v
		}
		want := slices.Clone(ring)
		slices.Sort(want)
		if diff := cmp.Diff(want, sorted); diff != "" {
			t.Fatalf("step %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestObserveFloat32MatchesFloat64(t *testing.T) {
	ref := testReference(t, 2, 2000, 12)
	a, err := New(ref, Config{Window: 100, Every: 10})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(ref, Config{Window: 100, Every: 10})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(13, 13))
	for i := 0; i < 2000; i++ {
		row := []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64() + float64(i/1000)*2)}
		ea, err := a.ObserveFloat32(row)
		if err != nil {
			t.Fatal(err)
		}
		eb, err := b.Observe([]float64{float64(row[0]), float64(row[1])})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(eb, ea); diff != "" {
			t.Fatalf("row %d (-float64 +float32):\n%s", i, diff)
		}
	}
	if !a.Alarmed() {
		t.Fatal("the shifted second half should have raised an alarm")
	}
}
