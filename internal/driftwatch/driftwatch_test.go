package driftwatch

import (
	"fmt"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

type manifests map[string]storage.Manifest

func (m manifests) Lookup(_ storage.Kind, name, version string) (storage.Manifest, error) {
	if x, ok := m[name+"@"+version]; ok {
		return x, nil
	}
	return storage.Manifest{}, mesh.ErrNotFound
}

func service(window int) string {
	return fmt.Sprintf("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: s}\nspec:\n  model: {name: m}\n  drift: {detector: ks, window: %d, reference: first}\n", window)
}

// TestReapplyUpdatesRunningMonitor: applying a service again with other
// drift settings restarts its running monitor with them, without a new
// model version.
func TestReapplyUpdatesRunningMonitor(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	d := New(Config{Name: "edge-a-1", Site: "edge-a", Catalog: cat, Artifacts: manifests{
		"m@1": {Kind: storage.KindModel, Name: "m", Version: "1", Metadata: map[string]string{catalog.MetaFeatures: "x,y"}},
	}})
	put := func(gen uint64, window int) {
		if _, err := cat.Policies.Put(catalog.Policy{Kind: policy.KindInferenceService, Name: "s", Source: service(window), Generation: gen}); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 100)
	d.Sync(map[string]Model{"InferenceService/s": {Name: "m", Version: "1"}})
	d.resync() // nothing changed: the monitor stays
	if w := d.mon["m"]; w == nil || w.spec.Window != 100 || w.rec.Error != "" {
		t.Fatalf("monitor %+v, want window 100", w)
	}
	put(2, 200)
	d.resync()
	d.publish(true)
	if w := d.mon["m"]; w == nil || w.spec.Window != 200 {
		t.Fatalf("after re-applying: monitor %+v, want window 200", w)
	}
	rec, err := cat.Drift.Value("InferenceService/s/edge-a-1")
	if err != nil || rec.Window != 200 {
		t.Errorf("published drift record %+v (%v), want window 200", rec, err)
	}
}
