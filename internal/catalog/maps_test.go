package catalog

import (
	"testing"

	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
)

func TestMapAndReadyMap(t *testing.T) {
	t.Parallel()
	c := New(catalogtest.NewStore(), nil)
	if _, err := c.Placements.Put(Placement{Key: "InferenceService/a", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	// b depends on a policy version that has not replicated here.
	if _, err := c.Placements.Put(Placement{Key: "InferenceService/b", Epoch: 2}, mesh.Dep{Key: "policies/InferenceService/b", Version: 5}); err != nil {
		t.Fatal(err)
	}
	all, err := c.Placements.Map()
	if err != nil || len(all) != 2 || all["InferenceService/a"].Epoch != 1 || all["InferenceService/b"].Epoch != 2 {
		t.Errorf("Map = %v, %v; want a and b", all, err)
	}
	ready, err := c.Placements.ReadyMap()
	if _, ok := ready["InferenceService/b"]; err != nil || len(ready) != 1 || ok {
		t.Errorf("ReadyMap = %v, %v; want a only (b waits for its policy)", ready, err)
	}
}
