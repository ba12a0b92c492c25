package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/serving"

	"gopkg.in/yaml.v3"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// canaryMinRequests is how many requests a canary serves before its error
// rate can roll it back.
const canaryMinRequests = 20

func step(r *RolloutRecord, stage, format string, args ...any) {
	r.Stage, r.Message, r.Updated = stage, fmt.Sprintf(format, args...), time.Now().UTC()
	r.Steps = append(r.Steps, RolloutStep{Time: r.Updated, Stage: stage, Message: r.Message})
}

// rollouts drives the retrain-and-rollout of every service this agent owns:
// a drift alarm on the served version starts a TrainingJob; its model
// becomes a canary at the drifted site; the canary is promoted after its
// requests without regression, or rolled back.
func (c *controller) rollouts() {
	a := c.a
	owners := controllers(a.mesh.Nodes())
	var drifts []DriftRecord
	for _, p := range a.policies() {
		if p.Kind != policy.KindInferenceService || placement.Owner(p.Key(), owners) != a.cfg.Name {
			continue
		}
		doc, err := p.Document()
		if err != nil || doc.InferenceService == nil || doc.InferenceService.Retrain == nil {
			continue
		}
		if drifts == nil {
			drifts = a.driftRecords()
		}
		var mine []DriftRecord
		for _, d := range drifts {
			if d.Policy == p.Key() {
				mine = append(mine, d)
			}
		}
		r, have := a.cat.ActiveRollout(p)
		before, _ := json.Marshal(r)
		if err := c.advance(p, doc, &r, have, mine); err != nil {
			a.log.Warn("rollout", "policy", p.Key(), "err", err)
		}
		if after, _ := json.Marshal(r); r.Stage != "" && string(after) != string(before) {
			var deps []mesh.Dep
			if ref, ok := a.cat.Policies.Ref(p.Key()); ok {
				deps = append(deps, ref)
			}
			if _, err := a.cat.Rollouts.Put(r, deps...); err != nil {
				a.log.Warn("writing rollout", "policy", p.Key(), "err", err)
			}
		}
	}
}

func (c *controller) advance(p PolicyRecord, doc *policy.Document, r *RolloutRecord, have bool, drifts []DriftRecord) error {
	a := c.a
	svc := doc.InferenceService
	switch {
	case !have || !r.Active():
		cur := svc.Model.Version
		if have {
			cur = r.From
			if r.Stage == StagePromoted {
				cur = r.To
			}
		} else if m, err := serving.ModelManifest(a.art, svc.Model); err == nil {
			cur = m.Version
		}
		var trig *DriftRecord
		for i, d := range drifts {
			if d.Alarmed && d.Version == cur && (!have || d.AlarmAt.After(r.Updated)) {
				trig = &drifts[i]
				break
			}
		}
		if trig == nil {
			return nil
		}
		return c.startRetrain(p, svc, r, cur, *trig)
	case r.Stage == StageRetraining:
		j, err := a.job(r.Job)
		if err != nil {
			if rec, ok := a.placements()[policy.KindTrainingJob+"/"+r.Job]; ok && rec.State == StateFailed && r.Message != rec.Message {
				r.Message, r.Updated = "waiting for a place to train: "+rec.Message, time.Now().UTC()
			}
			return nil
		}
		if !j.Terminal() {
			return nil
		}
		// The job's placement is done with: free its nodes.
		_ = a.cat.Policies.Delete(policy.KindTrainingJob + "/" + r.Job)
		if j.State == JobFailed || j.Version == "" {
			step(r, StageFailed, "training job %s failed: %s; %s@%s keeps serving", j.Name, cmp.Or(j.Error, "it registered no model"), r.Model, r.From)
			return nil
		}
		r.To = j.Version
		if s := svc.Rollout; s != nil && s.Strategy == policy.RolloutAll {
			step(r, StagePromoted, "%s@%s trained by %s on %s; rolling out everywhere at once (strategy all)", r.Model, r.To, j.Name, j.Node)
			return nil
		}
		r.CanaryNodes = canaryNodes(a.placements()[p.Key()], r.CanarySite)
		if len(r.CanaryNodes) == 0 {
			step(r, StagePromoted, "%s@%s trained by %s; no replica to canary on, promoted everywhere", r.Model, r.To, j.Name)
			return nil
		}
		step(r, StageCanary, "%s@%s trained by %s on %s (accuracy %.3f); canary on %s for %d requests", r.Model, r.To, j.Name, j.Node, j.Accuracy, strings.Join(r.CanaryNodes, ","), r.CanaryRequests)
	case r.Stage == StageCanary:
		var served, failed uint64
		for _, d := range drifts {
			if d.Version != r.To || !slices.Contains(r.CanaryNodes, d.Node) {
				continue
			}
			served, failed = served+d.Served, failed+d.Failed
			if d.Alarmed {
				r.Served, r.Failed = served, failed
				step(r, StageRolledBack, "canary %s@%s drifted at %s too (%s); back to %s", r.Model, r.To, d.Node, catalog.WorstScore(d.Scores, d.Detector).Name, r.From)
				return nil
			}
		}
		if served == r.Served && failed == r.Failed {
			return nil
		}
		r.Served, r.Failed, r.Updated = served, failed, time.Now().UTC()
		rate := float64(failed) / float64(max(served, 1))
		switch {
		case served >= canaryMinRequests && rate > r.MaxErrorRate:
			step(r, StageRolledBack, "canary %s@%s failed %d of %d requests (%.1f%% > %.1f%%); back to %s", r.Model, r.To, failed, served, 100*rate, 100*r.MaxErrorRate, r.From)
		case served >= uint64(r.CanaryRequests):
			step(r, StagePromoted, "canary %s@%s served %d requests, %d failed, no drift; promoted everywhere", r.Model, r.To, served, failed)
		default:
			r.Message = fmt.Sprintf("canary %s@%s on %s: %d of %d requests, %d failed", r.Model, r.To, strings.Join(r.CanaryNodes, ","), served, r.CanaryRequests, failed)
		}
	}
	return nil
}

// canaryNodes are the placed replicas in the drifted site, else the first.
func canaryNodes(rec PlacementRecord, site string) []string {
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
func (c *controller) startRetrain(p PolicyRecord, svc *policy.InferenceServiceSpec, r *RolloutRecord, cur string, d DriftRecord) error {
	a := c.a
	seq := r.Seq + 1
	steps := r.Steps
	*r = RolloutRecord{Policy: p.Key(), Generation: p.Generation, Seq: seq, Model: svc.Model.Name, From: cur, CanarySite: d.Site, Started: time.Now().UTC(), Steps: steps}
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
	ws := catalog.WorstScore(d.Scores, d.Detector)
	r.Trigger = &DriftTrigger{Site: d.Site, Node: d.Node, Version: d.Version, Samples: d.AlarmSeen, At: d.AlarmAt, Feature: ws.Name, Statistic: catalog.ScoreStat(ws, d.Detector), Detector: d.Detector}
	for _, s := range d.Scores {
		if s.Drifted {
			r.Trigger.Drifted = append(r.Trigger.Drifted, s.Name)
		}
	}
	r.To = a.art.NextVersion(svc.Model.Name, cur)
	r.Job = fmt.Sprintf("%s-retrain-%d", p.Name, seq)
	for {
		// A job name left by an earlier generation is not reused.
		if _, err := a.job(r.Job); errors.Is(err, mesh.ErrNotFound) {
			break
		}
		seq++
		r.Seq, r.Job = seq, fmt.Sprintf("%s-retrain-%d", p.Name, seq)
	}
	src, err := retrainSource(p, r.Job, svc.Model.Name, r.To)
	if err != nil {
		step(r, StageFailed, "retrain template: %v", err)
		return err
	}
	job := PolicyRecord{Kind: policy.KindTrainingJob, Name: r.Job, Source: src, File: p.File, Generation: 1, Applied: time.Now().UTC(), AppliedAt: a.cfg.Name}
	if _, err := a.cat.Policies.Put(job); err != nil {
		return err
	}
	step(r, StageRetraining, "drift at %s/%s on %s@%s (%s %s=%.4g after %d samples); training %s@%s as job %s",
		d.Site, d.Node, r.Model, cur, d.Detector, ws.Name, catalog.ScoreStat(ws, d.Detector), d.AlarmSeen, r.Model, r.To, r.Job)
	a.log.Info("drift detected: retraining", "policy", p.Key(), "site", d.Site, "job", r.Job, "to", r.To)
	return nil
}

// retrainSource writes the TrainingJob document for a service's retrain:
// its spec is the service's retrain: block as written; labels name the
// service and the model version the job registers.
func retrainSource(p PolicyRecord, job, model, version string) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(p.Source), &root); err != nil {
		return "", err
	}
	spec := mapValue(mapValue(root.Content[0], "spec"), "retrain")
	if spec == nil {
		return "", fmt.Errorf("%s has no spec.retrain", p.Key())
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!str"} }
	labels := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str(LabelRetrainOf), str(p.Name), str(LabelOutputModel), str(model), str(LabelOutputVersion), str(version),
	}}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("apiVersion"), str("strata/v1"),
		str("kind"), str(policy.KindTrainingJob),
		str("metadata"), {Kind: yaml.MappingNode, Content: []*yaml.Node{str("name"), str(job), str("labels"), labels}},
		str("spec"), spec,
	}}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	if _, err := parsePolicies(p.File, b); err != nil {
		return "", err
	}
	return string(b), nil
}

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
