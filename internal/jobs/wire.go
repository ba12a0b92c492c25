package jobs

import (
	"slices"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/trainer"
)

// stepsOf is a job's per-step metrics as its record holds them (nil for
// nil).
func stepsOf(steps []trainer.Step) []catalog.Step {
	if steps == nil {
		return nil
	}
	out := make([]catalog.Step, len(steps))
	for i, s := range steps {
		out[i] = catalog.Step(s)
	}
	return out
}

// statusesOf is the members' states of a run as job and gang member
// records hold them (nil for nil).
func statusesOf(ms []trainer.MemberStatus) []catalog.MemberStatus {
	if ms == nil {
		return nil
	}
	out := make([]catalog.MemberStatus, len(ms))
	for i, m := range ms {
		out[i] = catalog.MemberStatus{Rank: m.Rank, Node: m.Node, State: string(m.State), ExitCode: m.ExitCode, Error: m.Error}
	}
	return out
}

// gangRanks is a gang's members as its record holds them.
func gangRanks(ms []trainer.Member) []catalog.Rank {
	out := make([]catalog.Rank, len(ms))
	for i, m := range ms {
		out[i] = catalog.Rank(m)
	}
	return out
}

// gangMembers is a gang record's ranks as the launcher takes them, each
// with its own GPUs.
func gangMembers(rs []catalog.Rank) []trainer.Member {
	out := make([]trainer.Member, len(rs))
	for i, r := range rs {
		out[i] = trainer.Member{Node: r.Node, Addr: r.Addr, GPUs: slices.Clone(r.GPUs)}
	}
	return out
}
