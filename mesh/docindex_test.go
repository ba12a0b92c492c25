package mesh

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestDocIndex: a held document's index answers as a scan of its
// assignments does (the first of a key, none for a key it lacks) and of
// its replicas (the last of a key), and a copy changed after a lookup
// answers from its own lists.
func TestDocIndex(t *testing.T) {
	t.Parallel()
	for _, sorted := range []bool{false, true} {
		t.Run(fmt.Sprintf("sorted=%v", sorted), func(t *testing.T) {
			t.Parallel()
			checkDocIndex(t, sorted)
		})
	}
}

// checkDocIndex is TestDocIndex over lists in the order written, or sorted by
// key as agents write them (searched, without a map).
func checkDocIndex(t *testing.T, sorted bool) {
	var s NodeState
	s.ID, s.Name = "id", "n"
	for i := range 500 {
		s.Assignments = append(s.Assignments, Assignment{Key: fmt.Sprintf("InferenceService/s-%d", i%400), Epoch: uint64(i)})
		s.Replicas = append(s.Replicas, Replica{Policy: fmt.Sprintf("InferenceService/s-%d", i%400), Attempts: i})
	}
	if sorted { // stable: the first and last of a key stay so
		slices.SortStableFunc(s.Assignments, func(a, b Assignment) int { return strings.Compare(a.Key, b.Key) })
		slices.SortStableFunc(s.Replicas, func(a, b Replica) int { return strings.Compare(a.Policy, b.Policy) })
	}
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	held, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	shared := held.shared()
	if shared.index == nil {
		t.Fatal("a held document has no index")
	}
	if _, _ = shared.Assignment("x"); shared.index.assign.sorted != sorted {
		t.Errorf("the index reads the assignments sorted: %v, want %v", shared.index.assign.sorted, sorted)
	}
	for i := range 450 {
		key := fmt.Sprintf("InferenceService/s-%d", i)
		as, ok := shared.Assignment(key)
		if want := i < 400; ok != want || ok && as.Epoch != uint64(i) {
			t.Fatalf("%s: %+v %v, want epoch %d (held: %v)", key, as, ok, i, want)
		}
		r, ok := shared.Replica(key)
		last := i
		if i < 100 {
			last = i + 400
		}
		if want := i < 400; ok != want || ok && r.Attempts != last {
			t.Fatalf("%s: replica %+v %v, want attempts %d (held: %v)", key, r, ok, last, want)
		}
	}
	c := shared.Clone()
	c.Assignments[0].Key = "InferenceService/other"
	if as, ok := c.Assignment("InferenceService/other"); !ok || as.Epoch != 0 {
		t.Errorf("a changed copy: %+v %v, want its own first assignment", as, ok)
	}
	if _, ok := shared.Assignment("InferenceService/other"); ok {
		t.Error("a change to a copy reached the held document")
	}
}
