package infer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fallbackForwarder records whether requests came marked WithFallback,
// then answers as fakeForwarder{err} would.
type fallbackForwarder struct {
	err    error
	marked []bool
}

func (f *fallbackForwarder) Forward(w http.ResponseWriter, r *http.Request, model, version string) error {
	f.marked = append(f.marked, HasFallback(r.Context()))
	return fakeForwarder{f.err}.Forward(w, r, model, version)
}

// TestStandby: a standby is not served while forwarding works (the
// replica elsewhere answers, and is told the caller has a fallback); it
// answers, with the whole request, when forwarding fails; promoted, it
// is served without forwarding; unloaded, it is gone.
func TestStandby(t *testing.T) {
	fwd := &fallbackForwarder{}
	s, reg := newServer(t, Config{Forwarder: fwd, NodeName: "edge-2", DisableBatching: true})
	const loaded, answers = `strata_infer_standby_loaded{model="m",version="1"}`, `strata_infer_standby_answers_total{model="m",version="1"}`
	m := newMLP(t, 1, 2, 1)
	if err := s.LoadStandby(context.Background(), "m", "1", m.model); err != nil {
		t.Fatal(err)
	}
	if len(s.Models()) != 0 || len(s.Standbys()) != 1 {
		t.Fatalf("models %v, standbys %v; want one standby and nothing served", s.Models(), s.Standbys())
	}
	if got := gather(t, reg)[loaded]; got != 1 {
		t.Errorf("%s = %v, want 1", loaded, got)
	}
	body := `{"inputs":[{"name":"input","datatype":"FP32","shape":[2,2],"data":[1,2,3,4]}]}`
	code, got, _ := do(t, s.Handler(), "POST", "/v2/models/m/infer", body)
	if code != 200 || got["forwarded"] != "m" || got["bytes"] != float64(len(body)) {
		t.Fatalf("with a replica answering: %d %v; want it forwarded whole", code, got)
	}
	if len(fwd.marked) != 1 || !fwd.marked[0] {
		t.Errorf("forwarded marked with a fallback: %v, want [true]", fwd.marked)
	}

	fwd.err = errors.New("edge-1 did not answer within 1s")
	code, got, hdr := do(t, s.Handler(), "POST", "/v2/models/m/infer", body)
	if code != 200 || hdr.Get(HeaderServedBy) != "edge-2" || got["outputs"] == nil {
		t.Fatalf("with no replica answering: %d by %q: %v; want answered by the standby here", code, hdr.Get(HeaderServedBy), got)
	}

	if !s.Promote("m", "1") || s.Promote("m", "1") {
		t.Fatal("Promote: want true once, then false (no standby left)")
	}
	if m := gather(t, reg); m[answers] != 1 {
		t.Errorf("%s = %v, want 1", answers, m[answers])
	} else if _, ok := m[loaded]; ok {
		t.Errorf("%s still exported after the promotion", loaded)
	}
	fwd.err, fwd.marked = nil, nil
	if code, _, hdr := do(t, s.Handler(), "POST", "/v2/models/m/infer", body); code != 200 || hdr.Get(HeaderServedBy) != "edge-2" || len(fwd.marked) != 0 {
		t.Fatalf("promoted: %d by %q, forwarded %d times; want served here", code, hdr.Get(HeaderServedBy), len(fwd.marked))
	}

	if err := s.LoadStandby(context.Background(), "n", "1", m.model); err != nil {
		t.Fatal(err)
	}
	if err := s.UnloadStandby("n", "2"); !errors.Is(err, ErrModelNotFound) {
		t.Errorf("unloading another version's standby: %v, want not found", err)
	}
	if err := s.UnloadStandby("n", "1"); err != nil || len(s.Standbys()) != 0 {
		t.Errorf("unload: %v, standbys %v", err, s.Standbys())
	}
	if code, _, _ := do(t, s.Handler(), "POST", "/v2/models/n/infer", body); code != 200 || len(fwd.marked) != 1 || fwd.marked[0] {
		t.Errorf("after unloading n's standby: %d, forwards marked %v; want forwarded without a fallback", code, fwd.marked)
	}
}

// TestSpill: while SpillInflight requests of a version are in flight
// here, a new one is offered to another replica (told the caller has a
// fallback) and answered here, whole, when none takes it; below it,
// requests are answered here without asking.
func TestSpill(t *testing.T) {
	fwd := &fallbackForwarder{}
	s, reg := newServer(t, Config{Forwarder: fwd, NodeName: "edge-2", DisableBatching: true, SpillInflight: 2})
	m := newMLP(t, 1, 2, 1)
	if err := s.Load(context.Background(), "m", "1", m.model); err != nil {
		t.Fatal(err)
	}
	body := `{"inputs":[{"name":"input","datatype":"FP32","shape":[2,2],"data":[1,2,3,4]}]}`
	st := s.statsOf("m", "1")
	st.inflight.Add(1) // one request in flight: under the mark
	if code, _, hdr := do(t, s.Handler(), "POST", "/v2/models/m/infer", body); code != 200 || hdr.Get(HeaderServedBy) != "edge-2" || len(fwd.marked) != 0 {
		t.Fatalf("one in flight: %d by %q, offered %d times; want answered here", code, hdr.Get(HeaderServedBy), len(fwd.marked))
	}
	st.inflight.Add(1) // two: at the mark
	code, got, _ := do(t, s.Handler(), "POST", "/v2/models/m/infer", body)
	if code != 200 || got["forwarded"] != "m" || got["version"] != "1" || got["bytes"] != float64(len(body)) {
		t.Fatalf("two in flight: %d %v; want version 1 forwarded whole", code, got)
	}
	if len(fwd.marked) != 1 || !fwd.marked[0] {
		t.Errorf("spilled request marked with a fallback: %v, want [true]", fwd.marked)
	}
	fwd.err = errors.New("no replica of m in this site's pool is answering")
	if code, got, hdr := do(t, s.Handler(), "POST", "/v2/models/m/infer", body); code != 200 || hdr.Get(HeaderServedBy) != "edge-2" || got["outputs"] == nil {
		t.Fatalf("two in flight, no other replica: %d by %q: %v; want answered here", code, hdr.Get(HeaderServedBy), got)
	}
	// A request another agent forwarded here is answered here.
	fwd.err, fwd.marked = nil, nil
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v2/models/m/infer", strings.NewReader(body))
	req.Header.Set(HeaderForwardedBy, "edge-1")
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Header().Get(HeaderServedBy) != "edge-2" || len(fwd.marked) != 0 {
		t.Fatalf("forwarded here, two in flight: %d by %q, offered %d times; want answered here", rec.Code, rec.Header().Get(HeaderServedBy), len(fwd.marked))
	}
	if got := gather(t, reg)[`strata_infer_spilled_total{model="m",version="1"}`]; got != 1 {
		t.Errorf("strata_infer_spilled_total = %v, want 1", got)
	}
	st.inflight.Add(-2)
}

// TestSpillWhenSlow: a version whose median answer here takes SlowAnswer
// or more (a host short of CPU) offers a request on with nothing in
// flight; a fast one does not.
func TestSpillWhenSlow(t *testing.T) {
	for _, c := range []struct {
		took    time.Duration
		offered bool
	}{{time.Millisecond, false}, {2 * SlowAnswer, true}} {
		fwd := &fallbackForwarder{}
		s, _ := newServer(t, Config{Forwarder: fwd, NodeName: "edge-2", DisableBatching: true, SpillInflight: 64})
		if err := s.Load(context.Background(), "m", "1", newMLP(t, 1, 2, 1).model); err != nil {
			t.Fatal(err)
		}
		st := s.statsOf("m", "1")
		for range 20 {
			st.record(c.took, time.Now(), "")
		}
		code, got, _ := do(t, s.Handler(), "POST", "/v2/models/m/infer", `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`)
		if offered := got["forwarded"] == "m"; code != 200 || offered != c.offered {
			t.Errorf("median %s, nothing in flight: %d %v; offered %v, want %v", c.took, code, got, offered, c.offered)
		}
	}
}
