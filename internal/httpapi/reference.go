package httpapi

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/serving"
	"github.com/strata-mesh/strata/policy"
)

// minReferenceRows is the fewest rows a training reference should
// summarise for its alarms to mean something, whatever the window: with
// fewer, its bins and the streaming detector's threshold are noise (a
// reference of 27 rows put the threshold at 24.5, and a 2σ shift took up
// to twice the samples the docs promise).
const minReferenceRows = 100

// referenceWarnings warns when a service watches drift with settings that
// cannot work as written: a canary gate of fewer requests than the
// monitor needs rows (canaryWarnings), and, by its training reference, a
// window longer than the rows the reference summarises (a live series as short as the training data never
// fills it: only the streaming detector or a smaller window alarms), and
// a reference of fewer than minReferenceRows rows (its bins, and the
// streaming detector's threshold for the configured false-alarm rate, are
// noise). A reference that is missing or does not parse is the monitor's
// error, not a warning here.
func (s *Server) referenceWarnings(p catalog.Policy) []string {
	doc, err := p.Document()
	if err != nil || doc.InferenceService == nil || doc.InferenceService.Drift == nil {
		return nil
	}
	svc := doc.InferenceService
	spec := svc.Drift
	out := canaryWarnings(p, svc)
	if spec.Reference != policy.ReferenceTraining {
		return out
	}
	m, err := serving.ModelManifest(s.cfg.Artifacts, svc.Model)
	if err != nil || m.Metadata[catalog.MetaReference] == "" {
		return out
	}
	var ref drift.Reference
	if json.Unmarshal([]byte(m.Metadata[catalog.MetaReference]), &ref) != nil {
		return out
	}
	least, feature := -1, ""
	for _, f := range ref.Features {
		if len(spec.Features) > 0 && !slices.Contains(spec.Features, f.Name) {
			continue
		}
		if least < 0 || f.Count < least {
			least, feature = f.Count, f.Name
		}
	}
	if least < 0 {
		return out
	}
	model := m.Name + "@" + m.Version
	if spec.Window > least {
		// The windowed detector judges every Window/5 rows once the window
		// is full and alarms on the third evaluation in a row.
		first := spec.Window + 2*policy.DriftEvery(spec.Window)
		smaller := ""
		if least >= policy.MinDriftWindow {
			smaller = " or a window of at most " + fmt.Sprint(least)
		}
		fix := "watch with drift.stream: {} (it alarms within tens of rows)" + smaller
		if spec.Stream.On() {
			fix = "only its streaming detector can alarm on such a series"
			if smaller != "" {
				fix += "; or set a window of at most " + fmt.Sprint(least)
			}
		}
		out = append(out, fmt.Sprintf("%s: drift.window %d is longer than the %d rows of %s that the drift reference of %s summarises: a live series as short as the data the model was trained on never fills the window, and the windowed detector needs %d rows before it can alarm; %s",
			p.Key(), spec.Window, least, feature, model, first, fix))
	}
	if least < minReferenceRows {
		stream := ""
		if spec.Stream.On() {
			stream = " (for the streaming detector, its threshold for a false alarm in every " + fmt.Sprint(spec.Stream.FalseAlarmEvery) + " rows rises with the reference's own error, and shifts take longer to catch than documented)"
		}
		out = append(out, fmt.Sprintf("the drift reference of %s summarises %d rows of %s, fewer than %d: %s's alarms would be noise%s; publish the model with a larger reference, or watch with drift.reference: first",
			model, least, feature, minReferenceRows, p.Key(), stream))
	}
	return out
}

// canaryWarnings warns when a service's canary gate asks for fewer
// requests than its drift monitor needs rows to judge: the canary is
// promoted only once its monitor has judged, so it serves at least that
// many sampled rows whatever canaryRequests says (a gate that counted
// requests alone promoted at 150 rows/s what it rolled back at 3,000).
func canaryWarnings(p catalog.Policy, svc *policy.InferenceServiceSpec) []string {
	r, d := svc.Rollout, svc.Drift
	if r == nil || d == nil || r.Strategy != policy.RolloutCanary || svc.Retrain == nil {
		return nil
	}
	need, first := d.Window, ""
	if d.Reference == policy.ReferenceFirst {
		need, first = 2*d.Window, ", twice over for reference: first"
	}
	if r.CanaryRequests >= need {
		return nil
	}
	return []string{fmt.Sprintf("%s: rollout.canaryRequests %d is fewer than the %d sampled rows its drift monitor needs to judge (drift.window %d%s): a canary is promoted only once its monitor has judged, so it serves at least those rows whatever canaryRequests says",
		p.Key(), r.CanaryRequests, need, d.Window, first)}
}
