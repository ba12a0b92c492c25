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

// referenceWarnings warns when a service watches drift against a training
// reference too small for its settings: fewer rows than minReferenceRows
// or than its window. A reference that is missing or does not parse is
// the monitor's error, not a warning here.
func (s *Server) referenceWarnings(p catalog.Policy) []string {
	doc, err := p.Document()
	if err != nil || doc.InferenceService == nil || doc.InferenceService.Drift == nil {
		return nil
	}
	svc := doc.InferenceService
	spec := svc.Drift
	if spec.Reference != policy.ReferenceTraining {
		return nil
	}
	m, err := serving.ModelManifest(s.cfg.Artifacts, svc.Model)
	if err != nil || m.Metadata[catalog.MetaReference] == "" {
		return nil
	}
	var ref drift.Reference
	if json.Unmarshal([]byte(m.Metadata[catalog.MetaReference]), &ref) != nil {
		return nil
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
	need := max(minReferenceRows, spec.Window)
	if least < 0 || least >= need {
		return nil
	}
	return []string{fmt.Sprintf("the drift reference of %s summarises %d rows of %s, fewer than %d (at least %d, and the window of %d): %s's alarms would be noise; publish the model with a larger reference, or watch with drift.reference: first",
		m.Name+"@"+m.Version, least, feature, need, minReferenceRows, spec.Window, p.Key())}
}
