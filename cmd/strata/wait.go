package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/policy"
)

// applyWaitEvery is how often apply --wait reads the placements: often
// enough that a change shows within a second, as `strata placements`
// would show it.
const applyWaitEvery = time.Second

// progress is where one applied policy stands, as apply --wait tells it.
type progress struct {
	state, message string
	// ready: placed and serving, or a training job (or sweep) running or
	// done; failed: it will not get there without a change.
	ready, failed bool
}

func (p progress) String() string {
	if p.message == "" {
		return p.state
	}
	return p.state + ": " + p.message
}

// waitApplied waits until every applied policy is ready, printing each
// policy's progress on w when it changes. It returns an exit error of
// code 2 when one fails (with why) or when ctx ends first (with what it
// was waiting for); timeout is only for saying so.
func waitApplied(ctx context.Context, cl *client.Client, applied []api.ApplyResult, w io.Writer, every, timeout time.Duration) error {
	want := map[string]uint64{} // policy → generation applied
	var order []string
	for _, r := range applied {
		want[r.Policy] = r.Generation
		order = append(order, r.Policy)
	}
	shown := map[string]progress{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		states, err := applyProgress(ctx, cl, want)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil {
			var waiting []string
			for _, key := range order {
				p := states[key]
				if p != shown[key] {
					fmt.Fprintf(w, "%s: %s\n", key, p)
					shown[key] = p
				}
				switch {
				case p.failed:
					return &exitError{code: 2, err: fmt.Errorf("%s failed: %s", key, p.message)}
				case !p.ready:
					waiting = append(waiting, key)
				}
			}
			if len(waiting) == 0 {
				return nil
			}
			order = waiting
		}
		if ctx.Err() == nil {
			select {
			case <-tick.C:
				continue
			case <-ctx.Done():
			}
		}
		var what []string
		for _, key := range order {
			what = append(what, fmt.Sprintf("%s (%s)", key, shown[key]))
		}
		return &exitError{code: 2, err: fmt.Errorf("timed out after %s waiting for %s", timeout, strings.Join(what, "; "))}
	}
}

// applyProgress reads where each policy of want (key → generation) stands.
func applyProgress(ctx context.Context, cl *client.Client, want map[string]uint64) (map[string]progress, error) {
	placements, err := cl.Placements(ctx)
	if err != nil {
		return nil, err
	}
	var jobs []api.Job
	var exps []api.Experiment
	for key := range want {
		if strings.HasPrefix(key, policy.KindTrainingJob+"/") {
			if jobs, err = cl.Jobs(ctx); err != nil {
				return nil, err
			}
			if exps, err = cl.Experiments(ctx); err != nil && !isNotFound(err) {
				return nil, err
			}
			break
		}
	}
	out := map[string]progress{}
	for key, gen := range want {
		out[key] = progressOf(key, gen, placements, jobs, exps)
	}
	return out, nil
}

func isNotFound(err error) bool {
	var ae *client.Error
	return errors.As(err, &ae) && ae.Status == 404
}

// progressOf says where the policy key, applied at generation gen,
// stands: an inference service is ready once its placement is placed
// (every replica serving: see GET /v1/placements); a training job once its
// run's record says it runs or is done, a sweep once its experiment runs.
func progressOf(key string, gen uint64, placements []api.PlacementStatus, jobs []api.Job, exps []api.Experiment) progress {
	i := slices.IndexFunc(placements, func(p api.PlacementStatus) bool { return p.Policy == key })
	if i < 0 {
		return progress{state: api.StatePending, message: "not listed yet"}
	}
	ps := placements[i]
	if ps.PlacedGeneration != 0 && ps.PlacedGeneration < gen {
		return progress{state: api.StatePending, message: fmt.Sprintf("generation %d is being placed (placed: %d)", gen, ps.PlacedGeneration)}
	}
	p := progress{state: ps.State, message: ps.Message}
	if ps.Kind == policy.KindTrainingJob || strings.HasPrefix(key, policy.KindTrainingJob+"/") {
		for _, e := range exps {
			if e.Key == key && e.Generation == gen {
				p = progress{state: "sweep " + e.State, message: e.Message}
				p.failed = e.State == api.JobFailed
				p.ready = !p.failed
				return p
			}
		}
		for _, j := range jobs {
			if j.Key == key && j.Generation == gen && j.State != api.JobPending {
				p = progress{state: "job " + j.State, message: fmt.Sprintf("on [%s]", strings.Join(j.Nodes, ","))}
				if j.State == api.JobFailed {
					p.message, p.failed = j.Error, true
				}
				p.ready = !p.failed
				return p
			}
		}
		// Done, but its run's record has not reached this agent yet (the
		// owner heard of the run's end first, directly): `strata logs` and
		// `strata jobs` would not know the job. Not ready until it has.
		if ps.State == api.StateDone {
			p.message = "done; waiting for the record of its run to reach this agent"
		}
		p.failed = ps.State == api.StateFailed
		return p
	}
	p.ready = ps.State == api.StatePlaced && len(ps.Nodes) > 0
	p.failed = ps.State == api.StateFailed
	return p
}
