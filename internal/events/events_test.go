package events

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/api/client"
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
		n := len(st.placed)
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

// TestRepeatsAreCounted: the same event again for the same subject is
// one kept event with a count, first and last time, sent again to
// followers as an update that names the Seq it replaces; another event
// of the subject in between, or another message, is news.
func TestRepeatsAreCounted(t *testing.T) {
	t.Parallel()
	st := New(catalog.New(catalogtest.NewStore(), nil), nil)
	_, ch, done := st.Subscribe(0)
	defer done()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	failed := func(sec int, msg string) Event {
		return Event{Time: t0.Add(time.Duration(sec) * time.Second), Type: "placement.failed", Policy: "InferenceService/s", Node: "cloud-1", Message: msg}
	}
	const why = "no feasible placement: 3 nodes lack a GPU"
	st.Publish(failed(0, why))
	st.Publish(Event{Time: t0.Add(time.Second), Type: "job.running", Policy: "TrainingJob/j", Node: "gpu-1", Message: "job j running"})
	for i := 1; i <= 11; i++ {
		st.Publish(failed(5*i, why)) // the controller's retries
	}
	st.Publish(failed(60, "no feasible placement: 3 nodes lack memory"))
	st.Publish(Event{Time: t0.Add(61 * time.Second), Type: "placement.placed", Policy: "InferenceService/s", Node: "cloud-1", Message: "placed"})
	st.Publish(failed(65, why))

	type summary struct {
		Seq, Replaces uint64
		Type          string
		Count         int
		First, Last   time.Duration
	}
	sum := func(evs []Event) []summary {
		var out []summary
		for _, ev := range evs {
			if ev.Last != ev.Time {
				t.Errorf("event %d: Last %v, Time %v", ev.Seq, ev.Last, ev.Time)
			}
			out = append(out, summary{ev.Seq, ev.Replaces, ev.Type, ev.Count, ev.First.Sub(t0), ev.Last.Sub(t0)})
		}
		return out
	}
	kept, _, done2 := st.Subscribe(0)
	defer done2()
	want := []summary{
		{2, 0, "job.running", 1, time.Second, time.Second},
		{13, 12, "placement.failed", 12, 0, 55 * time.Second},
		{14, 0, "placement.failed", 1, 60 * time.Second, 60 * time.Second},
		{15, 0, "placement.placed", 1, 61 * time.Second, 61 * time.Second},
		{16, 0, "placement.failed", 1, 65 * time.Second, 65 * time.Second},
	}
	if diff := cmp.Diff(want, sum(kept)); diff != "" {
		t.Errorf("kept events (-want +got):\n%s", diff)
	}
	var streamed []Event
	for len(ch) > 0 {
		streamed = append(streamed, <-ch)
	}
	if len(streamed) != 16 {
		t.Fatalf("streamed %d events, want every one of 16 (repeats as updates)", len(streamed))
	}
	if got := sum(streamed[2:4]); !cmp.Equal(got, []summary{{3, 1, "placement.failed", 2, 0, 5 * time.Second}, {4, 3, "placement.failed", 3, 0, 10 * time.Second}}) {
		t.Errorf("first repeats streamed as %+v", got)
	}
}

// TestRingIsBounded: distinct events beyond the ring push the oldest out.
func TestRingIsBounded(t *testing.T) {
	t.Parallel()
	st := New(catalog.New(catalogtest.NewStore(), nil), nil)
	for i := range eventRing + 10 {
		st.Publish(Event{Type: "job.running", Policy: fmt.Sprintf("TrainingJob/j%d", i), Message: "running"})
	}
	kept, _, done := st.Subscribe(0)
	defer done()
	if len(kept) != eventRing || kept[0].Seq != 11 {
		t.Errorf("kept %d events from seq %d, want %d from 11", len(kept), kept[0].Seq, eventRing)
	}
}

// TestServeKeptEventsEnds reads the stream with follow=false: it holds
// the kept events and then ends, where a following read would wait.
func TestServeKeptEventsEnds(t *testing.T) {
	t.Parallel()
	st := New(catalog.New(catalogtest.NewStore(), nil), nil)
	for i := range 3 {
		st.Publish(Event{Type: "job.running", Policy: fmt.Sprintf("TrainingJob/j%d", i), Message: "running"})
	}
	srv := httptest.NewServer(st)
	defer srv.Close()
	c := client.New(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for since, want := range map[int64]int{0: 3, 1: 2, 3: 0} {
		s, err := c.KeptEvents(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for s.Next() {
			n++
		}
		s.Close()
		if s.Err() != nil || n != want {
			t.Errorf("since %d: %d events, err %v; want %d and the end of the stream", since, n, s.Err(), want)
		}
	}
	resp, err := http.Get(srv.URL + "?follow=maybe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("follow=maybe: HTTP %d, want 400", resp.StatusCode)
	}
}

// TestDriftLogEvents: every entry of a drift log written after the
// baseline is one event, also an alarm and its clear written between two
// scans; a log begun again (after its policy left the node) starts its
// sequence over and is news again. A drift record that carries a state
// (its agent writes a log) makes no event of its own; one of an agent
// before logs still does.
func TestDriftLogEvents(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := catalog.DriftLog{Policy: "InferenceService/s", Model: "m", Site: "edge-a", Node: "edge-a-1", Since: t0}
	put := func(e catalog.DriftEntry) {
		t.Helper()
		e.Version = "1"
		l.Append(e)
		if _, err := cat.DriftLogs.Put(l); err != nil {
			t.Fatal(err)
		}
	}
	put(catalog.DriftEntry{Kind: catalog.DriftWarming, At: t0, Window: 500})
	cat.Drift.Put(catalog.Drift{Policy: "InferenceService/s", Node: "edge-a-1", Model: "m", Version: "1", State: catalog.DriftWarming})
	st := New(cat, nil)
	past, ch, done := st.Subscribe(0)
	defer done()
	if len(past) != 0 {
		t.Fatalf("events before a scan: %v", past)
	}
	st.scan(false) // the baseline
	scan := func() []string {
		t.Helper()
		st.scan(true)
		var types []string
		for {
			select {
			case ev := <-ch:
				types = append(types, ev.Type+": "+ev.Message)
			default:
				return types
			}
		}
	}
	put(catalog.DriftEntry{Kind: catalog.DriftOK, At: t0.Add(time.Second), Samples: 500})
	put(catalog.DriftEntry{Kind: catalog.DriftAlarm, At: t0.Add(2 * time.Second), Samples: 612, Source: "stream", Detector: "cusum", Feature: "x", Statistic: 1.04})
	put(catalog.DriftEntry{Kind: catalog.DriftClear, At: t0.Add(3 * time.Second), Samples: 700, Source: "stream"})
	// The drift record moved from warming to ok: no event of its own.
	cat.Drift.Put(catalog.Drift{Policy: "InferenceService/s", Node: "edge-a-1", Model: "m", Version: "1", State: catalog.DriftOK})
	want := []string{
		"drift.ok: m@1 at edge-a/edge-a-1: no drift after 500 samples",
		"drift.alarm: drift on m@1 at edge-a/edge-a-1 after 612 samples: cusum x=1.04",
		"drift.clear: m@1 at edge-a/edge-a-1: clear after 700 samples (by the stream detector, which raised the alarm)",
	}
	if diff := cmp.Diff(want, scan()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if got := scan(); len(got) != 0 {
		t.Fatalf("nothing new, but events %v", got)
	}
	// The policy left the node and came back between two scans: a new log.
	l = catalog.DriftLog{Policy: "InferenceService/s", Model: "m", Site: "edge-a", Node: "edge-a-1", Since: t0.Add(time.Hour)}
	put(catalog.DriftEntry{Kind: catalog.DriftWarming, At: t0.Add(time.Hour), Window: 500})
	if diff := cmp.Diff([]string{"drift.warming: m@1 at edge-a/edge-a-1: warming up (judges after 500 samples)"}, scan()); diff != "" {
		t.Fatalf("a new log's events (-want +got):\n%s", diff)
	}
	// An agent before drift logs: its record's changes are the events.
	cat.Drift.Put(catalog.Drift{Policy: "InferenceService/s", Node: "edge-b-1", Site: "edge-b", Model: "m", Version: "1", Alarmed: true, AlarmAt: t0, AlarmSeen: 900, Detector: "psi"})
	if got := scan(); len(got) != 1 || !strings.HasPrefix(got[0], "drift.alarm: drift on m@1 at edge-b/edge-b-1 after 900 samples") {
		t.Fatalf("an older agent's alarm: events %v", got)
	}
}

// TestScaledEvents: each change of an autoscaled service's replica count
// is one placement.scaled event with its evidence, beside the placement's
// own state changes; the record written again unchanged is no news.
func TestScaledEvents(t *testing.T) {
	t.Parallel()
	cat := catalog.New(catalogtest.NewStore(), nil)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := New(cat, nil)
	st.scan(false)
	_, ch, done := st.Subscribe(0)
	defer done()
	put := func(epoch uint64, state string, sc *catalog.Scale) {
		cat.Placements.Put(catalog.Placement{Key: "InferenceService/web", Epoch: epoch, State: state, Updated: t0.Add(time.Duration(epoch) * time.Second), Scale: sc})
		st.scan(true)
	}
	up := &catalog.Scale{Replicas: 3, From: 1, Reason: "120 req/s over 1 replica(s), target 50 a replica", At: t0.Add(time.Minute)}
	put(1, catalog.StatePlaced, nil)
	put(2, catalog.StatePending, up)
	put(2, catalog.StatePending, up)
	put(3, catalog.StatePlaced, up)
	var got []string
	for len(ch) > 0 {
		ev := <-ch
		got = append(got, ev.Type+": "+ev.Message)
	}
	want := []string{
		"placement.placed: InferenceService/web placed on []: ",
		"placement.pending: InferenceService/web pending on []: ",
		"placement.scaled: InferenceService/web autoscaled 1 → 3: 120 req/s over 1 replica(s), target 50 a replica",
		"placement.placed: InferenceService/web placed on []: ",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestStreamForgetsWhatIsGone: a placement deleted is forgotten, so the
// same placement written again is news, whether the stream reads what
// changed or lists the table afresh each time.
func TestStreamForgetsWhatIsGone(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]catalog.Store{"by key": catalogtest.NewStore(), "listed afresh": catalogtest.Relisting{S: catalogtest.NewStore()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cat := catalog.New(store, nil)
			put := func() {
				t.Helper()
				if _, err := cat.Placements.Put(catalog.Placement{Key: "InferenceService/x", State: catalog.StatePlaced, Epoch: 1}); err != nil {
					t.Fatal(err)
				}
			}
			types := func(evs []Event) []string {
				var out []string
				for _, ev := range evs {
					out = append(out, ev.Type)
				}
				return out
			}
			st := New(cat, nil)
			put()
			st.derive(false) // the baseline
			if got := types(st.derive(true)); len(got) != 0 {
				t.Errorf("nothing changed: %v", got)
			}
			if err := cat.Placements.Delete("InferenceService/x"); err != nil {
				t.Fatal(err)
			}
			st.derive(true)
			if _, ok := st.placed["InferenceService/x"]; ok {
				t.Error("a deleted placement is still remembered")
			}
			put()
			if got := types(st.derive(true)); !slices.Equal(got, []string{"placement.placed"}) {
				t.Errorf("written again: %v, want placement.placed", got)
			}
		})
	}
}
