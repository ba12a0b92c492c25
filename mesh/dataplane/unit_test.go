package dataplane

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLimiter(1 << 20) // 1 MiB/s, burst 64 KiB
	l.now = func() time.Time { return now }
	l.last = now
	type step struct {
		advance time.Duration
		take    int
		want    time.Duration
	}
	steps := []step{
		{0, 64 << 10, 0},                                 // the burst is free
		{0, 64 << 10, 62500 * time.Microsecond},          // then 64 KiB costs 1/16 s
		{62500 * time.Microsecond, 0, 0},                 // the debt is paid
		{time.Hour, 128 << 10, 62500 * time.Microsecond}, // idle time refills only the burst
	}
	var got []time.Duration
	var want []time.Duration
	for _, s := range steps {
		now = now.Add(s.advance)
		got = append(got, l.reserve(s.take))
		want = append(want, s.want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	var unlimited *limiter
	if err := unlimited.wait(t.Context(), 1<<30); err != nil {
		t.Errorf("nil limiter: %v", err)
	}
}

func TestSeeder(t *testing.T) {
	const (
		digest = "d"
		chunk  = 10
		size   = 30 // three chunks
		window = time.Minute
	)
	var s seeder
	begin := func(off int64, peer string, force bool) bool {
		done, ok, _ := s.begin(digest, off, chunk, size, peer, force, window)
		if ok {
			done()
		}
		return ok
	}
	var got []bool
	got = append(got,
		begin(0, "a", false), // first copy of chunk 0 goes to a
		begin(0, "b", false), // b must get it from a
		begin(0, "a", false), // a may ask again (a retry)
		begin(0, "b", true),  // forced
		begin(10, "b", false),
	)
	s.finished(digest, "b")
	got = append(got, begin(10, "c", false)) // b is done, chunk 10 is not held back for it
	got = append(got, begin(20, "c", false)) // the last chunk's first copy
	got = append(got, begin(20, "a", false)) // every chunk is out now: a (active) is served a second copy
	want := []bool{true, false, true, true, true, true, true, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("served (-want +got):\n%s", diff)
	}
}

func TestFormatProgress(t *testing.T) {
	st := TransferStatus{
		Ref: "model/scorer@v3", BytesDone: 3 << 20, BytesTotal: 4 << 20, RateBytesPerSec: 1.5 * (1 << 20),
		Sources: []SourceStatus{{ID: "a", Chunks: 2}, {ID: "b", Chunks: 1}, {ID: "c"}}, State: StateRunning,
	}
	tests := []struct {
		width int
		state string
		want  string
	}{
		{10, StateRunning, "model/scorer@v3 [#######...]  75% 3.0 MiB/4.0 MiB 1.5 MiB/s 2 sources"},
		{0, StateRunning, "model/scorer@v3  75% 3.0 MiB/4.0 MiB 1.5 MiB/s 2 sources"},
		{0, StateDone, "model/scorer@v3  75% 3.0 MiB/4.0 MiB 1.5 MiB/s 2 sources done"},
	}
	for _, tt := range tests {
		st.State = tt.state
		if got := FormatProgress(st, tt.width); got != tt.want {
			t.Errorf("FormatProgress(width %d, %s) =\n%q\nwant\n%q", tt.width, tt.state, got, tt.want)
		}
	}
	var b strings.Builder
	p := NewProgressPrinter(&b, true)
	st.State = StateRunning
	p(st)
	st.State, st.BytesDone = StateDone, st.BytesTotal
	p(st)
	if got := b.String(); !strings.HasPrefix(got, "\r") || strings.Count(got, "\r") != 2 || !strings.HasSuffix(got, "done\n") {
		t.Errorf("terminal output %q: want two redraws of one line ending in a newline", got)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{StreamsPerHolder: -1, EgressBytesPerSec: -5}.Validate()
	if err == nil {
		t.Fatal("Validate accepted an empty config")
	}
	for _, want := range []string{"Store is required", "ServerTLS", "limits must be >= 0", "bandwidth caps"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q does not mention %q", err, want)
		}
	}
}
