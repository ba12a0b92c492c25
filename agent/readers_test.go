package agent

import (
	"sort"

	"github.com/strata-mesh/strata/internal/catalog"
)

// Readers of the agent's catalog for the tests.

func (a *Agent) placements() map[string]PlacementRecord {
	recs, _ := a.cat.Placements.Values()
	out := make(map[string]PlacementRecord, len(recs))
	for _, p := range recs {
		out[p.Key] = p
	}
	return out
}

func (a *Agent) driftRecords() []DriftRecord {
	out, _ := a.cat.Drift.Values()
	return out
}

// jobs returns every job record, newest first.
func (a *Agent) jobs() []JobRecord {
	out, _ := a.cat.Jobs.Values()
	sort.Slice(out, func(i, k int) bool { return out[i].Created.After(out[k].Created) })
	return out
}

func (a *Agent) job(name string) (catalog.Job, error) { return a.cat.Jobs.Value(name) }
