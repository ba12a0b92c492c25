// Package events derives the mesh's control-loop events (placements, drift
// monitors' transitions, training jobs, rollout stages) from changes to the
// catalog, keeps the latest for late subscribers, and streams them as
// server-sent events:
//
//	st := events.New(cat, guard)
//	go st.Run(ctx)
//	mux.Handle("GET /v1/events", st)
package events

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/safe"

	"github.com/strata-mesh/strata/internal/httpjson"
)

// Event is one step of the mesh's control loop as an agent observed it in
// the replicated state: a placement, a drift alarm, a training job's state,
// a rollout stage. GET /v1/events streams them as server-sent events.
type Event struct {
	// Seq orders this agent's events; a client resumes with ?since=Seq.
	Seq uint64 `json:"seq"`
	// Time is when the step happened, by the clock of the agent that
	// wrote it.
	Time time.Time `json:"time"`
	// Type is "placement", "drift", "job" or "rollout", then a dot and
	// the new state ("rollout.canary", "drift.alarm"). The drift ones are
	// drift.warming (a monitor started), drift.ok (it judged: no drift),
	// drift.alarm, drift.clear and drift.error, one per entry of the
	// node's drift log: every alarm and clear, also one that cleared
	// before the next look.
	Type    string `json:"type"`
	Policy  string `json:"policy,omitempty"`
	Node    string `json:"node,omitempty"`
	Message string `json:"message"`
	// Count is how many times the event happened in a row: an event the
	// same as the last one of its subject (Policy and Node) — same Type,
	// same Message, a retry failing for the same reason — is not kept
	// twice but counted. First and Last are the Times of the first and
	// the latest occurrence; Time is Last.
	Count int       `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Replaces, on a repeat, is the Seq the event had before it: a repeat
	// is sent again with a new Seq (so a stream resumed after the old one
	// sees it) and the kept copy moves to the end. A follower replaces
	// the event it showed under Replaces with this one.
	Replaces uint64 `json:"replaces,omitempty"`
}

// eventRing bounds the events kept for late subscribers. Repeats are
// counted in place (see Event.Count), so it holds distinct events.
const eventRing = 512

// scanGap is the least time between two scans of the catalog.
const scanGap = 100 * time.Millisecond

// Stream derives Events from changes to the catalog and fans them out.
// Safe for concurrent use.
type Stream struct {
	cat   *catalog.Catalog
	guard *safe.Guard
	mu    sync.Mutex
	seq   uint64
	ring  []Event
	subs  map[chan Event]struct{}
	// last is each event subject's last seen state and the record
	// (table/key) it comes from; read is the stream's place in each
	// table: a scan decodes only the records that changed since the last.
	last map[string]subjectState
	// placed is what the stream last saw of each placement, by its
	// record's key: one entry per policy and no string of its own, as
	// there are thousands (its autoscaling is a subject of last).
	placed map[string]placedSeen
	read   map[string]*catalog.Cursor
	// logs is how far the stream has told each drift log (by key).
	logs map[string]logMark
}

// subjectState is what the stream last saw of an event subject.
type subjectState struct{ state, record string }

// placedSeen is what the stream last saw of a placement: a hash of its
// epoch and state (seen), 8 bytes where the two took 24; at 10,000
// policies the map was a twentieth of an idle agent's heap.
type placedSeen uint64

// seen is the placedSeen of a placement at epoch in state.
func seen(epoch uint64, state string) placedSeen {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], epoch)
	h.Write(b[:])
	h.Write([]byte(state))
	return placedSeen(h.Sum64())
}

// logMark is the latest entry told of a drift log.
type logMark struct {
	since time.Time
	seq   uint64
}

// New returns a stream over cat's records. Nothing is derived until Run.
// guard recovers a panic of a scan (nil: a guard of its own that logs
// nowhere).
func New(cat *catalog.Catalog, guard *safe.Guard) *Stream {
	if guard == nil {
		guard = safe.New(safe.Config{})
	}
	return &Stream{cat: cat, guard: guard, subs: map[chan Event]struct{}{}, last: map[string]subjectState{}, placed: map[string]placedSeen{},
		read: map[string]*catalog.Cursor{}, logs: map[string]logMark{}}
}

// Run derives events until ctx ends. What the catalog holds when Run
// starts is the baseline, not news.
func (e *Stream) Run(ctx context.Context) {
	// The change channel is taken before each scan, so a write landing
	// during a scan wakes the next one rather than being missed.
	changed := e.cat.Changed()
	_ = e.guard.Do("events", func() { e.scan(false) }) // what is already there is the baseline, not news
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		changed = e.cat.Changed()
		if e.guard.Do("events", func() { e.scan(true) }) != nil && !e.guard.Wait(ctx) {
			return
		}
		// One scan per scanGap at most: while thousands of policies are
		// applied, the catalog changes thousands of times a second, and a
		// scan lists the tables it reads.
		select {
		case <-ctx.Done():
			return
		case <-time.After(scanGap):
		}
	}
}

// scan compares the records that changed since the last scan with what
// they were then, and emits what changed. Only changed records are
// decoded: with a thousand sweep trials' jobs and placements held, listing
// and formatting all of them on every change of the catalog was a seventh
// of the agents' CPU.
func (e *Stream) scan(emit bool) {
	out := e.derive(emit)
	// One look can see several steps: tell them in the order they happened
	// (by the writers' clocks).
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	for _, ev := range out {
		e.publish(ev)
	}
}

// derive reads the records that changed since the last scan and returns
// the events they make (none unless emit), updating what the stream last
// saw of each.
func (e *Stream) derive(emit bool) []Event {
	var out []Event
	e.mu.Lock()
	defer e.mu.Unlock()
	note := func(record, subject, state string, ev Event) {
		prev, had := e.last[subject]
		if had && prev.state == state && prev.record == record {
			return
		}
		e.last[subject] = subjectState{state: state, record: record}
		if emit && (!had || prev.state != state) {
			out = append(out, ev)
		}
	}
	placements, gone := changedSince(e, "p", e.cat.Placements) // undecodable records are counted by the catalog
	for _, r := range placements {
		p := r.Value
		key := p.Key
		if prev, had := e.placed[r.Key]; !had || prev != seen(p.Epoch, p.State) {
			e.placed[r.Key] = seen(p.Epoch, p.State)
			if emit {
				out = append(out, Event{Time: p.Updated, Type: "placement." + p.State, Policy: key, Node: p.Owner,
					Message: fmt.Sprintf("%s %s on [%s]: %s", key, p.State, p.NodeNames(), p.Message)})
			}
		}
		if sc := p.Scale; sc != nil && sc.From != sc.Replicas {
			note("p/"+r.Key, "s/"+key, sc.At.Format(time.RFC3339Nano), Event{Time: sc.At, Type: "placement.scaled", Policy: key, Node: p.Owner,
				Message: fmt.Sprintf("%s autoscaled %d → %d: %s", key, sc.From, sc.Replicas, sc.Reason)})
		}
	}
	logs, g := changedSince(e, "l", e.cat.DriftLogs)
	gone = gone || g
	for _, r := range logs {
		l := r.Value
		mark, had := e.logs[r.Key]
		if had && !mark.since.Equal(l.Since) {
			had = false // a new log: its sequence numbers start over
		}
		for _, en := range l.Entries {
			if had && en.Seq <= mark.seq {
				continue
			}
			if emit {
				out = append(out, driftEvent(l, en))
			}
		}
		mark.since = l.Since
		if n := len(l.Entries); n > 0 {
			mark.seq = l.Entries[n-1].Seq
		}
		e.logs[r.Key] = mark
	}
	drifts, g := changedSince(e, "d", e.cat.Drift)
	gone = gone || g
	for _, r := range drifts {
		d := r.Value
		if d.State != "" {
			// Its agent writes a drift log: the events come from there.
			continue
		}
		state := "clear"
		if d.Alarmed {
			state = "alarm"
		}
		if d.Error != "" {
			state = "error"
		}
		msg := fmt.Sprintf("%s@%s at %s/%s: %s", d.Model, d.Version, d.Site, d.Node, state)
		switch state {
		case "alarm":
			feature, det, stat := d.AlarmCause()
			msg = fmt.Sprintf("drift on %s@%s at %s/%s after %d samples: %s %s=%.4g", d.Model, d.Version, d.Site, d.Node, d.AlarmSeen, det, feature, stat)
		case "error":
			msg += ": " + d.Error
		}
		at := d.Updated
		if d.Alarmed {
			at = d.AlarmAt
		}
		note("d/"+r.Key, "d/"+d.Policy+"/"+d.Node, d.Version+"/"+state, Event{Time: at, Type: "drift." + state, Policy: d.Policy, Node: d.Node, Message: msg})
	}
	jobs, g := changedSince(e, "j", e.cat.Jobs)
	gone = gone || g
	for _, r := range jobs {
		j := r.Value
		msg := fmt.Sprintf("job %s %s on [%s]", j.Name, j.State, strings.Join(j.Nodes, ","))
		switch {
		case j.State == catalog.JobSucceeded && j.Version != "":
			msg += fmt.Sprintf(": registered %s@%s (sha256:%.12s, accuracy %.3f)", j.Model, j.Version, j.Digest, j.Accuracy)
		case j.State == catalog.JobFailed:
			msg += ": " + j.Error
		}
		at := j.Created
		for _, t := range []time.Time{j.Started, j.Finished} {
			if !t.IsZero() {
				at = t
			}
		}
		note("j/"+r.Key, "j/"+j.Name, fmt.Sprintf("%d/%d/%s", j.Generation, j.Epoch, j.State), Event{Time: at, Type: "job." + j.State, Policy: j.Key, Node: j.Node, Message: msg})
	}
	rollouts, g := changedSince(e, "r", e.cat.Rollouts)
	gone = gone || g
	for _, rec := range rollouts {
		r := rec.Value
		// Every step, not only the current stage: a rollout can pass
		// through a stage (retraining) between two looks. A step is known
		// by its time and stage: the record keeps earlier retrains' steps
		// when its Seq moves on, and those are not news again.
		for _, st := range r.Steps {
			subject := fmt.Sprintf("r/%s/%d/%s", r.Policy, st.Time.UnixNano(), st.Stage)
			note("r/"+rec.Key, subject, "seen", Event{Time: st.Time, Type: "rollout." + st.Stage, Policy: r.Policy, Message: st.Message})
		}
	}
	// Subjects of records no longer held are forgotten.
	if !gone {
		return out
	}
	held := func(table, key string) bool {
		var ok bool
		switch table {
		case "p":
			_, ok = e.cat.Placements.Ref(key)
		case "l":
			_, ok = e.cat.DriftLogs.Ref(key)
		case "d":
			_, ok = e.cat.Drift.Ref(key)
		case "j":
			_, ok = e.cat.Jobs.Ref(key)
		case "r":
			_, ok = e.cat.Rollouts.Ref(key)
		}
		return ok
	}
	for subject, st := range e.last {
		if table, key, _ := strings.Cut(st.record, "/"); !held(table, key) {
			delete(e.last, subject)
		}
	}
	for key := range e.placed {
		if !held("p", key) {
			delete(e.placed, key)
		}
	}
	for key := range e.logs {
		if !held("l", key) {
			delete(e.logs, key)
		}
	}
	return out
}

// changedSince returns the records of t (called table in e.read) that
// changed since the last scan, and whether any may be gone (deleted, or
// the table listed afresh).
func changedSince[T any](e *Stream, table string, t *catalog.Table[T]) ([]catalog.Record[T], bool) {
	c := e.read[table]
	if c == nil {
		c = &catalog.Cursor{}
		e.read[table] = c
	}
	recs, removed := t.Next(c)
	return recs, len(removed) > 0 || c.Relisted()
}

// driftEvent tells one entry of a drift log.
func driftEvent(l catalog.DriftLog, en catalog.DriftEntry) Event {
	at := fmt.Sprintf("%s@%s at %s/%s", l.Model, en.Version, l.Site, l.Node)
	var msg string
	switch en.Kind {
	case catalog.DriftWarming:
		msg = fmt.Sprintf("%s: warming up (judges after %d samples)", at, en.Window)
	case catalog.DriftOK:
		msg = fmt.Sprintf("%s: no drift after %d samples", at, en.Samples)
	case catalog.DriftAlarm:
		msg = fmt.Sprintf("drift on %s after %d samples: %s %s=%.4g", at, en.Samples, en.Detector, en.Feature, en.Statistic)
	case catalog.DriftClear:
		msg = fmt.Sprintf("%s: clear after %d samples (by the %s detector, which raised the alarm)", at, en.Samples, en.Source)
	case catalog.DriftError:
		msg = fmt.Sprintf("%s: error: %s", at, en.Error)
	default:
		msg = fmt.Sprintf("%s: %s after %d samples", at, en.Kind, en.Samples)
	}
	return Event{Time: en.At, Type: "drift." + en.Kind, Policy: l.Policy, Node: l.Node, Message: msg}
}

// Publish tells subscribers of an event this agent saw itself rather than
// in the catalog (a corrupt blob quarantined here). Time defaults to now.
func (e *Stream) Publish(ev Event) { e.publish(ev) }

func (e *Stream) publish(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	ev.Seq = e.seq
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	ev.Count, ev.First, ev.Last, ev.Replaces = 1, ev.Time, ev.Time, 0
	if i := e.lastOf(ev.Policy, ev.Node); i >= 0 && e.ring[i].Type == ev.Type && e.ring[i].Message == ev.Message {
		prev := e.ring[i]
		ev.Count, ev.First, ev.Replaces = prev.Count+1, prev.First, prev.Seq
		e.ring = slices.Delete(e.ring, i, i+1)
	}
	e.ring = append(e.ring, ev)
	if len(e.ring) > eventRing {
		e.ring = e.ring[len(e.ring)-eventRing:]
	}
	for ch := range e.subs {
		select {
		case ch <- ev:
		default: // a slow reader misses events rather than stalling the agent
		}
	}
}

// lastOf returns the index in the ring of the latest event of a subject,
// or -1. The caller holds e.mu.
func (e *Stream) lastOf(policy, node string) int {
	for i := len(e.ring) - 1; i >= 0; i-- {
		if e.ring[i].Policy == policy && e.ring[i].Node == node {
			return i
		}
	}
	return -1
}

// Subscribe returns the kept events after since, a channel of new ones,
// and a function that ends the subscription. A subscriber that does not
// keep up misses events rather than stalling the agent.
func (e *Stream) Subscribe(since uint64) ([]Event, chan Event, func()) {
	ch := make(chan Event, 256)
	e.mu.Lock()
	defer e.mu.Unlock()
	var past []Event
	for _, ev := range e.ring {
		if ev.Seq > since {
			past = append(past, ev)
		}
	}
	e.subs[ch] = struct{}{}
	return past, ch, func() {
		e.mu.Lock()
		delete(e.subs, ch)
		e.mu.Unlock()
	}
}

// ServeHTTP streams events as server-sent events: GET /v1/events
// [?since=SEQ][&follow=false] (since=0 replays the events this agent
// kept; follow=false ends the stream after them). A repeat
// comes again as an update: the same event with a new id, Count one
// more and Replaces naming the id it had (see Event.Count).
func (e *Stream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !httpjson.CheckParams(w, q, "since", "follow") {
		return
	}
	follow := true
	if s := q.Get("follow"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			httpjson.Error(w, http.StatusBadRequest, "follow", "follow=%q: want true or false", s)
			return
		}
		follow = b
	}
	since := ^uint64(0)
	if s := q.Get("since"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			httpjson.Error(w, http.StatusBadRequest, "since", "since=%q: want an event sequence number", s)
			return
		}
		since = n
	}
	if s := r.Header.Get("Last-Event-ID"); s != "" && q.Get("since") == "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			since = n
		}
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		httpjson.Error(w, http.StatusInternalServerError, "", "streaming is not supported here")
		return
	}
	past, ch, done := e.Subscribe(since)
	defer done()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(ev Event) bool {
		b, _ := json.Marshal(ev)
		_, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
		return err == nil
	}
	for _, ev := range past {
		if !send(ev) {
			return
		}
	}
	fl.Flush()
	if !follow {
		return
	}
	beat := time.NewTicker(15 * time.Second)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-ch:
			if !send(ev) {
				return
			}
			fl.Flush()
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}
