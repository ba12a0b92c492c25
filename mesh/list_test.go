package mesh

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestListInKeyOrder puts and deletes keys in random order and checks
// that List answers each table's live entries sorted, as a sort of the
// whole catalog would.
func TestListInKeyOrder(t *testing.T) {
	t.Parallel()
	m := &Mesh{kv: map[string]*Entry{}, kvTables: map[string]*kvTable{}, tableVersions: map[string]uint64{}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		key := fmt.Sprintf("%s/k-%d", []string{"policies", "placements", "jobs"}[rng.IntN(3)], rng.IntN(700))
		switch rng.IntN(4) {
		case 0:
			m.deleteEntryLocked(key)
		default:
			m.setEntryLocked(&Entry{Key: key, Version: uint64(i), Deleted: rng.IntN(10) == 0})
		}
	}
	for _, prefix := range []string{"policies/", "placements/k-1", "jobs/", "nothing/", "", "jo"} {
		var want []string
		for k, e := range m.kv {
			if strings.HasPrefix(k, prefix) && !e.Deleted {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		var got []string
		for _, e := range m.List(prefix) {
			got = append(got, e.Key)
		}
		if keys := m.Keys(prefix); !slices.Equal(keys, want) {
			t.Errorf("Keys(%q): %d keys, want %d in order", prefix, len(keys), len(want))
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q): %d keys, want %d in order (%v…)", prefix, len(got), len(want), want[:min(len(want), 3)])
		}
	}
}
