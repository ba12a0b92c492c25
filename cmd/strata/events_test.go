package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
)

// TestEventPrinter: a replayed event that happened many times is one line
// with its count; while following, repeats of a printed event are printed
// again only as their count doubles; an agent that sends no count prints
// as before.
func TestEventPrinter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	const failed = "InferenceService/s failed on []: no feasible placement: 3 nodes lack a GPU"
	evs := []api.Event{
		// Replayed (since=0): kept events, one already counted.
		{Seq: 2, Time: at(1), Type: "job.running", Policy: "TrainingJob/j", Node: "gpu-1", Message: "job j running on [gpu-1]", Count: 1, First: at(1), Last: at(1)},
		{Seq: 7, Replaces: 6, Time: at(25), Type: "placement.failed", Policy: "InferenceService/s", Node: "cloud-1", Message: failed, Count: 5, First: at(5), Last: at(25)},
		// Then followed: 11 more retries, one message of an old agent.
		{Seq: 8, Time: at(26), Type: "job.succeeded", Policy: "TrainingJob/j", Node: "gpu-1", Message: "job j succeeded on [gpu-1]"},
	}
	for n, prev := 6, uint64(7); n <= 16; n++ {
		seq := uint64(n + 3)
		evs = append(evs, api.Event{Seq: seq, Replaces: prev, Time: at(5 * n), Type: "placement.failed", Policy: "InferenceService/s", Node: "cloud-1", Message: failed, Count: n, First: at(5), Last: at(5 * n)})
		prev = seq
	}
	var buf bytes.Buffer
	show := newEventPrinter(&buf, time.UTC)
	for _, ev := range evs {
		show(ev)
	}
	checkGolden(t, "events", buf.String())
}
