package catalog

import (
	"strings"

	"github.com/strata-mesh/strata/policy"
)

// NextGeneration is the generation for the next apply of the policy key
// that changes it: one past the live policy's, and for a policy applied
// anew (never, or deleted) one past every generation that records left
// by earlier policies of that key hold (its placement, rollout,
// experiment, and jobs, which are never deleted). Generations of a key
// never restart, so a job, rollout or trial of a deleted policy is never
// read as a later one's: a TrainingJob applied again after a delete runs
// again, a sweep applied again proposes fresh trials. It reads every job
// record, so it is for applies, not hot paths.
func (c *Catalog) NextGeneration(key string) uint64 {
	if p, err := c.Policies.Value(key); err == nil {
		return p.Generation + 1
	}
	var last uint64
	if r, err := c.Placements.Value(key); err == nil {
		last = max(last, r.Generation)
	}
	if r, err := c.Rollouts.Value(key); err == nil {
		last = max(last, r.Generation)
	}
	if kind, name, ok := strings.Cut(key, "/"); ok && kind == policy.KindTrainingJob {
		if e, err := c.Experiments.Value(name); err == nil && e.Key == key {
			last = max(last, e.Generation)
		}
	}
	jobs, _ := c.Jobs.Values()
	for _, j := range jobs {
		if j.Key == key {
			last = max(last, j.Generation)
		}
	}
	return last + 1
}
