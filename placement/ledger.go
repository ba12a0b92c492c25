package placement

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/strata-mesh/strata/policy"
)

// ErrRefused is matched (errors.Is) by every *Refusal.
var ErrRefused = errors.New("placement: refused")

// Refusal is the error a node gives when it will not take an assignment:
// the Reason is one of the Reason constants, Detail says by how much.
type Refusal struct {
	Reason Reason
	Detail string
}

// Error implements error.
func (r *Refusal) Error() string {
	return fmt.Sprintf("placement: refused: %s: %s", r.Reason, r.Detail)
}

// Is makes errors.Is(err, ErrRefused) true.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// Assignment is work the owner of a policy asks a node to run.
type Assignment struct {
	// ID identifies the assignment; admitting the same assignment twice is
	// a no-op.
	ID string `json:"id"`
	// Key is the policy's identity.
	Key string `json:"key"`
	// Epoch is the owner's epoch for Key; the ledger refuses an epoch
	// older than the newest it has admitted for Key.
	Epoch uint64 `json:"epoch"`
	// Resources is what the assignment takes.
	Resources Resources `json:"resources"`
}

// Grant is what the ledger gave an admitted assignment.
type Grant struct {
	// ID is the assignment's ID.
	ID string `json:"id"`
	// GPUs are the indexes of the GPUs it holds.
	GPUs []int `json:"gpus,omitempty"`
}

type ledgerEntry struct {
	a    Assignment
	gpus []int
}

// Ledger is a node's own account of its resources: the node is the
// authority on what it can take, so a placement made from a stale view is
// refused here instead of over-committing the node. A Ledger is a plain
// value type with no locking: the agent serialises calls.
type Ledger struct {
	cpu, mem int64 // free
	gpus     []GPU
	entries  map[string]ledgerEntry
	epochs   map[string]uint64
	totalCPU int64
	totalMem int64
}

// NewLedger returns a ledger for a node with the given capacity: CPU in
// millicores, memory in bytes, and its GPUs (a GPU with Free false is held
// by something the ledger does not manage; an unhealthy one is never
// granted).
func NewLedger(cpu, memory int64, gpus []GPU) *Ledger {
	return &Ledger{
		cpu: cpu, mem: memory, totalCPU: cpu, totalMem: memory,
		gpus:    slices.Clone(gpus),
		entries: map[string]ledgerEntry{},
		epochs:  map[string]uint64{},
	}
}

// Admit takes the assignment's resources, or refuses it with a *Refusal
// and takes nothing: not enough CPU, memory or matching GPUs, an epoch
// older than one already seen for the key (ReasonStaleEpoch), or an ID
// already admitted with other contents (ReasonConflict). Admitting an
// identical assignment again returns its existing grant.
func (l *Ledger) Admit(a Assignment) (Grant, error) {
	if e, ok := l.entries[a.ID]; ok {
		if e.a == a {
			return Grant{ID: a.ID, GPUs: slices.Clone(e.gpus)}, nil
		}
		return Grant{}, &Refusal{Reason: ReasonConflict, Detail: fmt.Sprintf("assignment %q already admitted with different contents", a.ID)}
	}
	if seen := l.epochs[a.Key]; a.Epoch < seen {
		return Grant{}, &Refusal{Reason: ReasonStaleEpoch, Detail: fmt.Sprintf("epoch %d for %q, already saw %d", a.Epoch, a.Key, seen)}
	}
	r := a.Resources
	if r.CPU < 0 || r.Memory < 0 || r.GPUs < 0 {
		return Grant{}, fmt.Errorf("%w: negative resources", ErrInvalidRequest)
	}
	if r.CPU > l.cpu {
		return Grant{}, &Refusal{Reason: ReasonInsufficientCPU, Detail: fmt.Sprintf("needs %s CPU, %s free", fmtCPU(r.CPU), fmtCPU(l.cpu))}
	}
	if r.Memory > l.mem {
		return Grant{}, &Refusal{Reason: ReasonInsufficientMemory, Detail: fmt.Sprintf("needs %s memory, %s free", policy.FormatBytes(r.Memory), policy.FormatBytes(l.mem))}
	}
	var take []int
	for j, g := range l.gpus {
		if len(take) == r.GPUs {
			break
		}
		if g.Free && g.Healthy && gpuMatches(g, r) {
			take = append(take, j)
		}
	}
	if len(take) < r.GPUs {
		return Grant{}, &Refusal{Reason: ReasonInsufficientGPU, Detail: fmt.Sprintf("needs %d GPUs%s, %d available", r.GPUs, gpuSpec(r), len(take))}
	}
	for _, j := range take {
		l.gpus[j].Free = false
	}
	l.cpu -= r.CPU
	l.mem -= r.Memory
	l.epochs[a.Key] = max(l.epochs[a.Key], a.Epoch)
	l.entries[a.ID] = ledgerEntry{a: a, gpus: take}
	return Grant{ID: a.ID, GPUs: slices.Clone(take)}, nil
}

// Release gives back an assignment's resources; it reports whether the
// ledger held it.
func (l *Ledger) Release(id string) bool {
	e, ok := l.entries[id]
	if !ok {
		return false
	}
	l.cpu += e.a.Resources.CPU
	l.mem += e.a.Resources.Memory
	for _, j := range e.gpus {
		l.gpus[j].Free = true
	}
	delete(l.entries, id)
	return true
}

// Free returns the unreserved CPU (millicores), memory (bytes) and the GPUs
// with their Free flags as the ledger has them.
func (l *Ledger) Free() (cpu, memory int64, gpus []GPU) {
	return l.cpu, l.mem, slices.Clone(l.gpus)
}

// Assignments returns the admitted assignments, sorted by ID.
func (l *Ledger) Assignments() []Assignment {
	ids := slices.Sorted(maps.Keys(l.entries))
	out := make([]Assignment, len(ids))
	for i, id := range ids {
		out[i] = l.entries[id].a
	}
	return out
}
