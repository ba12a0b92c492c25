package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// Manifest metadata keys the agent writes and reads.
const (
	// MetaReference holds a model version's drift reference (JSON of
	// drift.Reference): the summary of its training data.
	MetaReference = "strata.drift.reference"
	// MetaFeatures holds a model's input feature names, comma-separated.
	MetaFeatures = "strata.features"
	// MetaJob names the training job that produced a model version.
	MetaJob = "strata.job"
	// MetaAccuracy is the holdout accuracy the trainer measured.
	MetaAccuracy = "strata.accuracy"
)

// driftHistory bounds DriftRecord.History.
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
	spec           policy.Drift
	cols           []int // input columns watched, in monitor order
	pred           bool  // the prediction is watched too
	names          []string
	mon            *drift.Monitor
	first          [][]float64 // rows collected for a "first" reference
	rec            DriftRecord
	lastPub        time.Time
	dirty          bool
}

type driftRow struct {
	model string
	s     infer.Sample
}

// driftWatch runs a drift monitor for every model served here whose policy
// declares drift:, fed by the inference server's sampled rows, and
// publishes each monitor's state to the catalog.
type driftWatch struct {
	a       *Agent
	rows    chan driftRow
	dropped atomic.Uint64

	mu  sync.Mutex
	mon map[string]*watched // by model name: one version serves per name
}

func newDriftWatch(a *Agent) *driftWatch {
	return &driftWatch{a: a, rows: make(chan driftRow, driftRows), mon: map[string]*watched{}}
}

// observe is the inference server's Observer: it queues rows, never blocks.
func (d *driftWatch) observe(model string, rows []infer.Sample) {
	for _, r := range rows {
		select {
		case d.rows <- driftRow{model, r}:
		default:
			d.dropped.Add(1)
		}
	}
}

func (d *driftWatch) run(ctx context.Context) {
	tick := time.NewTicker(driftPublishEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-d.rows:
			d.feed(r)
		case <-tick.C:
			d.publish(false)
		}
	}
}

func (d *driftWatch) feed(r driftRow) {
	d.mu.Lock()
	w := d.mon[r.model]
	if w == nil || r.s.Version != w.version || w.rec.Error != "" {
		d.mu.Unlock()
		return
	}
	row := make([]float64, 0, len(w.cols)+1)
	for _, c := range w.cols {
		if c >= len(r.s.Inputs) {
			d.mu.Unlock()
			return
		}
		row = append(row, r.s.Inputs[c])
	}
	if w.pred {
		row = append(row, score(r.s.Outputs))
	}
	var ev *drift.Event
	var err error
	if w.mon == nil {
		w.first = append(w.first, row)
		w.rec.Seen++
		if len(w.first) >= w.rec.Window {
			err = d.startFromFirst(w)
		}
	} else {
		ev, err = w.mon.Observe(row)
		w.rec.Seen = w.mon.Seen()
	}
	if err != nil {
		w.rec.Error = err.Error()
	}
	alarmed := false
	if ev != nil {
		w.rec.Alarmed = ev.Kind == drift.EventAlarm
		if w.rec.Alarmed {
			w.rec.AlarmSeen, w.rec.AlarmAt = ev.Samples, time.Now().UTC()
			alarmed = true
		}
		d.a.log.Info("drift "+string(ev.Kind), "policy", w.key, "model", w.model, "version", w.version, "samples", ev.Samples, "worst", catalog.WorstScore(ev.Scores, w.rec.Detector).Name)
	}
	if w.mon != nil {
		if ev, ok := w.mon.Last(); ok && (len(w.rec.History) == 0 || w.rec.History[len(w.rec.History)-1].Seen != ev.Seen) {
			w.rec.Scores = ev.Scores
			ws := catalog.WorstScore(ev.Scores, w.rec.Detector)
			w.rec.History = append(w.rec.History, DriftPoint{Time: time.Now().UTC(), Seen: ev.Seen, Feature: ws.Name, Statistic: catalog.ScoreStat(ws, w.rec.Detector), Drifted: ev.Over})
			if len(w.rec.History) > driftHistory {
				w.rec.History = slices.Delete(w.rec.History, 0, len(w.rec.History)-driftHistory)
			}
		}
	}
	w.dirty = true
	d.mu.Unlock()
	if ev != nil || alarmed {
		d.publish(true)
	}
}

// startFromFirst builds the reference from the first Window live rows.
func (d *driftWatch) startFromFirst(w *watched) error {
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
	w.mon, err = drift.New(ref, d.monitorConfig(w))
	w.rec.Ready = err == nil
	return err
}

func (d *driftWatch) monitorConfig(w *watched) drift.Config {
	c := drift.Config{Model: w.model, Version: w.version, Site: d.a.cfg.Site, Detector: drift.Detector(w.rec.Detector), Window: w.rec.Window, Prediction: w.pred}
	c.Every = max(1, c.Window/5)
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

// sync makes the monitors match the models served here: loaded maps policy
// key → model. New versions start fresh monitors; gone ones are dropped.
func (d *driftWatch) sync(loaded map[string]servedModel) {
	a := d.a
	d.mu.Lock()
	defer d.mu.Unlock()
	keep := map[string]bool{}
	for key, sm := range loaded {
		doc, err := a.policyDoc(key)
		if err != nil || doc.InferenceService == nil || doc.InferenceService.Drift == nil {
			continue
		}
		keep[sm.name] = true
		if w := d.mon[sm.name]; w != nil && w.version == sm.version && w.key == key {
			continue
		}
		d.mon[sm.name] = d.newWatched(key, sm, *doc.InferenceService.Drift)
	}
	for name, w := range d.mon {
		if !keep[name] {
			delete(d.mon, name)
			_ = a.cat.Drift.Delete(w.key + "/" + a.cfg.Name)
		}
	}
}

func (d *driftWatch) newWatched(key string, sm servedModel, spec policy.Drift) *watched {
	a := d.a
	spec.Detector = cmpOr(spec.Detector, policy.DetectorPSI)
	spec.Reference = cmpOr(spec.Reference, "training")
	if spec.Window == 0 {
		spec.Window = drift.DefaultWindow
	}
	w := &watched{key: key, model: sm.name, version: sm.version, spec: spec, dirty: true}
	w.rec = DriftRecord{
		Policy: key, Model: sm.name, Version: sm.version, Site: a.cfg.Site, Node: a.cfg.Name,
		Detector: spec.Detector, Window: spec.Window, Reference: spec.Reference,
	}
	fail := func(format string, args ...any) *watched {
		w.rec.Error = fmt.Sprintf(format, args...)
		a.log.Warn("drift monitor not started", "policy", key, "model", sm.name, "version", sm.version, "reason", w.rec.Error)
		return w
	}
	m, err := a.art.Lookup(storage.KindModel, sm.name, sm.version)
	if err != nil {
		return fail("%v", err)
	}
	var ref drift.Reference
	var all []string
	if raw := m.Metadata[MetaReference]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &ref); err != nil {
			return fail("the model's drift reference does not parse: %v", err)
		}
		for _, f := range ref.Features {
			all = append(all, f.Name)
		}
	} else if fs := m.Metadata[MetaFeatures]; fs != "" {
		all = strings.Split(fs, ",")
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
	return w
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// publish writes the records of monitors that changed (all when force).
func (d *driftWatch) publish(force bool) {
	a := d.a
	now := time.Now()
	d.mu.Lock()
	var out []DriftRecord
	for _, w := range d.mon {
		if a.inf != nil {
			st := a.inf.Stats(w.model, w.version)
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
		}
		w.rec.Updated = now.UTC()
		w.lastPub, w.dirty = now, false
		out = append(out, w.rec)
		out[len(out)-1].Scores = slices.Clone(w.rec.Scores)
		out[len(out)-1].History = slices.Clone(w.rec.History)
	}
	d.mu.Unlock()
	for _, r := range out {
		var deps []mesh.Dep
		if ref, ok := a.cat.Manifests.Ref(string(storage.KindModel) + "/" + r.Model + "/" + r.Version); ok {
			deps = append(deps, ref)
		}
		if _, err := a.cat.Drift.Put(r, deps...); err != nil {
			a.log.Warn("publishing drift state", "policy", r.Policy, "err", err)
		}
	}
}

// driftRecords returns every node's drift records, by policy then node.
func (a *Agent) driftRecords() []DriftRecord {
	out, err := a.cat.Drift.Values()
	a.decodeErrors(err)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Policy != out[j].Policy {
			return out[i].Policy < out[j].Policy
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// policyDoc returns an applied policy's parsed document.
func (a *Agent) policyDoc(key string) (*policy.Document, error) {
	rec, err := a.cat.Policies.Value(key)
	if err != nil {
		return nil, err
	}
	return compiled(rec)
}
