package placement_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

// TestReservedCloneMatchesRebuilt places gangs one after another on a
// clone that takes each one's reservations, and each time compares the
// decision with the one on a snapshot built afresh from the clone's nodes:
// a clone's reservations (counted per domain for the fill score) must
// weigh exactly as the same load built in.
func TestReservedCloneMatchesRebuilt(t *testing.T) {
	t.Parallel()
	topo, err := sim.Generate(sim.Options{Nodes: 3000, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	clone := topo.Snapshot.Clone()
	for k := range 40 {
		req := topo.TrainingRequest(uint64(k), 1+k%3, 1+k%8)
		if k%4 == 3 {
			req = topo.InferenceRequest(uint64(k))
		}
		var b placement.Builder
		b.Add(clone.Nodes()...)
		fresh, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		got, err := placement.Place(clone, req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := placement.Place(fresh, req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.Placements, got.Placements); diff != "" {
			t.Fatalf("request %d: clone with reservations and rebuilt snapshot disagree (-rebuilt +clone):\n%s", k, diff)
		}
		if want.Domain != nil && got.Domain != nil && want.Domain.Total != got.Domain.Total {
			t.Fatalf("request %d: domain score %v on the clone, %v rebuilt", k, got.Domain.Total, want.Domain.Total)
		}
		for _, p := range got.Placements {
			if _, err := clone.Reserve(p.Node, p.Resources); err != nil {
				t.Fatal(err)
			}
		}
	}
}
