package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/storage"
)

// Retrain backoff. A rollout that ends without promoting a new version
// (unchanged, rolled back, failed) leaves the old version serving, and
// its drift monitors may alarm again at once: the canary's replicas go
// back to it and its monitor starts afresh on the same drifted traffic.
// Without a wait each such alarm started another job; users measured
// 8 jobs and 8 rolled-back canaries of one digest in 75 s. The next
// retrain of the same version waits retrainBackoffBase after the first
// ended, doubling after each, at most retrainBackoffMax: under sustained
// drift, retrains start at most at 0, 15 and 45 minutes, then once an
// hour (3 in any hour).
const (
	retrainBackoffBase = 15 * time.Minute
	retrainBackoffMax  = time.Hour
)

// Tried models. A retrain whose model has the bytes of a version the
// service served, canaried or rolled back within triedHorizon ends
// unchanged: a model rolled back is not canaried again on the same data.
// The rollout record keeps at most triedMax of them.
const (
	triedHorizon = 24 * time.Hour
	triedMax     = 20
)

// retrainBackoff is how long after the attempt-th retrain of a version
// ended without promoting the next retrain of it may start.
func retrainBackoff(attempt int) time.Duration {
	d := retrainBackoffBase
	for i := 1; i < attempt && d < retrainBackoffMax; i++ {
		d *= 2
	}
	return min(d, retrainBackoffMax)
}

// endUnpromoted ends a rollout that leaves From serving, setting when the
// next retrain of From may start and saying so in the step (and so in the
// events).
func endUnpromoted(r *catalog.Rollout, stage, format string, args ...any) {
	wait := retrainBackoff(r.Attempt)
	r.NextRetrainAfter = time.Now().UTC().Add(wait).Truncate(time.Second)
	step(r, stage, "%s; next retrain of %s@%s not before %s (backoff %s after %s)",
		fmt.Sprintf(format, args...), r.Model, r.From, r.NextRetrainAfter.Format(time.RFC3339), wait, retrains(r.Attempt))
}

func retrains(n int) string {
	if n == 1 {
		return "1 retrain"
	}
	return fmt.Sprintf("%d retrains", n)
}

// remember notes a version of the rollout's model and its outcome in
// r.Tried, dropping entries older than triedHorizon and the oldest past
// triedMax.
func (c *Controller) remember(r *catalog.Rollout, version, outcome string) {
	if version == "" {
		return
	}
	now := time.Now().UTC()
	t := catalog.TriedModel{Version: version, Outcome: outcome, At: now}
	if m, err := c.cfg.Artifacts.Lookup(storage.KindModel, r.Model, version); err == nil {
		t.Digest = m.Digest
	}
	r.Tried = slices.DeleteFunc(r.Tried, func(o catalog.TriedModel) bool {
		return o.Version == version || now.Sub(o.At) > triedHorizon
	})
	r.Tried = append(r.Tried, t)
	if len(r.Tried) > triedMax {
		r.Tried = slices.Delete(r.Tried, 0, len(r.Tried)-triedMax)
	}
}

// triedBefore returns the version in r.Tried (within triedHorizon) with
// the same bytes as the rollout's model at version, if any.
func (c *Controller) triedBefore(r *catalog.Rollout, version string) (catalog.TriedModel, bool) {
	m, err := c.cfg.Artifacts.Lookup(storage.KindModel, r.Model, version)
	if err != nil || m.Digest == "" {
		return catalog.TriedModel{}, false
	}
	now := time.Now()
	for i := len(r.Tried) - 1; i >= 0; i-- {
		t := r.Tried[i]
		if t.Version == version || now.Sub(t.At) > triedHorizon {
			continue
		}
		d := t.Digest
		if d == "" {
			if o, err := c.cfg.Artifacts.Lookup(storage.KindModel, r.Model, t.Version); err == nil {
				d = o.Digest
			}
		}
		if d == m.Digest {
			t.Digest = d
			return t, true
		}
	}
	return catalog.TriedModel{}, false
}

// countRollout counts what one pass decided for a service's rollout, was
// before it and now after, once the record is written (a write that fails
// is decided again, and counted, in a later pass): a retrain started
// (strata_retrains_started_total), a retrain ended
// (strata_retrains_total) and a rollout ended (strata_rollouts_total).
// A pass may do several: a retrain whose template does not apply starts,
// fails and ends its rollout at once. Each counts on the controller that
// decided it; after the service's owner changes mid-rollout, the new
// owner counts the end.
func (c *Controller) countRollout(service string, was, now catalog.Rollout) {
	if c.rolloutEnds == nil {
		return
	}
	started := now.Seq != was.Seq
	if started {
		c.retrainStarts.WithLabelValues(service).Inc()
		// Every outcome is exported from the first retrain on, at 0
		// until it happens, so that increase() sees its first one.
		for _, o := range []string{"succeeded", "failed"} {
			c.retrainEnds.WithLabelValues(service, o)
		}
		for _, o := range rolloutOutcomes {
			c.rolloutEnds.WithLabelValues(service, o)
		}
	}
	if (started || was.Stage == catalog.StageRetraining) && now.Stage != catalog.StageRetraining {
		outcome := "succeeded"
		if now.Stage == catalog.StageFailed {
			outcome = "failed"
		}
		c.retrainEnds.WithLabelValues(service, outcome).Inc()
	}
	if !now.Active() && (started || was.Active()) {
		c.rolloutEnds.WithLabelValues(service, rolloutOutcome(now.Stage)).Inc()
	}
}

// rolloutOutcomes are the outcome labels of strata_rollouts_total: the
// stages a rollout ends in, as Prometheus label values (rolled_back for
// the stage rolled-back).
var rolloutOutcomes = []string{
	rolloutOutcome(catalog.StagePromoted), rolloutOutcome(catalog.StageRolledBack),
	rolloutOutcome(catalog.StageUnchanged), rolloutOutcome(catalog.StageFailed),
}

func rolloutOutcome(stage string) string { return strings.ReplaceAll(stage, "-", "_") }
