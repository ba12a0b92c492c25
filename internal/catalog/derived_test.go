package catalog_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
)

// syncRecorder is a store that remembers which keys were written without
// a sync.
type syncRecorder struct {
	*catalogtest.Store
	mu       sync.Mutex
	unsynced map[string]bool
}

func (s *syncRecorder) Put(key string, v json.RawMessage, opts ...mesh.PutOptions) (mesh.Entry, error) {
	s.mu.Lock()
	s.unsynced[key] = len(opts) > 0 && opts[0].Unsynced
	s.mu.Unlock()
	return s.Store.Put(key, v, opts...)
}

// TestOnlyPlacementsUnsynced: a placement, which its owner derives again,
// is stored without a sync; a policy, which a client was told is stored,
// is synced.
func TestOnlyPlacementsUnsynced(t *testing.T) {
	t.Parallel()
	store := &syncRecorder{Store: catalogtest.NewStore(), unsynced: map[string]bool{}}
	cat := catalog.New(store, nil)
	if _, err := cat.Policies.Put(catalog.Policy{Kind: "InferenceService", Name: "a", Source: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Placements.Put(catalog.Placement{Key: "InferenceService/a", Kind: "InferenceService", Name: "a", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"policies/InferenceService/a": false, "placements/InferenceService/a": true} {
		if got, ok := store.unsynced[key]; !ok || got != want {
			t.Errorf("%s: unsynced %v (written %v), want %v", key, got, ok, want)
		}
	}
}
