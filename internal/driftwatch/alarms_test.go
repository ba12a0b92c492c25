package driftwatch

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/internal/events"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// scanStore is a catalog store whose change notifications the test
// sends: the event stream scans once per kick, whatever was written
// since, as a scan interval that the writes fall within.
type scanStore struct {
	*catalogtest.Store
	mu     sync.Mutex
	ch     chan struct{}
	listed map[string]int // prefix → List calls
}

func newScanStore() *scanStore {
	return &scanStore{Store: catalogtest.NewStore(), ch: make(chan struct{}), listed: map[string]int{}}
}

func (s *scanStore) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *scanStore) List(prefix string) []mesh.Entry {
	s.mu.Lock()
	s.listed[prefix]++
	s.mu.Unlock()
	return s.Store.List(prefix)
}

// kick wakes the event stream for one scan.
func (s *scanStore) kick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

func (s *scanStore) lists(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed[prefix]
}

// watchFixture is a watch over a model m@1 with inputs x and y, N(0, 1) in
// its training reference, served for InferenceService/s with the given
// drift: settings.
func watchFixture(t *testing.T, store catalog.Store, driftSpec string, reg prometheus.Registerer) (*Watch, *catalog.Catalog) {
	t.Helper()
	cat := catalog.New(store, nil)
	rng := rand.New(rand.NewPCG(3, 3))
	cols := make([]float64, 2*5000)
	for i := range cols {
		cols[i] = rng.NormFloat64()
	}
	ref, err := drift.SummarizeColumns([]string{"x", "y"}, cols, drift.SummaryOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	arts := manifests{"m@1": {Kind: storage.KindModel, Name: "m", Version: "1", Metadata: map[string]string{catalog.MetaReference: string(raw)}}}
	d := New(Config{Name: "edge-a-1", Site: "edge-a", Catalog: cat, Artifacts: arts, Registerer: reg})
	src := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n  drift: " + driftSpec + "\n"
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Source: src, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	d.Sync(map[string]Model{"InferenceService/s": {Name: "m", Version: "1"}})
	if w := d.mon["m"]; w == nil || w.rec.Error != "" {
		t.Fatalf("monitor not started: %+v", w)
	}
	return d, cat
}

// rows feeds n rows (x shifted by shift standard deviations) through the
// watch's queue path, publishing as it does, and stops early once stop
// says so. It returns the rows fed.
func rows(d *Watch, rng *rand.Rand, n int, shift float64, stop func(*watched) bool) int {
	for i := range n {
		d.feed(driftRow{"m", infer.Sample{Version: "1", Inputs: []float64{rng.NormFloat64() + shift, rng.NormFloat64()}}})
		if stop != nil && stop(d.mon["m"]) {
			return i + 1
		}
	}
	return n
}

func logKinds(l catalog.DriftLog) []string {
	var k []string
	for _, e := range l.Entries {
		k = append(k, e.Kind)
	}
	return k
}

// TestShortAlarmIsTwoEvents: an alarm that clears before the event stream
// looks again is still two events, drift.alarm then drift.clear: each is
// an entry of the drift log, not a difference between two looks at the
// drift record (which shows no alarm either time).
func TestShortAlarmIsTwoEvents(t *testing.T) {
	t.Parallel()
	store := newScanStore()
	d, cat := watchFixture(t, store, "{detector: ks, window: 100, stream: {}}", nil)
	rng := rand.New(rand.NewPCG(11, 11))
	// Judged, no drift: the baseline.
	rows(d, rng, 300, 0, nil)
	if st := d.mon["m"].rec.State; st != catalog.DriftOK {
		t.Fatalf("state %q after 300 unshifted rows, want ok", st)
	}
	st := events.New(cat, nil)
	_, ch, done := st.Subscribe(0)
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.Run(ctx)
	// Bounded poll: the baseline scan has read the drift logs once the
	// stream listed them; what is written after is news.
	for deadline := time.Now().Add(10 * time.Second); store.lists("drift-log/") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the event stream took no baseline")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A short 3σ shift of x, then unshifted rows until the alarm clears:
	// all between two scans.
	if n := rows(d, rng, 100, 3, func(w *watched) bool { return w.rec.Alarmed }); n == 100 {
		t.Fatal("no alarm within 100 shifted rows")
	}
	if n := rows(d, rng, 2000, 0, func(w *watched) bool { return !w.rec.Alarmed }); n == 2000 {
		t.Fatal("the alarm did not clear within 2000 unshifted rows")
	}
	rec, err := cat.Drift.Value("InferenceService/s/edge-a-1")
	if err != nil || rec.Alarmed || rec.State != catalog.DriftOK {
		t.Fatalf("drift record %+v (%v): want ok, as before the shift", rec, err)
	}
	store.kick()
	var got []events.Event
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case ev := <-ch:
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("events %+v, want drift.alarm and drift.clear", got)
		}
	}
	if got[0].Type != "drift.alarm" || got[1].Type != "drift.clear" {
		t.Fatalf("events %+v, want drift.alarm then drift.clear", got)
	}
	if !strings.Contains(got[0].Message, "cusum x=") || !strings.Contains(got[1].Message, "stream") {
		t.Errorf("messages %q, %q: want the alarm's cusum on x, the clear by the stream", got[0].Message, got[1].Message)
	}
	l, err := cat.DriftLogs.Value("InferenceService/s/edge-a-1")
	if err != nil {
		t.Fatal(err)
	}
	if k := strings.Join(logKinds(l), " "); k != "warming ok alarm clear" {
		t.Errorf("drift log %s, want warming ok alarm clear", k)
	}
	for i, e := range l.Entries {
		if e.Seq != uint64(i+1) {
			t.Errorf("entry %d has seq %d", i, e.Seq)
		}
	}
	if c := l.Entries[len(l.Entries)-1]; c.Source != string(drift.SourceStream) {
		t.Errorf("clear %+v: want it by the stream, which raised the alarm", c)
	}
}

// TestAlarmKeepsCrossingStatistic: the statistic an alarm reports is the
// one that crossed, as it crossed: the streaming side restarts from 0 on
// that very row, and reading it then showed cusum x=0.
func TestAlarmKeepsCrossingStatistic(t *testing.T) {
	t.Parallel()
	d, cat := watchFixture(t, catalogtest.NewStore(), "{detector: ks, window: 100, stream: {}}", nil)
	rng := rand.New(rand.NewPCG(12, 12))
	rows(d, rng, 150, 0, nil)
	if n := rows(d, rng, 100, 3, func(w *watched) bool { return w.rec.Alarmed }); n == 100 {
		t.Fatal("no alarm within 100 shifted rows")
	}
	w := d.mon["m"]
	if up := w.mon.Stream()[0].Upper; up != 0 {
		t.Fatalf("x's upper side %v after its alarm, want it restarted", up)
	}
	l, err := cat.DriftLogs.Value("InferenceService/s/edge-a-1")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Entries[len(l.Entries)-1]
	if a.Kind != catalog.DriftAlarm || a.Detector != "cusum" || a.Feature != "x" || !(a.Statistic > 1 && a.Statistic < 2) {
		t.Fatalf("alarm entry %+v: want cusum on x, just over its threshold (1…2)", a)
	}
	rec, err := cat.Drift.Value("InferenceService/s/edge-a-1")
	if err != nil {
		t.Fatal(err)
	}
	if f, det, stat := rec.AlarmCause(); f != "x" || det != "cusum" || stat != a.Statistic {
		t.Errorf("record's alarm cause %s %s=%v, want cusum x=%v", det, f, stat, a.Statistic)
	}
}

// TestFreshMonitorWarms: a fresh monitor fed drifted rows from the first
// is warming, never ok (nor clear), until it alarms.
func TestFreshMonitorWarms(t *testing.T) {
	t.Parallel()
	d, cat := watchFixture(t, catalogtest.NewStore(), "{detector: psi, window: 100}", nil)
	d.publish(true)
	rec, err := cat.Drift.Value("InferenceService/s/edge-a-1")
	if err != nil || rec.State != catalog.DriftWarming || rec.Alarmed {
		t.Fatalf("fresh record %+v (%v), want warming", rec, err)
	}
	rng := rand.New(rand.NewPCG(13, 13))
	n := rows(d, rng, 1000, 2, func(w *watched) bool {
		if !w.rec.Alarmed && w.rec.State != catalog.DriftWarming {
			t.Fatalf("state %q after %d drifted rows before any alarm, want warming", w.rec.State, w.rec.Seen)
		}
		return w.rec.Alarmed
	})
	if n == 1000 {
		t.Fatal("no alarm within 1000 drifted rows")
	}
	if st := d.mon["m"].rec.State; st != catalog.DriftAlarm {
		t.Fatalf("state %q after the alarm", st)
	}
	l, err := cat.DriftLogs.Value("InferenceService/s/edge-a-1")
	if err != nil {
		t.Fatal(err)
	}
	if k := strings.Join(logKinds(l), " "); k != "warming alarm" {
		t.Errorf("drift log %s, want warming alarm", k)
	}
	if w := l.Entries[0]; w.Window != 100 || w.Version != "1" {
		t.Errorf("warming entry %+v: want the window it needs, version 1", w)
	}
}

// TestInvalidRowsDropped: a row with a NaN or infinite value is dropped and
// counted; the monitor goes on with the next rows, and alarms on them.
func TestInvalidRowsDropped(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"{detector: psi, window: 100}", "{detector: psi, window: 100, reference: first, features: [x, y]}"} {
		reg := prometheus.NewRegistry()
		d, _ := watchFixture(t, catalogtest.NewStore(), spec, reg)
		rng := rand.New(rand.NewPCG(14, 14))
		rows(d, rng, 50, 0, nil)
		for _, bad := range [][]float64{{math.NaN(), 0}, {0, math.Inf(1)}, {math.Inf(-1), math.NaN()}} {
			d.feed(driftRow{"m", infer.Sample{Version: "1", Inputs: bad}})
		}
		w := d.mon["m"]
		if w.rec.Error != "" || w.rec.Invalid != 3 || w.rec.Seen != 50 {
			t.Fatalf("%s: after 3 bad rows: error %q, invalid %d, seen %d; want none, 3, 50", spec, w.rec.Error, w.rec.Invalid, w.rec.Seen)
		}
		if n := rows(d, rng, 2000, 2, func(w *watched) bool { return w.rec.Alarmed }); n == 2000 {
			t.Fatalf("%s: no alarm on drifted rows after the bad ones (seen %d, error %q)", spec, d.mon["m"].rec.Seen, d.mon["m"].rec.Error)
		}
		if got := meshtest.Scrape(t, reg)["strata_drift_rows_dropped_total"]; got != 3 {
			t.Errorf("%s: strata_drift_rows_dropped_total %v, want 3", spec, got)
		}
		d.publish(true)
		rec, err := d.cfg.Catalog.Drift.Value("InferenceService/s/edge-a-1")
		if err != nil || rec.Invalid != 3 {
			t.Errorf("%s: published record %+v (%v), want invalid 3", spec, rec, err)
		}
	}
}
