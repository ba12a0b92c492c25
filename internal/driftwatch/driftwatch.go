// Package driftwatch runs a drift monitor for every model served on this
// node whose policy declares drift:, fed by the inference server's sampled
// rows, and publishes each monitor's state to the catalog's drift table
// (where the service's owner reads it to start a retrain) and each of its
// transitions (warming, ok, alarm, clear, error) to the drift-log table as
// it happens (where the event stream reads them).
//
//	w := driftwatch.New(driftwatch.Config{Name: "edge-a-1", Site: "edge-a", Catalog: cat, Artifacts: svc})
//	go w.Run(ctx)
//	server.Observer = w.Observe                 // sampled inference rows
//	w.Sync(map[string]driftwatch.Model{"InferenceService/s": {Name: "s", Version: "2"}})
package driftwatch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/safe"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// driftHistory bounds catalog.Drift.History.
const driftHistory = 24

// driftPublishEvery bounds how often a monitor's record is republished
// when nothing but its scores changed.
const driftPublishEvery = time.Second

// driftRows bounds the queue between the inference path and the monitors;
// rows beyond it are dropped and counted.
const driftRows = 8192

// watched is one monitor: a policy's model version served here.
type watched struct {
	key            string
	model, version string
	spec           policy.Drift // with defaults filled in
	applied        policy.Drift // as the policy wrote it (see resync)
	cols           []int        // input columns watched, in monitor order
	pred           bool         // the prediction is watched too
	names          []string
	inputs         []string // every input of the model, in order
	mon            *drift.Monitor
	first          [][]float64 // rows collected for a "first" reference
	rec            catalog.Drift
	row            []float64 // reused for each observed row
	lastPub        time.Time
	dirty          bool
	rows           prometheus.Counter // strata_drift_rows_total
}

type driftRow struct {
	model string
	s     infer.Sample
}

// Model is a model version served here.
type Model struct{ Name, Version string }

// Artifacts finds a model version's manifest (its drift reference).
type Artifacts interface {
	Lookup(kind storage.Kind, name, version string) (storage.Manifest, error)
}

// Config configures a Watch. Name, Site, Catalog and Artifacts are
// required.
type Config struct {
	// Name and Site are this node's.
	Name, Site string
	Catalog    *catalog.Catalog
	Artifacts  Artifacts
	// Stats reports a served version's request counts (canaries are judged
	// by them); nil when this agent serves nothing.
	Stats  func(model, version string) infer.Stats
	Logger *slog.Logger
	// Guard recovers panics of the component's background work (logged,
	// counted). Nil: a guard of its own that logs to Logger and exports
	// no metric.
	Guard *safe.Guard
	// Registerer, when set, receives the drift series: per model version
	// served here, rows checked (strata_drift_rows_total), alarms raised
	// (strata_drift_alarms_total) and the alarm state (strata_drift_alarm);
	// per watched feature and detector, the latest statistic and its
	// threshold (strata_drift_statistic, strata_drift_threshold); and rows
	// dropped before the monitors, for a full queue or a NaN or infinite
	// value (strata_drift_rows_dropped_total).
	Registerer prometheus.Registerer
	// Publish publishes a dataset captured for a retrain (the file at
	// path); nil: captures end in an error.
	Publish func(ctx context.Context, path string, spec storage.PublishSpec) (storage.Manifest, error)
}

// Watch is the drift component. Safe for concurrent use.
type Watch struct {
	cfg     Config
	log     *slog.Logger
	rows    chan driftRow
	dropped atomic.Uint64 // rows the queue had no room for
	invalid atomic.Uint64 // rows with a NaN or infinite value
	metrics *metrics

	mu   sync.Mutex
	mon  map[string]*watched // by model name: one version serves per name
	logs map[string]*driftLog
	caps map[string]*capture // by model name
}

// driftLog is a policy's drift log on this node (catalog.DriftLog): every
// transition of its monitors, whichever version, published as it happens.
type driftLog struct {
	log   catalog.DriftLog
	dirty bool
}

// New returns a watch; nothing is monitored until Sync and Run.
func New(cfg Config) *Watch {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Guard == nil {
		cfg.Guard = safe.New(safe.Config{Logger: cfg.Logger})
	}
	d := &Watch{cfg: cfg, log: cfg.Logger, rows: make(chan driftRow, driftRows), mon: map[string]*watched{}, logs: map[string]*driftLog{}, caps: map[string]*capture{}}
	d.metrics = newMetrics(d)
	if cfg.Registerer != nil {
		d.metrics.register(cfg.Registerer, d)
	}
	return d
}

// Observe is the inference server's Observer: it queues rows and never
// blocks; rows beyond the queue are dropped and counted.
func (d *Watch) Observe(model string, rows []infer.Sample) {
	for _, r := range rows {
		select {
		case d.rows <- driftRow{model, r}:
		default:
			d.dropped.Add(1)
		}
	}
}

// Run feeds the monitors and publishes their state until ctx ends.
func (d *Watch) Run(ctx context.Context) {
	tick := time.NewTicker(driftPublishEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-d.rows:
			// A row that panics a monitor is dropped; the next one is fed.
			_ = d.cfg.Guard.Do("driftwatch", func() { d.feed(r) })
		case <-tick.C:
			if d.cfg.Guard.Do("driftwatch", func() { d.resync(); d.publish(false) }) != nil && !d.cfg.Guard.Wait(ctx) {
				return
			}
		}
	}
}

func (d *Watch) feed(r driftRow) {
	if d.observe(r) {
		d.publish(true)
	}
}

// observe feeds r to its model's monitor and says whether the monitor
// changed state (to be published at once). A row with a NaN or infinite
// value is dropped and counted; the monitor goes on with the next. The
// lock is released by defer: a panic recovered in Run must not leave it
// held.
func (d *Watch) observe(r driftRow) (publish bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.mon[r.model]
	if w == nil || r.s.Version != w.version || w.rec.Error != "" {
		return false
	}
	row := w.row[:0]
	for _, c := range w.cols {
		if c >= len(r.s.Inputs) {
			return false
		}
		row = append(row, r.s.Inputs[c])
	}
	if w.pred {
		row = append(row, score(r.s.Outputs))
	}
	w.row = row
	for _, v := range row {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			d.dropInvalid(w)
			return false
		}
	}
	d.captureInputs(w.model, r.s.Inputs)
	var ev *drift.Event
	var err error
	if w.mon == nil {
		w.first = append(w.first, slices.Clone(row))
		w.rec.Seen++
		if len(w.first) >= w.rec.Window {
			err = d.startFromFirst(w)
		}
	} else {
		ev, err = w.mon.Observe(row)
		if errors.Is(err, drift.ErrInvalid) {
			// Rejected as a row (its width, a value): dropped, not the
			// end of the monitor.
			d.dropInvalid(w)
			return false
		}
		w.rec.Seen = w.mon.Seen()
	}
	w.dirty = true
	if err != nil {
		w.rec.Error, w.rec.State = err.Error(), catalog.DriftError
		d.note(w, catalog.DriftEntry{Kind: catalog.DriftError, Samples: w.rec.Seen, Error: w.rec.Error})
		d.log.Warn("drift monitor stopped", "policy", w.key, "model", w.model, "version", w.version, "err", err)
		return true
	}
	w.rows.Inc()
	changed := false
	if ev != nil {
		d.transition(w, ev)
		changed = true
	} else if w.rec.State == catalog.DriftWarming && w.mon != nil && w.mon.Judged() {
		w.rec.State = catalog.DriftOK
		d.note(w, catalog.DriftEntry{Kind: catalog.DriftOK, Samples: w.rec.Seen})
		changed = true
	}
	if w.mon != nil {
		if ev, ok := w.mon.Last(); ok && (len(w.rec.History) == 0 || w.rec.History[len(w.rec.History)-1].Seen != ev.Seen) {
			w.rec.Scores = scoresOf(ev.Scores)
			ws := catalog.WorstScore(w.rec.Scores, w.rec.Detector)
			w.rec.History = append(w.rec.History, catalog.DriftPoint{Time: time.Now().UTC(), Seen: ev.Seen, Feature: ws.Name, Statistic: catalog.ScoreStat(ws, w.rec.Detector), Drifted: ev.Over})
			if len(w.rec.History) > driftHistory {
				w.rec.History = slices.Delete(w.rec.History, 0, len(w.rec.History)-driftHistory)
			}
		}
	}
	return changed
}

// dropInvalid counts a row of w's version dropped before its monitor.
func (d *Watch) dropInvalid(w *watched) {
	d.invalid.Add(1)
	w.rec.Invalid++
	w.dirty = true
}

// transition records an alarm or clear of w's monitor in its record and
// its policy's drift log: what crossed is taken from the event, as it
// fired (a streaming side restarts from 0 on the row it alarms).
func (d *Watch) transition(w *watched, ev *drift.Event) {
	now := time.Now().UTC()
	e := catalog.DriftEntry{Kind: catalog.DriftClear, Samples: ev.Samples, Source: string(ev.Source)}
	w.rec.Alarmed = ev.Kind == drift.EventAlarm
	w.rec.Stream = streamOf(ev.Stream)
	w.rec.State = catalog.DriftOK
	if w.rec.Alarmed {
		w.rec.State = catalog.DriftAlarm
		e.Kind = catalog.DriftAlarm
		e.Feature, e.Detector, e.Statistic, e.Drifted = crossing(ev)
		// Counted here, as it fires: an alarm that clears before the
		// next publish or scrape still counts.
		d.metrics.alarms.WithLabelValues(w.model, w.version, string(ev.Source)).Inc()
		w.rec.AlarmSeen, w.rec.AlarmAt, w.rec.AlarmSource = ev.Samples, now, string(ev.Source)
		w.rec.AlarmFeature, w.rec.AlarmStatistic, w.rec.AlarmDrifted = e.Feature, e.Statistic, e.Drifted
	}
	d.note(w, e)
	if w.rec.Alarmed {
		d.startCapture(w)
	}
	d.log.Info("drift "+string(ev.Kind), "policy", w.key, "model", w.model, "version", w.version, "samples", ev.Samples,
		"source", ev.Source, "detector", e.Detector, "feature", e.Feature, "statistic", e.Statistic)
}

// crossing names what raised an alarm, as it crossed: for the streaming
// detector the feature whose alarm's statistic was furthest over its
// threshold (the ratio), for the windowed one the worst feature of the
// evaluation that raised it (its figure: the corrected p-value for ks);
// and every feature past its threshold then.
func crossing(ev *drift.Event) (feature, detector string, stat float64, drifted []string) {
	if ev.Source == drift.SourceStream {
		detector = "cusum"
		for _, s := range ev.Stream {
			if !s.Drifted {
				continue
			}
			drifted = append(drifted, s.Name)
			if feature == "" || s.AlarmStatistic > stat {
				feature, stat = s.Name, s.AlarmStatistic
			}
		}
		return feature, detector, stat, drifted
	}
	detector = string(ev.Detector)
	for _, s := range ev.Scores {
		if s.Drifted {
			drifted = append(drifted, s.Name)
		}
	}
	ws := catalog.WorstScore(scoresOf(ev.Scores), detector)
	return ws.Name, detector, catalog.ScoreStat(ws, detector), drifted
}

// note appends e (stamped now, with w's version) to the drift log of w's
// policy. Called with d.mu held.
func (d *Watch) note(w *watched, e catalog.DriftEntry) {
	l := d.logs[w.key]
	if l == nil {
		l = &driftLog{log: catalog.DriftLog{Policy: w.key, Node: d.cfg.Name, Since: time.Now().UTC()}}
		// Carry on the log this node wrote before it restarted: its
		// entries keep their sequence numbers.
		if old, err := d.cfg.Catalog.DriftLogs.Value(w.key + "/" + d.cfg.Name); err == nil && old.Node == d.cfg.Name && !old.Since.IsZero() {
			l.log = old
		}
		d.logs[w.key] = l
	}
	l.log.Model, l.log.Site = w.model, d.cfg.Site
	e.At, e.Version = time.Now().UTC(), w.version
	l.log.Append(e)
	l.dirty = true
}

// startFromFirst builds the reference from the first Window live rows.
func (d *Watch) startFromFirst(w *watched) error {
	cols := make([]float64, 0, len(w.first)*len(w.names))
	for _, r := range w.first {
		cols = append(cols, r...)
	}
	names := slices.Clone(w.names)
	if w.pred {
		names = append(names, "prediction")
	}
	ref, err := drift.SummarizeColumns(names, cols, drift.SummaryOptions{})
	if err != nil {
		return err
	}
	if w.pred {
		p := ref.Features[len(ref.Features)-1]
		ref.Features, ref.Prediction = ref.Features[:len(ref.Features)-1], &p
	}
	w.first = nil
	cfg := d.monitorConfig(w)
	w.mon, err = drift.New(ref, cfg)
	w.rec.Ready = err == nil
	if err == nil {
		w.rec.Threshold = w.mon.Config().Alarm
	}
	return err
}

func (d *Watch) monitorConfig(w *watched) drift.Config {
	c := drift.Config{Model: w.model, Version: w.version, Site: d.cfg.Site, Detector: drift.Detector(w.rec.Detector), Window: w.rec.Window, Prediction: w.pred}
	c.Every = policy.DriftEvery(c.Window)
	if st := w.spec.Stream; st.On() {
		c.Stream = &drift.StreamConfig{ARL: float64(st.FalseAlarmEvery), Shift: st.Shift}
	}
	alarm, clear := drift.DefaultThresholds(c.Detector)
	t := w.spec.Threshold
	if t == 0 {
		t = policy.DefaultDriftThreshold[string(c.Detector)]
	}
	if t > 0 {
		alarm = t
		if c.Detector == drift.DetectorKS {
			clear = min(1, max(clear, 5*t))
		} else {
			clear = t / 2
		}
	}
	c.Alarm, c.Clear = alarm, clear
	return c
}

// score reduces a row's outputs to the prediction the reference summarises:
// the single score of a binary model, else the arg-max class.
func score(out []float64) float64 {
	if len(out) == 1 {
		return out[0]
	}
	best := 0
	for i, v := range out {
		if v > out[best] {
			best = i
		}
	}
	return float64(best)
}

// resync restarts the monitors whose policy's drift settings changed
// since they started: the service was applied again with other settings.
// Which models are served stays Sync's to say.
func (d *Watch) resync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, w := range d.mon {
		doc, err := d.policyDoc(w.key)
		if err != nil || doc.InferenceService == nil || doc.InferenceService.Drift == nil {
			continue
		}
		if spec := *doc.InferenceService.Drift; !reflect.DeepEqual(w.applied, spec) {
			d.log.Info("drift settings changed: monitor restarted", "policy", w.key, "model", w.model, "version", w.version)
			d.mon[name] = d.newWatched(w.key, Model{Name: w.model, Version: w.version}, spec)
		}
	}
}

// Sync makes the monitors match the models served here: loaded maps policy
// key → model. New versions start fresh monitors; gone ones are dropped.
func (d *Watch) Sync(loaded map[string]Model) {
	d.mu.Lock()
	defer d.mu.Unlock()
	keep := map[string]bool{}
	for key, sm := range loaded {
		doc, err := d.policyDoc(key)
		if err != nil || doc.InferenceService == nil || doc.InferenceService.Drift == nil {
			continue
		}
		keep[sm.Name] = true
		spec := *doc.InferenceService.Drift
		if w := d.mon[sm.Name]; w != nil && w.version == sm.Version && w.key == key && reflect.DeepEqual(w.applied, spec) {
			continue
		}
		d.mon[sm.Name] = d.newWatched(key, sm, spec)
	}
	for name, w := range d.mon {
		if !keep[name] {
			delete(d.mon, name)
			delete(d.caps, name)
			_ = d.cfg.Catalog.Drift.Delete(w.key + "/" + d.cfg.Name)
		}
	}
	// A policy no longer watched here takes its log with it.
	watched := map[string]bool{}
	for _, w := range d.mon {
		watched[w.key] = true
	}
	for key := range d.logs {
		if !watched[key] {
			delete(d.logs, key)
			_ = d.cfg.Catalog.DriftLogs.Delete(key + "/" + d.cfg.Name)
		}
	}
}

func (d *Watch) newWatched(key string, sm Model, spec policy.Drift) *watched {
	applied := spec
	spec.Detector = cmp.Or(spec.Detector, policy.DetectorPSI)
	spec.Reference = cmp.Or(spec.Reference, "training")
	if spec.Window == 0 {
		spec.Window = drift.DefaultWindow
	}
	d.metrics.track(sm.Name, sm.Version)
	w := &watched{key: key, model: sm.Name, version: sm.Version, spec: spec, applied: applied, dirty: true,
		rows: d.metrics.rows.WithLabelValues(sm.Name, sm.Version)}
	w.rec = catalog.Drift{
		Policy: key, Model: sm.Name, Version: sm.Version, Site: d.cfg.Site, Node: d.cfg.Name,
		Detector: spec.Detector, Window: spec.Window, Reference: spec.Reference, State: catalog.DriftWarming,
	}
	fail := func(format string, args ...any) *watched {
		w.rec.Error, w.rec.State = fmt.Sprintf(format, args...), catalog.DriftError
		d.note(w, catalog.DriftEntry{Kind: catalog.DriftError, Error: w.rec.Error})
		d.log.Warn("drift monitor not started", "policy", key, "model", sm.Name, "version", sm.Version, "reason", w.rec.Error)
		return w
	}
	m, err := d.cfg.Artifacts.Lookup(storage.KindModel, sm.Name, sm.Version)
	if err != nil {
		return fail("%v", err)
	}
	var ref drift.Reference
	var all []string
	if raw := m.Metadata[catalog.MetaReference]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &ref); err != nil {
			return fail("the model's drift reference does not parse: %v", err)
		}
		// A model retrained on this site's captured rows has a reference
		// of them: this site's traffic is compared with its own data.
		if raw := m.Metadata[catalog.MetaSiteReferences]; raw != "" {
			var sites map[string]drift.Reference
			if err := json.Unmarshal([]byte(raw), &sites); err != nil {
				return fail("the model's site drift references do not parse: %v", err)
			}
			if sr, ok := sites[d.cfg.Site]; ok {
				ref, w.rec.ReferenceSite = sr, d.cfg.Site
			}
		}
		for _, f := range ref.Features {
			all = append(all, f.Name)
		}
	} else if fs := m.Metadata[catalog.MetaFeatures]; fs != "" {
		all = strings.Split(fs, ",")
	}
	w.inputs = all
	if c := d.caps[sm.Name]; c != nil && c.key == key {
		st := c.state
		w.rec.Capture = &st
	}
	if spec.Reference == "training" && len(ref.Features) == 0 {
		return fail("%s has no drift reference (publish it with the model, or use reference: first)", m.Ref())
	}
	want := spec.Features
	if len(want) == 0 {
		want = all
	}
	if len(want) == 0 {
		return fail("%s names no input features; list them in drift.features with reference: training", m.Ref())
	}
	for _, f := range want {
		i := slices.Index(all, f)
		if i < 0 {
			return fail("feature %q is not an input of %s (inputs: %s)", f, m.Ref(), strings.Join(all, ", "))
		}
		w.cols = append(w.cols, i)
	}
	w.names = want
	if spec.Reference == "first" {
		// Warming while the reference is collected, and after until the
		// monitor has judged.
		d.note(w, catalog.DriftEntry{Kind: catalog.DriftWarming, Window: 2 * spec.Window})
		return w
	}
	sub := drift.Reference{Prediction: ref.Prediction}
	for _, c := range w.cols {
		sub.Features = append(sub.Features, ref.Features[c])
	}
	w.pred = sub.Prediction != nil
	cfg := d.monitorConfig(w)
	mon, err := drift.New(sub, cfg)
	if err != nil {
		return fail("%v", err)
	}
	w.mon, w.rec.Ready, w.rec.Threshold = mon, true, cfg.Alarm
	d.note(w, catalog.DriftEntry{Kind: catalog.DriftWarming, Window: spec.Window})
	return w
}

// publish writes the drift logs that changed, then the records of
// monitors that changed (all when force).
func (d *Watch) publish(force bool) {
	now := time.Now()
	for _, l := range d.changedLogs() {
		if _, err := d.cfg.Catalog.DriftLogs.Put(l); err != nil {
			d.log.Warn("publishing drift log", "policy", l.Policy, "err", err)
		}
	}
	for _, r := range d.changed(now, force) {
		var deps []mesh.Dep
		if ref, ok := d.cfg.Catalog.Manifests.Ref(string(storage.KindModel) + "/" + r.Model + "/" + r.Version); ok {
			deps = append(deps, ref)
		}
		if _, err := d.cfg.Catalog.Drift.Put(r, deps...); err != nil {
			d.log.Warn("publishing drift state", "policy", r.Policy, "err", err)
		}
	}
}

// changedLogs returns copies of the drift logs with entries not yet
// published and marks them published.
func (d *Watch) changedLogs() []catalog.DriftLog {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []catalog.DriftLog
	for _, l := range d.logs {
		if l.dirty {
			l.dirty = false
			c := l.log
			c.Entries = slices.Clone(l.log.Entries)
			out = append(out, c)
		}
	}
	return out
}

// changed returns the records of monitors that changed (all when force)
// and marks them published at now.
func (d *Watch) changed(now time.Time, force bool) []catalog.Drift {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []catalog.Drift
	for _, w := range d.mon {
		if d.cfg.Stats != nil {
			st := d.cfg.Stats(w.model, w.version)
			if st.Served != w.rec.Served || st.Failed != w.rec.Failed {
				w.rec.Served, w.rec.Failed, w.dirty = st.Served, st.Failed, true
			}
		}
		if dr := d.dropped.Load(); dr != w.rec.Dropped {
			w.rec.Dropped, w.dirty = dr, true
		}
		if !w.dirty || (!force && now.Sub(w.lastPub) < driftPublishEvery) {
			continue
		}
		if w.mon != nil {
			w.rec.Threshold = w.mon.Config().Alarm
			w.rec.Stream = streamOf(w.mon.Stream())
		}
		w.rec.Updated = now.UTC()
		w.lastPub, w.dirty = now, false
		out = append(out, w.rec)
		out[len(out)-1].Scores = slices.Clone(w.rec.Scores)
		out[len(out)-1].History = slices.Clone(w.rec.History)
	}
	return out
}

// policyDoc returns an applied policy's parsed document.
func (d *Watch) policyDoc(key string) (*policy.Document, error) {
	rec, err := d.cfg.Catalog.Policies.Value(key)
	if err != nil {
		return nil, err
	}
	return rec.Document()
}
