package driftwatch

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// Capture. A service whose retrain says capture: keeps, on the node whose
// monitor alarmed, the labelled rows its clients post as ground truth
// after the alarm (Feedback), or with source: inputs the live inputs its
// monitor samples after it. Once it holds the rows the retrain waits
// for, it publishes them as a dataset version, and names it in its drift
// record; the service's owner then starts the retrain on it. Rows before
// the alarm are not kept: they are of the traffic the model was trained
// for.

// ErrNotWatched is returned by Feedback for a model no monitor watches
// on this node.
var ErrNotWatched = errors.New("driftwatch: model not watched on this node")

// ErrFeedback wraps what is wrong with posted ground truth.
var ErrFeedback = errors.New("driftwatch: bad feedback")

// capture is one capture on this node: the labelled rows of a model kept
// after an alarm of one of its versions.
type capture struct {
	key, model, version string
	alarmAt             time.Time
	want                int
	header              []string // the model's inputs, then the label (feedback)
	inputs              bool     // the live inputs themselves, unlabelled
	rows                [][]string
	state               catalog.DriftCapture
	publishing          bool
}

func (c *capture) done() bool { return c.state.Dataset != "" || c.state.Error != "" }

// startCapture begins a capture for w's alarm when its policy's retrain
// asks for one and no capture of the model is under way. Called with d.mu
// held.
func (d *Watch) startCapture(w *watched) {
	if c := d.caps[w.model]; c != nil && !c.done() {
		return
	}
	doc, err := d.policyDoc(w.key)
	if err != nil || captureOf(doc) == nil {
		return
	}
	rt := doc.InferenceService.Retrain
	label := "label"
	if rt.Builtin != nil && rt.Builtin.Label != "" {
		label = rt.Builtin.Label
	}
	if len(w.inputs) == 0 {
		d.log.Warn("drift capture not started: the model names no inputs", "policy", w.key, "model", w.model)
		return
	}
	c := &capture{key: w.key, model: w.model, version: w.version, alarmAt: w.rec.AlarmAt, want: rt.Capture.Rows,
		header: slices.Clone(w.inputs), inputs: rt.Capture.Source == policy.CaptureInputs}
	if !c.inputs {
		c.header = append(c.header, label)
	}
	c.state = catalog.DriftCapture{AlarmAt: c.alarmAt, Want: c.want}
	d.caps[w.model] = c
	d.showCapture(c)
	d.log.Info("drift capture started", "policy", w.key, "model", w.model, "version", w.version, "rows", c.want, "source", rt.Capture.Source)
}

// showCapture copies c's state into the record of the model's monitor.
// Called with d.mu held.
func (d *Watch) showCapture(c *capture) {
	if w := d.mon[c.model]; w != nil && w.key == c.key {
		st := c.state
		w.rec.Capture, w.dirty = &st, true
	}
}

// Feedback keeps posted ground truth for the model's capture: rows are
// the model's inputs in its input order, labels their true classes.
// Nothing is kept while no capture is under way (Reason says why). Errors wrap ErrNotWatched or ErrFeedback.
func (d *Watch) Feedback(model string, rows [][]float64, labels []string) (api.FeedbackResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.mon[model]
	if w == nil {
		return api.FeedbackResult{}, fmt.Errorf("%w: %s", ErrNotWatched, model)
	}
	if len(rows) != len(labels) {
		return api.FeedbackResult{}, fmt.Errorf("%w: %d rows and %d labels", ErrFeedback, len(rows), len(labels))
	}
	for i, r := range rows {
		if len(w.inputs) > 0 && len(r) != len(w.inputs) {
			return api.FeedbackResult{}, fmt.Errorf("%w: row %d has %d values; %s@%s takes %d (%s)", ErrFeedback, i, len(r), w.model, w.version, len(w.inputs), strings.Join(w.inputs, ", "))
		}
		for j, v := range r {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return api.FeedbackResult{}, fmt.Errorf("%w: row %d value %d is %v, want a finite number", ErrFeedback, i, j, v)
			}
		}
		if l := strings.TrimSpace(labels[i]); l == "" || strings.ContainsAny(l, "\r\n") {
			return api.FeedbackResult{}, fmt.Errorf("%w: label %d is %q, want a class number or name", ErrFeedback, i, labels[i])
		}
	}
	c := d.caps[model]
	switch {
	case c == nil:
		return api.FeedbackResult{Reason: fmt.Sprintf("no drift alarm on %s here: ground truth is kept only after one, for a retrain with capture", model)}, nil
	case c.done() || c.publishing:
		return api.FeedbackResult{Dataset: c.state.Dataset, Rows: c.state.Rows, Want: c.want,
			Reason: fmt.Sprintf("the capture of %s after the alarm at %s is complete", model, c.alarmAt.Format(time.RFC3339))}, nil
	case c.inputs:
		return api.FeedbackResult{Capturing: true, Rows: c.state.Rows, Want: c.want,
			Reason: fmt.Sprintf("the capture of %s keeps the live inputs themselves (retrain.capture.source: inputs): it needs no ground truth", model)}, nil
	}
	fb := api.FeedbackResult{Capturing: true, Want: c.want}
	for i, r := range rows {
		if len(c.rows) >= c.want {
			break
		}
		c.rows = append(c.rows, append(record(r), strings.TrimSpace(labels[i])))
		fb.Accepted++
	}
	fb.Rows = len(c.rows)
	d.captured(c)
	return fb, nil
}

// captureInputs keeps a sampled row's inputs for the model's capture of
// live inputs, if one is under way. Called with d.mu held.
func (d *Watch) captureInputs(model string, inputs []float64) {
	c := d.caps[model]
	if c == nil || !c.inputs || c.done() || c.publishing || len(inputs) != len(c.header) {
		return
	}
	c.rows = append(c.rows, record(inputs))
	d.captured(c)
}

// captured notes c's rows, and publishes c once it holds what it wants.
// Called with d.mu held.
func (d *Watch) captured(c *capture) {
	c.state.Rows = len(c.rows)
	if c.state.Rows >= c.want {
		c.publishing = true
		go func() { _ = d.cfg.Guard.Do("driftwatch", func() { d.publishCapture(c) }) }()
	}
	d.showCapture(c)
}

// record is a row as CSV fields.
func record(row []float64) []string {
	rec := make([]string, 0, len(row)+1)
	for _, v := range row {
		rec = append(rec, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return rec
}

// publishCapture publishes c's rows as a dataset version
// (MODEL-capture:NODE-ALARMTIME), names it in c's state and publishes the
// monitor's record.
func (d *Watch) publishCapture(c *capture) {
	ref, err := d.writeCapture(c)
	d.mu.Lock()
	c.publishing = false
	if err != nil {
		c.state.Error = err.Error()
		d.log.Warn("drift capture not published", "policy", c.key, "model", c.model, "err", err)
	} else {
		c.state.Dataset = ref
		d.log.Info("drift capture published", "policy", c.key, "model", c.model, "dataset", ref, "rows", len(c.rows))
	}
	c.rows = nil
	d.showCapture(c)
	d.mu.Unlock()
	d.publish(true)
}

func (d *Watch) writeCapture(c *capture) (string, error) {
	if d.cfg.Publish == nil {
		return "", errors.New("this agent cannot publish artifacts")
	}
	f, err := os.CreateTemp("", "strata-capture-*.csv")
	if err != nil {
		return "", err
	}
	path := f.Name()
	defer os.Remove(path)
	cw := csv.NewWriter(f)
	_ = cw.Write(c.header)
	_ = cw.WriteAll(c.rows) // flushes
	if err := errors.Join(cw.Error(), f.Close()); err != nil {
		return "", err
	}
	spec := storage.PublishSpec{
		Kind: storage.KindDataset, Name: c.model + "-capture", Version: d.cfg.Name + "-" + c.alarmAt.UTC().Format("20060102T150405Z"),
		Metadata: map[string]string{
			catalog.MetaCaptureSite: d.cfg.Site, catalog.MetaCaptureNode: d.cfg.Name, catalog.MetaCapturePolicy: c.key,
			catalog.MetaCaptureVersion: c.version, catalog.MetaCaptureAlarm: c.alarmAt.Format(time.RFC3339Nano),
		},
	}
	m, err := d.cfg.Publish(context.Background(), path, spec)
	if err != nil {
		return "", err
	}
	return m.Name + ":" + m.Version, nil
}

// captureOf returns the retrain capture settings of a policy, if any.
func captureOf(doc *policy.Document) *policy.Capture {
	if doc == nil || doc.InferenceService == nil || doc.InferenceService.Retrain == nil {
		return nil
	}
	return doc.InferenceService.Retrain.Capture
}
