package agent

import (
	"sort"
)

// jobs returns every job record, newest first.
func (a *Agent) jobs() []JobRecord {
	out, err := a.cat.Jobs.Values()
	a.decodeErrors(err)
	sort.Slice(out, func(i, k int) bool {
		if !out[i].Created.Equal(out[k].Created) {
			return out[i].Created.After(out[k].Created)
		}
		return out[i].Name < out[k].Name
	})
	return out
}

// job returns one job's record.
func (a *Agent) job(name string) (JobRecord, error) {
	return a.cat.Jobs.Value(name)
}
