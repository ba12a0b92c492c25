package mesh

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestDocIndex: a held document's index answers as a scan of its
// assignments does (the first of a key, none for a key it lacks) and of
// its replicas (the last of a key), and a copy changed after a lookup
// answers from its own lists.
func TestDocIndex(t *testing.T) {
	t.Parallel()
	var s NodeState
	s.ID, s.Name = "id", "n"
	for i := range 500 {
		s.Assignments = append(s.Assignments, Assignment{Key: fmt.Sprintf("InferenceService/s-%d", i%400), Epoch: uint64(i)})
		s.Replicas = append(s.Replicas, Replica{Policy: fmt.Sprintf("InferenceService/s-%d", i%400), Attempts: i})
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
