package controller

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
	"go.yaml.in/yaml/v3"
)

// canaryMinRequests is how many requests a canary serves before its error
// rate can roll it back.
const canaryMinRequests = 20

// loggedAlarms are the alarms of every node's drift log, each as the
// drift record that would have shown it: an alarm that cleared before
// this agent read the node's record (a short one) still starts a retrain
// or rolls a canary back. They come after the records, so a live alarm's
// record is the trigger where there is one.
func (c *Controller) loggedAlarms() []catalog.Drift {
	logs, _ := c.cfg.Catalog.DriftLogs.Values()
	var out []catalog.Drift
	for _, l := range logs {
		for _, e := range l.Entries {
			if e.Kind != catalog.DriftAlarm {
				continue
			}
			out = append(out, catalog.Drift{Policy: l.Policy, Model: l.Model, Version: e.Version, Site: l.Site, Node: l.Node, Detector: e.Detector,
				State: catalog.DriftAlarm, Alarmed: true, AlarmSeen: e.Samples, AlarmAt: e.At, AlarmSource: e.Source,
				AlarmFeature: e.Feature, AlarmStatistic: e.Statistic, AlarmDrifted: e.Drifted})
		}
	}
	return out
}

// step moves r to stage, saying why, and records the step in its history.
func step(r *catalog.Rollout, stage, format string, args ...any) {
	r.Stage, r.Message, r.Updated = stage, fmt.Sprintf(format, args...), time.Now().UTC()
	r.Steps = append(r.Steps, catalog.RolloutStep{Time: r.Updated, Stage: stage, Message: r.Message})
}

// rollouts drives the retrain-and-rollout of every service this agent owns:
// a drift alarm on the served version starts a TrainingJob; its model
// becomes a canary at the drifted site; the canary is promoted after its
// requests without regression, or rolled back.
func (c *Controller) rollouts() {
	c.noteView(c.cfg.Mesh.Nodes(), time.Now())
	var drifts []catalog.Drift
	for _, p := range c.retrainPolicies() {
		if !c.owns(p.Key()) {
			continue
		}
		doc, err := p.Document()
		if err != nil || doc.InferenceService == nil || doc.InferenceService.Retrain == nil {
			continue
		}
		if drifts == nil {
			drifts = c.drifts()
			drifts = append(drifts, c.loggedAlarms()...)
		}
		var mine []catalog.Drift
		for _, d := range drifts {
			if d.Policy == p.Key() {
				mine = append(mine, d)
			}
		}
		r, have := c.cfg.Catalog.ActiveRollout(p)
		was := r
		before, _ := json.Marshal(r)
		if err := c.advance(p, doc, &r, have, mine); err != nil {
			c.log.Warn("rollout", "policy", p.Key(), "err", err)
		}
		if after, _ := json.Marshal(r); r.Stage != "" && string(after) != string(before) {
			var deps []mesh.Dep
			if ref, ok := c.cfg.Catalog.Policies.Ref(p.Key()); ok {
				deps = append(deps, ref)
			}
			if _, err := c.cfg.Catalog.Rollouts.Put(r, deps...); err != nil {
				c.log.Warn("writing rollout", "policy", p.Key(), "err", err)
			} else {
				c.countRollout(p.Name, was, r)
			}
		}
	}
}

// advance moves a service's rollout on by one step, by its stage: idle
// (a drift alarm starts a retrain), retraining (the job's model becomes
// a canary, or ends the rollout) or canary (promoted or rolled back).
func (c *Controller) advance(p catalog.Policy, doc *policy.Document, r *catalog.Rollout, have bool, drifts []catalog.Drift) error {
	svc := doc.InferenceService
	switch {
	case !have || !r.Active():
		return c.advanceIdle(p, svc, r, have, drifts)
	case r.Stage == catalog.StageRetraining:
		c.advanceRetraining(p, svc, r, drifts)
	case r.Stage == catalog.StageCanary:
		c.advanceCanary(svc, r, drifts)
	}
	return nil
}

// advanceIdle starts a retrain when the version served alarmed since the
// rollout last moved, unless repeated alarms on it are backing off.
func (c *Controller) advanceIdle(p catalog.Policy, svc *policy.InferenceServiceSpec, r *catalog.Rollout, have bool, drifts []catalog.Drift) error {
	cur := svc.Model.Version
	if have {
		cur = r.From
		if r.Stage == catalog.StagePromoted {
			cur = r.To
		}
	} else if m, err := serving.ModelManifest(c.cfg.Artifacts, svc.Model); err == nil {
		cur = m.Version
	}
	var trig *catalog.Drift
	for i, d := range drifts {
		if d.Alarmed && d.Version == cur && (!have || d.AlarmAt.After(r.Updated)) {
			trig = &drifts[i]
			break
		}
	}
	if trig == nil {
		return nil
	}
	if have && cur == r.From && time.Now().Before(r.NextRetrainAfter) {
		// Backing off: the alarm waits (r.Updated stays, so it still
		// counts once the wait is over if it has not cleared).
		r.Message = fmt.Sprintf("drift at %s/%s on %s@%s waits: %s of it ended without a new version; next retrain not before %s",
			trig.Site, trig.Node, r.Model, cur, retrains(r.Attempt), r.NextRetrainAfter.Format(time.RFC3339))
		return nil
	}
	var captured *catalog.DriftCapture
	if want := svc.Retrain.Capture; want != nil {
		captured = captureFor(drifts, *trig, r, have)
		since := trig.AlarmAt
		if captured != nil {
			since = captured.AlarmAt
		}
		if (captured == nil || captured.Dataset == "") && time.Since(since) < time.Duration(want.Timeout) {
			// The retrain waits for the drifted site's ground truth; the
			// drift record shows how much has come.
			r.Message = fmt.Sprintf("drift at %s/%s on %s@%s: the retrain waits for %d labelled rows posted to %s (%d so far), until %s",
				trig.Site, trig.Node, svc.Model.Name, cur, want.Rows, trig.Node, capturedRows(captured), since.Add(time.Duration(want.Timeout)).UTC().Format(time.RFC3339))
			return nil
		}
	}
	return c.startRetrain(p, svc, r, cur, *trig, captured)
}

// capturedRows is the rows a capture holds so far; 0 before it begins.
func capturedRows(c *catalog.DriftCapture) int {
	if c == nil {
		return 0
	}
	return c.Rows
}

// captureFor is the capture of the drifted site's ground truth that the
// retrain for trig trains on: the one trig's node began after an alarm
// since the rollout last moved. Nil while none has begun.
func captureFor(drifts []catalog.Drift, trig catalog.Drift, r *catalog.Rollout, have bool) *catalog.DriftCapture {
	var out *catalog.DriftCapture
	for _, d := range drifts {
		c := d.Capture
		if d.Node != trig.Node || c == nil || (have && !c.AlarmAt.After(r.Updated)) {
			continue
		}
		if out == nil || c.AlarmAt.After(out.AlarmAt) || (c.AlarmAt.Equal(out.AlarmAt) && c.Dataset != "") {
			out = c
		}
	}
	return out
}

// advanceRetraining waits for the retrain's job; its model then ends the
// rollout (failed, or unchanged: the bytes served or tried before), is
// promoted at once (strategy all, or nothing to canary on), or becomes
// the canary.
func (c *Controller) advanceRetraining(p catalog.Policy, svc *policy.InferenceServiceSpec, r *catalog.Rollout, drifts []catalog.Drift) {
	j, err := c.cfg.Catalog.Jobs.Value(r.Job)
	if err != nil {
		if rec, err := c.cfg.Catalog.Placements.Value(policy.KindTrainingJob + "/" + r.Job); err == nil && rec.State == catalog.StateFailed && r.Message != rec.Message {
			r.Message, r.Updated = "waiting for a place to train: "+rec.Message, time.Now().UTC()
		}
		return
	}
	if !j.Terminal() {
		return
	}
	// The job's placement is done with: free its nodes.
	_ = c.cfg.Catalog.Policies.Delete(policy.KindTrainingJob + "/" + r.Job)
	if j.State == catalog.JobFailed || j.Version == "" {
		endUnpromoted(r, catalog.StageFailed, "training job %s failed: %s; %s@%s keeps serving", j.Name, cmp.Or(j.Error, "it registered no model"), r.Model, r.From)
		return
	}
	r.To = j.Version
	if same, digest := c.sameModel(r.Model, r.From, r.To); same {
		endUnpromoted(r, catalog.StageUnchanged, "%s@%s trained by %s is the model already served (%s@%s, sha256:%.12s); nothing to roll out", r.Model, r.To, j.Name, r.Model, r.From, digest)
		return
	}
	if t, ok := c.triedBefore(r, r.To); ok {
		// The same data gave the same bytes: a model rolled back is
		// not canaried again.
		endUnpromoted(r, catalog.StageUnchanged, "%s@%s trained by %s is %s@%s again (%s at %s, sha256:%.12s); nothing to roll out",
			r.Model, r.To, j.Name, r.Model, t.Version, t.Outcome, t.At.Format(time.RFC3339), t.Digest)
		return
	}
	if s := svc.Rollout; s != nil && s.Strategy == policy.RolloutAll {
		c.remember(r, r.To, catalog.StagePromoted)
		step(r, catalog.StagePromoted, "%s@%s trained by %s on %s; rolling out everywhere at once (strategy all)", r.Model, r.To, j.Name, j.Node)
		return
	}
	rec, _ := c.cfg.Catalog.Placements.Value(p.Key())
	r.CanaryNodes = canaryNodes(rec, r.CanarySite)
	if len(r.CanaryNodes) == 0 {
		c.remember(r, r.To, catalog.StagePromoted)
		step(r, catalog.StagePromoted, "%s@%s trained by %s; no replica to canary on, promoted everywhere", r.Model, r.To, j.Name)
		return
	}
	r.Baseline = baseline(drifts, r)
	c.remember(r, r.To, catalog.StageCanary)
	step(r, catalog.StageCanary, "%s@%s trained by %s on %s (accuracy %.3f); canary on %s for %d requests", r.Model, r.To, j.Name, j.Node, j.Accuracy, strings.Join(r.CanaryNodes, ","), r.CanaryRequests)
}

// advanceCanary judges the canary from its replicas' drift records: an
// alarm or too many failed requests roll it back, as does a canary that
// has not served or been judged within rollout.canaryTimeout; served
// and judged with no drift, it is promoted.
func (c *Controller) advanceCanary(svc *policy.InferenceServiceSpec, r *catalog.Rollout, drifts []catalog.Drift) {
	var served, failed uint64
	judged := map[string]catalog.Drift{} // canary node → its monitor's record, once it judged
	for _, d := range drifts {
		if d.Version != r.To || !slices.Contains(r.CanaryNodes, d.Node) {
			continue
		}
		served, failed = served+d.Served, failed+d.Failed
		if d.Alarmed {
			r.Served, r.Failed = served, failed
			c.remember(r, r.To, catalog.StageRolledBack)
			endUnpromoted(r, catalog.StageRolledBack, "canary %s@%s drifted at %s too (%s); back to %s", r.Model, r.To, d.Node, alarmFeature(d), r.From)
			return
		}
		if d.State == catalog.DriftOK || d.State == "" && d.Ready { // "": an agent that reports no state
			judged[d.Node] = d
		}
	}
	limit := canaryTimeout(svc)
	if served < uint64(r.CanaryRequests) && time.Since(canaryStart(r)) > limit {
		r.Served, r.Failed = served, failed
		c.remember(r, r.To, catalog.StageRolledBack)
		endUnpromoted(r, catalog.StageRolledBack, "canary %s@%s served %d of %d requests in %s (rollout.canaryTimeout); back to %s", r.Model, r.To, served, r.CanaryRequests, limit, r.From)
		return
	}
	// The drift gate judges once each canary's own monitor has: the
	// requests served alone say nothing of drift while it warms up
	// (a window of 500 rows judges after 700), so the verdict does
	// not depend on how fast requests come.
	var unjudged []string
	if svc.Drift != nil {
		for _, n := range r.CanaryNodes {
			if _, ok := judged[n]; !ok {
				unjudged = append(unjudged, n)
			}
		}
	}
	rate := float64(failed) / float64(max(served, 1))
	// Errors are judged against the current version's on the same nodes
	// before the swap: failures it had as often are the site's traffic
	// (malformed requests, a client's bug), not the new model's.
	b := r.Baseline
	sameAsBefore := b != nil && b.Served >= canaryMinRequests && rate <= float64(b.Failed)/float64(b.Served)
	switch {
	case served >= canaryMinRequests && rate > r.MaxErrorRate && !sameAsBefore:
		r.Served, r.Failed = served, failed
		c.remember(r, r.To, catalog.StageRolledBack)
		endUnpromoted(r, catalog.StageRolledBack, "canary %s@%s failed %d of %d requests (%.1f%% > %.1f%%%s); back to %s", r.Model, r.To, failed, served, 100*rate, 100*r.MaxErrorRate, beforeRate(r.Model, b, "; ", ""), r.From)
	case served >= uint64(r.CanaryRequests) && len(unjudged) > 0 && time.Since(canaryStart(r)) > limit:
		r.Served, r.Failed = served, failed
		c.remember(r, r.To, catalog.StageRolledBack)
		endUnpromoted(r, catalog.StageRolledBack, "canary %s@%s served %d requests, but its drift monitor on %s had not judged in %s (rollout.canaryTimeout; %s); back to %s",
			r.Model, r.To, served, strings.Join(unjudged, ","), limit, c.warming(drifts, r.To, unjudged), r.From)
	case served >= uint64(r.CanaryRequests) && len(unjudged) == 0:
		r.Served, r.Failed = served, failed
		c.remember(r, r.To, catalog.StagePromoted)
		verdict := judgedNoDrift(judged, r.CanaryNodes)
		if b != nil && b.Drift != "" && verdict != "" {
			verdict += fmt.Sprintf(", where %s@%s had %s", r.Model, b.Version, b.Drift)
		}
		step(r, catalog.StagePromoted, "canary %s@%s served %d requests, %d failed%s; %s; promoted everywhere", r.Model, r.To, served, failed, beforeRate(r.Model, b, " (", ")"), verdict)
	default:
		msg := fmt.Sprintf("canary %s@%s on %s: %d of %d requests, %d failed", r.Model, r.To, strings.Join(r.CanaryNodes, ","), served, r.CanaryRequests, failed)
		if served >= uint64(r.CanaryRequests) {
			msg += fmt.Sprintf("; waiting for the drift monitor on %s to judge (%s)", strings.Join(unjudged, ","), c.warming(drifts, r.To, unjudged))
		}
		if served == r.Served && failed == r.Failed && msg == r.Message {
			return
		}
		r.Served, r.Failed, r.Updated, r.Message = served, failed, time.Now().UTC(), msg
	}
}

// baseline is the current version's record on the canary nodes as the
// canary starts: their requests on it, and what their monitors (or the
// alarm that started the retrain, on one of them) said of it.
func baseline(drifts []catalog.Drift, r *catalog.Rollout) *catalog.CanaryBaseline {
	b := &catalog.CanaryBaseline{Version: r.From}
	var said []string
	for _, d := range drifts {
		if d.Version != r.From || !slices.Contains(r.CanaryNodes, d.Node) {
			continue
		}
		b.Served, b.Failed = b.Served+d.Served, b.Failed+d.Failed
		if d.Alarmed {
			feature, det, stat := d.AlarmCause()
			said = append(said, fmt.Sprintf("an alarm on %s (%s %.3g) after %d rows on %s", feature, det, stat, d.AlarmSeen, d.Node))
		}
	}
	if tr := r.Trigger; len(said) == 0 && tr != nil && slices.Contains(r.CanaryNodes, tr.Node) {
		said = append(said, fmt.Sprintf("an alarm on %s (%s %.3g) after %d rows on %s", tr.Feature, tr.Detector, tr.Statistic, tr.Samples, tr.Node))
	}
	b.Drift = strings.Join(said, "; ")
	if b.Served == 0 && b.Drift == "" {
		return nil
	}
	return b
}

// beforeRate says how often the current version failed on the canary
// nodes before the canary, wrapped as wrap says (prefix, suffix); ""
// when unknown.
func beforeRate(model string, b *catalog.CanaryBaseline, prefix, suffix string) string {
	if b == nil || b.Served == 0 {
		return ""
	}
	return fmt.Sprintf("%s%s@%s failed %d of %d there before: %.1f%%%s", prefix, model, b.Version, b.Failed, b.Served, 100*float64(b.Failed)/float64(b.Served), suffix)
}

// sameModel reports whether two versions of a model have the same bytes,
// and their digest.
func (c *Controller) sameModel(model, a, b string) (bool, string) {
	ma, err := c.cfg.Artifacts.Lookup(storage.KindModel, model, a)
	if err != nil {
		return false, ""
	}
	mb, err := c.cfg.Artifacts.Lookup(storage.KindModel, model, b)
	if err != nil {
		return false, ""
	}
	return ma.Digest == mb.Digest, ma.Digest
}

// canaryTimeout is how long a canary may take to serve its requests.
func canaryTimeout(svc *policy.InferenceServiceSpec) time.Duration {
	if r := svc.Rollout; r != nil && r.CanaryTimeout > 0 {
		return time.Duration(r.CanaryTimeout)
	}
	return policy.DefaultCanaryTimeout
}

// warming says how far the monitors of version on nodes are from
// judging: rows seen of the rows they need.
func (c *Controller) warming(drifts []catalog.Drift, version string, nodes []string) string {
	var parts []string
	for _, n := range nodes {
		part := n + ": no monitor reported yet"
		for _, d := range drifts {
			switch {
			case d.Version != version || d.Node != n || d.Alarmed:
			case d.State == catalog.DriftError:
				part = fmt.Sprintf("%s: its monitor cannot run: %s", n, d.Error)
			default:
				part = fmt.Sprintf("%s: warming, %d of %d rows", n, d.Seen, judgeRows(d))
			}
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// judgeRows is how many rows a monitor sees before it first judges: its
// window, after as many again to collect a reference taken from the first
// rows (reference: first).
func judgeRows(d catalog.Drift) int64 {
	if d.Reference == "first" {
		return 2 * int64(d.Window)
	}
	return int64(d.Window)
}

// judgedNoDrift says what the canaries' monitors judged: the rows each
// saw and its worst feature, the evidence for a promotion.
func judgedNoDrift(judged map[string]catalog.Drift, nodes []string) string {
	var parts []string
	for _, n := range nodes {
		d, ok := judged[n]
		if !ok {
			continue
		}
		part := fmt.Sprintf("no drift on %s after %d rows", n, d.Seen)
		if ws := catalog.WorstScore(d.Scores, d.Detector); ws.Name != "" {
			part += fmt.Sprintf(" (worst %s %s %.3g)", ws.Name, d.Detector, catalog.ScoreStat(ws, d.Detector))
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "no drift monitor"
	}
	return strings.Join(parts, ", ")
}

// canaryStart is when the rollout entered its canary stage.
func canaryStart(r *catalog.Rollout) time.Time {
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].Stage == catalog.StageCanary {
			return r.Steps[i].Time
		}
	}
	return r.Updated
}

// canaryNodes are the placed replicas in the drifted site, else the first.
func canaryNodes(rec catalog.Placement, site string) []string {
	var out []string
	for _, n := range rec.Nodes {
		if n.Site == site {
			out = append(out, n.Name)
		}
	}
	if len(out) == 0 && len(rec.Nodes) > 0 {
		out = []string{rec.Nodes[0].Name}
	}
	return out
}

// startRetrain applies the service's retrain template as a TrainingJob
// whose output becomes the model's next version.
func (c *Controller) startRetrain(p catalog.Policy, svc *policy.InferenceServiceSpec, r *catalog.Rollout, cur string, d catalog.Drift, captured *catalog.DriftCapture) error {
	seq := r.Seq + 1
	steps, tried := r.Steps, r.Tried
	attempt := 1
	if r.From == cur {
		// The last rollout left cur serving: this retrain counts on.
		attempt = r.Attempt + 1
	}
	*r = catalog.Rollout{Policy: p.Key(), Generation: p.Generation, Seq: seq, Model: svc.Model.Name, From: cur, CanarySite: d.Site, Started: time.Now().UTC(), Steps: steps, Attempt: attempt, Tried: tried}
	c.remember(r, cur, catalog.OutcomeServed)
	if len(r.Steps) > 20 {
		r.Steps = slices.Delete(r.Steps, 0, len(r.Steps)-20)
	}
	r.CanaryRequests, r.MaxErrorRate = 100, 0.01
	if s := svc.Rollout; s != nil {
		if s.CanaryRequests > 0 {
			r.CanaryRequests = s.CanaryRequests
		}
		if s.MaxErrorRate > 0 {
			r.MaxErrorRate = s.MaxErrorRate
		}
	}
	feature, det, stat := d.AlarmCause()
	r.Trigger = &catalog.DriftTrigger{Site: d.Site, Node: d.Node, Version: d.Version, Samples: d.AlarmSeen, At: d.AlarmAt, Feature: feature, Statistic: stat, Detector: det}
	for _, s := range d.Scores {
		if s.Drifted {
			r.Trigger.Drifted = append(r.Trigger.Drifted, s.Name)
		}
	}
	for _, name := range d.AlarmDrifted {
		if !slices.Contains(r.Trigger.Drifted, name) {
			r.Trigger.Drifted = append(r.Trigger.Drifted, name)
		}
	}
	r.To = c.cfg.Artifacts.NextVersion(svc.Model.Name, cur)
	r.Job = fmt.Sprintf("%s-retrain-%d", p.Name, seq)
	for {
		// A job name left by an earlier generation is not reused.
		if _, err := c.cfg.Catalog.Jobs.Value(r.Job); errors.Is(err, mesh.ErrNotFound) {
			break
		}
		seq++
		r.Seq, r.Job = seq, fmt.Sprintf("%s-retrain-%d", p.Name, seq)
	}
	var capture *policy.DataRef
	data := "its data"
	if want := svc.Retrain.Capture; want != nil {
		if captured != nil && captured.Dataset != "" {
			capture = &policy.DataRef{Dataset: captured.Dataset}
			if svc.Retrain.Launcher == policy.LauncherBuiltin {
				capture.Mix = want.Mix
			}
			data = fmt.Sprintf("its data and %s (%d rows captured at %s, mix %g)", captured.Dataset, captured.Rows, d.Site, capture.Mix)
		} else {
			data = fmt.Sprintf("its data alone: %d of %d labelled rows came from %s within %s", capturedRows(captured), want.Rows, d.Site, time.Duration(want.Timeout))
		}
	}
	src, err := retrainSource(p, r.Job, svc.Model.Name, cur, r.To, capture)
	if err != nil {
		endUnpromoted(r, catalog.StageFailed, "retrain template: %v", err)
		return err
	}
	job := catalog.Policy{Kind: policy.KindTrainingJob, Name: r.Job, Source: src, File: p.File, Generation: 1, Applied: time.Now().UTC(), AppliedAt: c.cfg.Mesh.Name(), Site: p.Site}
	if _, err := c.cfg.Catalog.Policies.Put(job); err != nil {
		return err
	}
	step(r, catalog.StageRetraining, "drift at %s/%s on %s@%s (%s %s=%.4g after %d samples); training %s@%s as job %s on %s",
		d.Site, d.Node, r.Model, cur, det, feature, stat, d.AlarmSeen, r.Model, r.To, r.Job, data)
	c.log.Info("drift detected: retraining", "policy", p.Key(), "site", d.Site, "job", r.Job, "to", r.To)
	return nil
}

// retrainSource writes the TrainingJob document for a service's retrain:
// its spec is the service's retrain: block as written, without capture:
// and with the captured dataset, if any, added to its data; labels name
// the service, the version it retrains (when known) and the model version
// the job registers.
func retrainSource(p catalog.Policy, job, model, from, version string, capture *policy.DataRef) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(p.Source), &root); err != nil {
		return "", err
	}
	spec := mapValue(mapValue(root.Content[0], "spec"), "retrain")
	if spec == nil {
		return "", fmt.Errorf("%s has no spec.retrain", p.Key())
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!str"} }
	for i := 0; i+1 < len(spec.Content); i += 2 {
		if spec.Content[i].Value == "capture" {
			spec.Content = slices.Delete(spec.Content, i, i+2)
			break
		}
	}
	if capture != nil {
		ref := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str("dataset"), str(capture.Dataset)}}
		if capture.Mix > 0 {
			ref.Content = append(ref.Content, str("mix"), &yaml.Node{Kind: yaml.ScalarNode, Value: strconv.FormatFloat(capture.Mix, 'g', -1, 64), Tag: "!!float"})
		}
		data := mapValue(spec, "data")
		if data == nil {
			data = &yaml.Node{Kind: yaml.SequenceNode}
			spec.Content = append(spec.Content, str("data"), data)
		}
		data.Content = append(data.Content, ref)
	}
	labels := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str(catalog.LabelRetrainOf), str(p.Name), str(catalog.LabelOutputModel), str(model), str(catalog.LabelOutputVersion), str(version),
	}}
	if from != "" {
		labels.Content = append(labels.Content, str(catalog.LabelRetrainFrom), str(from))
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("apiVersion"), str("strata/v1"),
		str("kind"), str(policy.KindTrainingJob),
		str("metadata"), {Kind: yaml.MappingNode, Content: []*yaml.Node{str("name"), str(job), str("labels"), labels}},
		str("spec"), spec,
	}}
	return render(p.File, doc)
}

// render writes doc as YAML that parses as a policy of file, as the
// policies a user applies do.
func render(file string, doc *yaml.Node) (string, error) {
	b, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	if _, err := policy.Parse(file, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// mapValue is the value of key in mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// alarmFeature names the feature a drift alarm is about.
func alarmFeature(d catalog.Drift) string {
	f, _, _ := d.AlarmCause()
	return f
}
