package placement_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/placement"
)

func TestLedger(t *testing.T) {
	gpus := []placement.GPU{
		{Model: "NVIDIA H100", Memory: 80 * gib, Healthy: true, Free: true},
		{Model: "NVIDIA H100", Memory: 80 * gib, Healthy: false, Free: true},
		{Model: "NVIDIA H100", Memory: 80 * gib, Healthy: true, Free: false},
		{Model: "NVIDIA H100", Memory: 80 * gib, Healthy: true, Free: true},
	}
	l := placement.NewLedger(8000, 64*gib, gpus)
	a := placement.Assignment{ID: "a", Key: "svc", Epoch: 2, Resources: placement.Resources{CPU: 4000, Memory: 32 * gib, GPUs: 2}}
	g, err := l.Admit(a)
	if err != nil {
		t.Fatal(err)
	}
	// The unhealthy and the busy GPU are skipped.
	if diff := cmp.Diff(placement.Grant{ID: "a", GPUs: []int{0, 3}}, g); diff != "" {
		t.Errorf("grant (-want +got):\n%s", diff)
	}
	// Admitting the same assignment again is a no-op.
	if g2, err := l.Admit(a); err != nil || !cmp.Equal(g, g2) {
		t.Errorf("re-admit: %v %v", g2, err)
	}

	for _, tc := range []struct {
		name string
		a    placement.Assignment
		want placement.Reason
	}{
		{"cpu", placement.Assignment{ID: "b", Key: "x", Resources: placement.Resources{CPU: 4001}}, placement.ReasonInsufficientCPU},
		{"memory", placement.Assignment{ID: "b", Key: "x", Resources: placement.Resources{Memory: 33 * gib}}, placement.ReasonInsufficientMemory},
		{"gpus", placement.Assignment{ID: "b", Key: "x", Resources: placement.Resources{GPUs: 1}}, placement.ReasonInsufficientGPU},
		{"stale epoch", placement.Assignment{ID: "b", Key: "svc", Epoch: 1}, placement.ReasonStaleEpoch},
		{"same id, other contents", placement.Assignment{ID: "a", Key: "svc", Epoch: 2}, placement.ReasonConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Admit(tc.a)
			var r *placement.Refusal
			if !errors.As(err, &r) || !errors.Is(err, placement.ErrRefused) {
				t.Fatalf("error %v, want a *Refusal", err)
			}
			if r.Reason != tc.want {
				t.Errorf("reason %s (%s), want %s", r.Reason, r.Detail, tc.want)
			}
		})
	}
	// Nothing was taken by the refusals.
	cpu, mem, gs := l.Free()
	if cpu != 4000 || mem != 32*gib || free(placement.Node{GPUs: gs}) != 0 {
		t.Errorf("free after refusals: %d CPU, %d memory, %d GPUs", cpu, mem, free(placement.Node{GPUs: gs}))
	}
	if !l.Release("a") || l.Release("a") {
		t.Error("Release: want true once, then false")
	}
	cpu, mem, gs = l.Free()
	if cpu != 8000 || mem != 64*gib || free(placement.Node{GPUs: gs}) != 2 {
		t.Errorf("free after release: %d CPU, %d memory, %d GPUs", cpu, mem, free(placement.Node{GPUs: gs}))
	}
	// The epoch stays: an older owner cannot come back after a release.
	if _, err := l.Admit(placement.Assignment{ID: "c", Key: "svc", Epoch: 1}); !errors.Is(err, placement.ErrRefused) {
		t.Errorf("stale epoch after release: %v", err)
	}
	if _, err := l.Admit(placement.Assignment{ID: "c", Key: "svc", Epoch: 3}); err != nil {
		t.Errorf("newer epoch: %v", err)
	}
	if got := l.Assignments(); len(got) != 1 || got[0].ID != "c" {
		t.Errorf("assignments %v", got)
	}
}

// TestLedgerNeverOverCommits admits and releases at random and checks the
// books after every step.
func TestLedgerNeverOverCommits(t *testing.T) {
	gpus := make([]placement.GPU, 8)
	for j := range gpus {
		gpus[j] = placement.GPU{Model: "H100", Healthy: true, Free: true}
	}
	l := placement.NewLedger(16000, 64*gib, gpus)
	held := map[string]placement.Resources{}
	for k := range 2000 {
		id := string(rune('a' + k%26))
		if _, ok := held[id]; ok && k%3 == 0 {
			l.Release(id)
			delete(held, id)
			continue
		}
		r := placement.Resources{CPU: int64(k%7) * 1000, Memory: int64(k%5) * 8 * gib, GPUs: k % 4}
		if _, err := l.Admit(placement.Assignment{ID: id, Key: id, Resources: r}); err == nil {
			held[id] = r
		}
		var cpu, mem int64
		g := 0
		for _, r := range held {
			cpu, mem, g = cpu+r.CPU, mem+r.Memory, g+r.GPUs
		}
		fc, fm, fg := l.Free()
		if cpu > 16000 || mem > 64*gib || g > 8 || fc != 16000-cpu || fm != 64*gib-mem || free(placement.Node{GPUs: fg}) != 8-g {
			t.Fatalf("step %d: held %d CPU %d mem %d GPUs; ledger free %d %d %d", k, cpu, mem, g, fc, fm, free(placement.Node{GPUs: fg}))
		}
	}
}
