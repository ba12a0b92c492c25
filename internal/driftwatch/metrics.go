package driftwatch

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/infer/drift"
)

// keepVersions bounds the versions of one model whose counters
// (strata_drift_rows_total, strata_drift_alarms_total) are kept: the
// version served here and the last ones before it. A canary rolled back
// for drift is unloaded within seconds, often before the next scrape; its
// alarms stay exported until three other versions of the model were
// watched here since, and a model retrained every few hours does not grow
// the series without bound.
const keepVersions = 4

// The detector label of the streaming detector's mean sides in
// strata_drift_statistic (as in a rollout's trigger), and that of its
// spread side.
const (
	streamDetector       = "cusum"
	streamSpreadDetector = "cusum_spread"
)

// metrics are the drift watch's Prometheus series. The counters are
// updated as rows are fed; the gauges are read from the monitors at each
// scrape (see Collect), so a row costs no label look-up.
type metrics struct {
	rows    *prometheus.CounterVec
	alarms  *prometheus.CounterVec
	dropped prometheus.CounterFunc

	statistic, threshold, alarm *prometheus.Desc

	// versions lists, per model, the versions whose counters are kept,
	// the one whose monitor started last at the end (see keepVersions).
	// Guarded by Watch.mu.
	versions map[string][]string
}

func newMetrics(d *Watch) *metrics {
	return &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_drift_rows_total",
			Help: "Sampled inference rows checked by the drift monitor of a model version served here (with reference: first, the rows that built the reference too)."},
			[]string{"model", "version"}),
		alarms: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_drift_alarms_total",
			Help: "Drift alarms raised by the monitor of a model version served here, by the detector that raised them: window (the windowed detector) or stream (the streaming detector). Every alarm counts, also one that cleared before it was published."},
			[]string{"model", "version", "source"}),
		dropped: prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "strata_drift_rows_dropped_total",
			Help: "Sampled inference rows dropped before the drift monitors: the queue to them was full, or a watched value (or the prediction) was NaN or infinite. The monitor goes on with the next row."},
			func() float64 { return float64(d.dropped.Load() + d.invalid.Load()) }),
		statistic: prometheus.NewDesc("strata_drift_statistic",
			"Latest drift figure of a watched feature (or \"prediction\"), per detector: for psi and wasserstein the statistic of the latest windowed evaluation, alarming at or above the threshold; for ks the corrected p-value, alarming at or below it; for cusum the larger of the streaming detector's S+ and S- now, and for cusum_spread its spread statistic, each alarming above the threshold.",
			[]string{"model", "version", "feature", "detector"}, nil),
		threshold: prometheus.NewDesc("strata_drift_threshold",
			"Alarm threshold that strata_drift_statistic with the same labels is judged by.",
			[]string{"model", "version", "feature", "detector"}, nil),
		alarm: prometheus.NewDesc("strata_drift_alarm",
			"1 while the drift monitor of a model version served here is alarmed, else 0.",
			[]string{"model", "version"}, nil),
		versions: map[string][]string{},
	}
}

func (m *metrics) register(reg prometheus.Registerer, d *Watch) {
	reg.MustRegister(m.rows, m.alarms, m.dropped, collector{m: m, d: d})
}

// track notes that a monitor of model@version starts here, dropping the
// counters of the model's versions least recently started past
// keepVersions (never the one starting). Called with Watch.mu held.
func (m *metrics) track(model, version string) {
	vs := slices.DeleteFunc(m.versions[model], func(v string) bool { return v == version })
	vs = append(vs, version)
	for len(vs) > keepVersions {
		m.rows.DeleteLabelValues(model, vs[0])
		m.alarms.DeletePartialMatch(prometheus.Labels{"model": model, "version": vs[0]})
		vs = vs[1:]
	}
	m.versions[model] = vs
}

// collector exports the gauges of the monitors running now.
type collector struct {
	m *metrics
	d *Watch
}

// Describe sends the gauges' descriptions.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.statistic
	ch <- c.m.threshold
	ch <- c.m.alarm
}

// Collect reads every monitor's latest evaluation and streaming state.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.mon {
		alarmed := 0.0
		if w.rec.Alarmed {
			alarmed = 1
		}
		ch <- prometheus.MustNewConstMetric(c.m.alarm, prometheus.GaugeValue, alarmed, w.model, w.version)
		if w.mon == nil {
			continue
		}
		gauge := func(feature, detector string, stat, threshold float64) {
			ch <- prometheus.MustNewConstMetric(c.m.statistic, prometheus.GaugeValue, stat, w.model, w.version, feature, detector)
			ch <- prometheus.MustNewConstMetric(c.m.threshold, prometheus.GaugeValue, threshold, w.model, w.version, feature, detector)
		}
		cfg := w.mon.Config()
		if ev, ok := w.mon.Last(); ok {
			for _, s := range ev.Scores {
				stat := s.Statistic
				if cfg.Detector == drift.DetectorKS {
					stat = s.PValue
				}
				gauge(s.Name, string(cfg.Detector), stat, cfg.Alarm)
			}
		}
		for _, s := range w.mon.Stream() {
			gauge(s.Name, streamDetector, max(s.Upper, s.Lower), s.Threshold)
			if s.SpreadThreshold > 0 {
				gauge(s.Name, streamSpreadDetector, s.Spread, s.SpreadThreshold)
			}
		}
	}
}
