package driftwatch

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// TestDriftMetrics drives a KS monitor with the streaming detector on, by
// reference: first, through a shift of one feature and back, twice, and
// scrapes the series after each phase. Nothing is published in between:
// each alarm is counted as it fires, also one that cleared before any
// publish.
func TestDriftMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	cat := catalog.New(catalogtest.NewStore(), nil)
	arts := manifests{}
	for _, v := range []string{"1", "2", "3", "4", "5"} {
		arts["m@"+v] = storage.Manifest{Kind: storage.KindModel, Name: "m", Version: v, Metadata: map[string]string{catalog.MetaFeatures: "x,y"}}
	}
	d := New(Config{Name: "edge-a-1", Site: "edge-a", Catalog: cat, Artifacts: arts, Registerer: reg})
	src := "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n  drift: {detector: ks, window: 100, reference: first, stream: {}}\n"
	if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Source: src, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	d.Sync(map[string]Model{"InferenceService/s": {Name: "m", Version: "1"}})

	rng := rand.New(rand.NewPCG(35, 1))
	fed := 0
	// feed sends n rows with x shifted by shift standard deviations and
	// returns the kinds of the events they raised, in order.
	feed := func(version string, n int, shift float64) (events []string) {
		t.Helper()
		for range n {
			w := d.mon["m"]
			before := w.rec.Alarmed
			d.observe(driftRow{"m", infer.Sample{Version: version, Inputs: []float64{rng.NormFloat64() + shift, rng.NormFloat64()}}})
			if w.rec.Error != "" {
				t.Fatalf("monitor error: %s", w.rec.Error)
			}
			if after := w.rec.Alarmed; after != before {
				events = append(events, map[bool]string{true: "alarm", false: "clear"}[after])
			}
			fed++
		}
		return events
	}
	const (
		rows     = `strata_drift_rows_total{model="m",version="1"}`
		alarm    = `strata_drift_alarm{model="m",version="1"}`
		stream   = `strata_drift_alarms_total{model="m",source="stream",version="1"}`
		window   = `strata_drift_alarms_total{model="m",source="window",version="1"}`
		ksX      = `{detector="ks",feature="x",model="m",version="1"}`
		ksY      = `{detector="ks",feature="y",model="m",version="1"}`
		cusumX   = `{detector="cusum",feature="x",model="m",version="1"}`
		spreadY  = `{detector="cusum_spread",feature="y",model="m",version="1"}`
		dropped  = `strata_drift_rows_dropped_total`
		statistc = "strata_drift_statistic"
		thresh   = "strata_drift_threshold"
	)

	// The reference (the first 100 rows) and 300 more from it: no alarm.
	if ev := feed("1", 400, 0); len(ev) != 0 {
		t.Fatalf("unshifted rows raised %v", ev)
	}
	m := meshtest.Scrape(t, reg)
	if m[rows] != 400 || m[alarm] != 0 || m[stream]+m[window] != 0 || m[dropped] != 0 {
		t.Errorf("unshifted: rows %v, alarm %v, alarms %v+%v, dropped %v; want 400, 0, 0, 0", m[rows], m[alarm], m[stream], m[window], m[dropped])
	}
	for _, k := range []string{ksX, ksY, cusumX, spreadY} {
		if _, ok := m[statistc+k]; !ok {
			t.Errorf("no %s%s", statistc, k)
		}
	}
	if m[thresh+ksX] != 0.001 || !(m[statistc+ksX] > m[thresh+ksX]) {
		t.Errorf("unshifted: ks p-value of x %v, threshold %v; want above 0.001", m[statistc+ksX], m[thresh+ksX])
	}
	if h := m[thresh+cusumX]; !(h > 0) || m[statistc+cusumX] >= h {
		t.Errorf("unshifted: cusum of x %v, threshold %v; want below a positive threshold", m[statistc+cusumX], h)
	}

	// x shifts by 3σ: the streaming detector alarms within rows, and the
	// windowed evaluations see the shift too.
	if ev := feed("1", 200, 3); len(ev) != 1 || ev[0] != "alarm" {
		t.Fatalf("shifted rows raised %v, want one alarm", ev)
	}
	m = meshtest.Scrape(t, reg)
	if m[alarm] != 1 || m[stream] != 1 || m[window] != 0 {
		t.Errorf("shifted: alarm %v, alarms stream %v window %v; want 1, 1, 0", m[alarm], m[stream], m[window])
	}
	if p := m[statistc+ksX]; !(p <= m[thresh+ksX]) || m[statistc+ksY] <= m[thresh+ksY] {
		t.Errorf("shifted: ks p-values x %v, y %v; want x at or below 0.001 and y above", p, m[statistc+ksY])
	}

	// Back, shifted again and back, with no publish or scrape between:
	// both alarms count. A streaming alarm clears by the streaming
	// detector, once the spread side's evidence has decayed: a few hundred
	// rows after a long shift, whatever the window.
	var ev []string
	ev = append(ev, feed("1", 500, 0)...)
	ev = append(ev, feed("1", 200, 3)...)
	ev = append(ev, feed("1", 500, 0)...)
	if strings.Join(ev, " ") != "clear alarm clear" {
		t.Fatalf("back, shifted, back raised %v, want clear alarm clear", ev)
	}
	m = meshtest.Scrape(t, reg)
	if m[rows] != float64(fed) || m[alarm] != 0 || m[stream]+m[window] != 2 {
		t.Errorf("after two alarms: rows %v (fed %d), alarm %v, alarms %v+%v; want every row, 0, 2", m[rows], fed, m[alarm], m[stream], m[window])
	}

	// Newer versions: the gauges follow the monitor; the counters of the
	// version least recently watched go past keepVersions.
	for _, v := range []string{"2", "3", "4"} {
		d.Sync(map[string]Model{"InferenceService/s": {Name: "m", Version: v}})
	}
	m = meshtest.Scrape(t, reg)
	if _, ok := m[alarm]; ok {
		t.Errorf("m@1 no longer watched, but %s is exported", alarm)
	}
	if _, ok := m[statistc+ksX]; ok {
		t.Errorf("m@1 no longer watched, but %s%s is exported", statistc, ksX)
	}
	if m[rows] != float64(fed) || m[stream]+m[window] != 2 {
		t.Errorf("m@1's counters within %d versions: rows %v, alarms %v+%v; want them kept", keepVersions, m[rows], m[stream], m[window])
	}
	if _, ok := m[`strata_drift_alarm{model="m",version="4"}`]; !ok {
		t.Errorf("m@4 watched, but no strata_drift_alarm for it")
	}
	d.Sync(map[string]Model{"InferenceService/s": {Name: "m", Version: "5"}})
	m = meshtest.Scrape(t, reg)
	if _, ok := m[rows]; ok {
		t.Errorf("m@1 is %d versions back, but %s is exported", keepVersions, rows)
	}
	if _, ok := m[`strata_drift_rows_total{model="m",version="2"}`]; !ok {
		t.Errorf("m@2's rows counter dropped with m@1's")
	}
}
