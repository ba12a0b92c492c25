package events

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
)

// TestEventsFromCatalogChanges: what the catalog holds at start is the
// baseline; each later state change is one event, told in the order the
// steps happened (by the writers' clocks), not the order they arrived.
func TestEventsFromCatalogChanges(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cat.Placements.Put(catalog.Placement{Key: "InferenceService/old", State: catalog.StatePlaced, Updated: t0})
	st := New(cat, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	past, ch, done := st.Subscribe(0)
	defer done()
	if len(past) != 0 {
		t.Fatalf("events before Run: %v", past)
	}
	go st.Run(ctx)
	// Let Run take its baseline: the old placement is not news.
	deadline := time.After(10 * time.Second)
	for {
		st.mu.Lock()
		n := len(st.last)
		st.mu.Unlock()
		if n == 1 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("no baseline")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Written out of order: the job finished after the drift alarm.
	cat.Jobs.Put(catalog.Job{Name: "s-retrain-1", Key: "TrainingJob/s-retrain-1", State: catalog.JobSucceeded, Created: t0.Add(2 * time.Second), Finished: t0.Add(3 * time.Second)})
	cat.Drift.Put(catalog.Drift{Policy: "InferenceService/s", Node: "edge-1", Model: "s", Version: "1", Alarmed: true, AlarmAt: t0.Add(time.Second), Detector: "psi"})
	want := []string{"drift.alarm", "job.succeeded"}
	var got []Event
	for len(got) < len(want) {
		select {
		case ev := <-ch:
			got = append(got, ev)
		case <-deadline:
			t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
		}
	}
	// Both may arrive in one scan (then sorted by time) or in two (then
	// in write order): either way the set is exact and each is once.
	seen := map[string]int{}
	for _, ev := range got {
		seen[ev.Type]++
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("events %v: want one %s", got, w)
		}
	}
	if got[0].Seq >= got[1].Seq {
		t.Errorf("sequence numbers not increasing: %+v", got)
	}
	// Replay after a sequence number.
	past, _, done2 := st.Subscribe(got[0].Seq)
	defer done2()
	if len(past) != 1 || past[0].Seq != got[1].Seq {
		t.Errorf("Subscribe(since=%d) replayed %+v, want only seq %d", got[0].Seq, past, got[1].Seq)
	}
}

// TestRolloutStepsOnce: a rollout record keeps the steps of earlier
// retrains when the next one starts (its Seq moves on); each step is one
// event, once.
func TestRolloutStepsOnce(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := New(cat, nil)
	st.scan(false)
	_, ch, done := st.Subscribe(0)
	defer done()
	first := []catalog.RolloutStep{{Time: t0, Stage: "retraining"}, {Time: t0.Add(time.Second), Stage: "canary"}, {Time: t0.Add(2 * time.Second), Stage: "promoted"}}
	cat.Rollouts.Put(catalog.Rollout{Policy: "InferenceService/s", Seq: 1, Stage: "promoted", Steps: first})
	st.scan(true)
	cat.Rollouts.Put(catalog.Rollout{Policy: "InferenceService/s", Seq: 2, Stage: "retraining",
		Steps: append(first, catalog.RolloutStep{Time: t0.Add(time.Minute), Stage: "retraining"})})
	st.scan(true)
	var got []string
	for len(ch) > 0 {
		ev := <-ch
		got = append(got, ev.Type+"@"+ev.Time.Sub(t0).String())
	}
	want := []string{"rollout.retraining@0s", "rollout.canary@1s", "rollout.promoted@2s", "rollout.retraining@1m0s"}
	if !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}
