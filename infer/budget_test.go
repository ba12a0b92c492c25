package infer

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestBudget(t *testing.T) {
	t.Parallel()
	b := newBudget(100, 60)
	r1, ok := b.reserve("a", 50)
	if !ok {
		t.Fatal("50 of 100 refused")
	}
	if _, ok := b.reserve("a", 20); ok {
		t.Error("model a over its 60 accepted")
	}
	r2, ok := b.reserve("b", 50)
	if !ok {
		t.Fatal("model b's 50 refused with 50 of 100 in flight")
	}
	if _, ok := b.reserve("c", 1); ok {
		t.Error("over the total accepted")
	}
	r1()
	r1() // releasing twice gives back once
	if _, ok := b.reserve("c", 51); ok {
		t.Error("releasing twice gave back twice")
	}
	r2()
	if len(b.byModel) != 0 || b.used != 0 {
		t.Errorf("after every release: used %d, models %v", b.used, b.byModel)
	}
}

// TestInflightBytesCapped: with a request's bytes in flight at the model's
// cap, the next is refused with 429 and Retry-After before its body is
// read; a body without Content-Length over the limit gets 413.
func TestInflightBytesCapped(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t, Config{NodeName: "edge-7", MaxRequestBytes: 4096, MaxModelInflightBytes: 6000, MaxInflightBytes: 1 << 20})
	m := newMLP(t, 3, 2, 4, 2)
	load(t, s, "m", "5", m.model)
	h := s.Handler()

	// A slow client holds 4096 bytes of model m's budget (its body never
	// finishes while the second request arrives).
	pr, pw := io.Pipe()
	slow := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", pr)
	slow.ContentLength = 4096
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, slow)
		done <- rec.Code
	}()
	if _, err := pw.Write([]byte("{")); err != nil { // the handler is reading: its bytes are reserved
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", strings.NewReader(strings.Repeat(" ", 3000)))
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("second request = %d (Retry-After %q), want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if code := <-done; code != http.StatusBadRequest {
		t.Errorf("the cut-off slow request = %d, want 400", code)
	}

	// Chunked (no Content-Length) and over the limit: 413 while reading.
	big := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", strings.NewReader(strings.Repeat(" ", 5000)))
	big.ContentLength = -1
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, big)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body over the limit = %d, want 413", rec.Code)
	}
}
