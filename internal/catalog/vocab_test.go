package catalog

import (
	"testing"

	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/trainer"
)

// TestVocabularyMatchesTheDomain: the values the catalog judges records
// by, which it keeps rather than import the packages that produce them,
// are those packages' values.
func TestVocabularyMatchesTheDomain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ catalog, domain string }{
		{detectorKS, string(drift.DetectorKS)},
		{sourceStream, string(drift.SourceStream)},
		{JobPending, string(trainer.StatePending)},
		{JobRunning, string(trainer.StateRunning)},
		{JobSucceeded, string(trainer.StateSucceeded)},
		{JobFailed, string(trainer.StateFailed)},
	} {
		if c.catalog != c.domain {
			t.Errorf("catalog says %q where the domain says %q", c.catalog, c.domain)
		}
	}
}
