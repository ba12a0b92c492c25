package agent

import (
	"sort"

	"github.com/strata-mesh/strata/policy"
)

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
	return rec.Document()
}
