package policy

import "fmt"

// DriftEvery is how many sampled rows a windowed drift monitor of window
// rows takes between two checks.
func DriftEvery(window int) int { return max(1, window/5) }

// MinAlarmRows is the fewest sampled rows after which the windowed drift
// monitor d configures can first alarm: a full window, then two checks.
func (d *Drift) MinAlarmRows() int { return d.Window + 2*DriftEvery(d.Window) }

// Warnings says what in a valid document (defaults set) cannot work as
// its author likely expects; plan and apply show them, and apply goes on.
//
//   - A canary that serves fewer requests than the windowed drift
//     detector needs rows before it can alarm: its drift gate cannot fail,
//     so a drifting model is promoted at a low request rate and rolled
//     back at a high one (users measured both, for one model).
func (d *Document) Warnings() []string {
	s := d.InferenceService
	if s == nil || s.Drift == nil || s.Rollout == nil || s.Rollout.Strategy != RolloutCanary || s.Drift.Stream.On() {
		return nil
	}
	if need := s.Drift.MinAlarmRows(); s.Rollout.CanaryRequests < need {
		return []string{fmt.Sprintf("spec.rollout.canaryRequests: %d requests are fewer than the %d sampled rows the windowed drift detector (window %d) needs before it can alarm, so the canary's drift gate cannot fail: set canaryRequests to at least %d, a smaller spec.drift.window, or turn on spec.drift.stream (it alarms within tens of rows)",
			s.Rollout.CanaryRequests, need, s.Drift.Window, need)}
	}
	return nil
}
