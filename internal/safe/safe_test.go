package safe

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh/meshtest"
)

// syncBuffer is a log sink several goroutines may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newGuard(tb testing.TB) (*Guard, *prometheus.Registry, *syncBuffer) {
	tb.Helper()
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	g := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg, Pause: time.Millisecond})
	return g, reg, &logs
}

// exported reads the counter of component c from reg.
func exported(tb testing.TB, reg *prometheus.Registry) int {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != MetricName {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "component" && l.GetValue() == "c" {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// mismatched panics as a forged two-dimensional coordinate did in
// holder ranking: serf's DistanceTo against an eight-dimensional one.
func mismatched() {
	a, b := coordinate.NewCoordinate(coordinate.DefaultConfig()), &coordinate.Coordinate{Vec: []float64{1, 2}}
	_ = a.DistanceTo(b)
}

// TestGuardRecoversAndCounts: a panicking pass, item or loop is
// recovered, logged at Error with its stack, counted by component, and the
// work goes on.
func TestGuardRecoversAndCounts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(g *Guard) // returns once the guarded work is over
		want int            // panics counted
	}{
		{"do-no-panic", func(g *Guard) {
			if err := g.Do("c", func() {}); err != nil {
				t.Errorf("Do without a panic = %v", err)
			}
		}, 0},
		{"do", func(g *Guard) {
			err := g.Do("c", mismatched)
			var pe *PanicError
			if !errors.As(err, &pe) || !errors.Is(err, ErrPanicked) || !errors.As(err, new(coordinate.DimensionalityConflictError)) {
				t.Errorf("Do = %v; want a *PanicError wrapping the DimensionalityConflictError", err)
			}
			if pe != nil && !strings.Contains(string(pe.Stack), "mismatched") {
				t.Errorf("stack does not name the panicking function:\n%s", pe.Stack)
			}
		}, 1},
		{"go", func(g *Guard) {
			done := make(chan struct{})
			g.Go("c", func() {
				defer close(done)
				panic("one bad item")
			})
			<-done
			// The deferred close runs before Do's recover: wait for the
			// count (logged before it is counted).
			meshtest.WaitFor(t, 10*time.Second, "the panic counted", func() bool { return g.Recovered("c") == 1 })
		}, 1},
		{"recover", func(g *Guard) {
			func() {
				defer g.Recover("c")
				var xs []int
				_ = xs[len(xs)] // index out of range: a runtime panic
			}()
		}, 1},
		{"loop-restarts", func(g *Guard) {
			calls := 0
			g.Loop(context.Background(), "c", func(context.Context) {
				if calls++; calls <= 2 {
					panic("pass " + string(rune('0'+calls)))
				}
			})
			if calls != 3 {
				t.Errorf("loop ran %d times, want 3 (two panics, then a clean return)", calls)
			}
		}, 2},
		{"loop-stops-with-ctx", func(g *Guard) {
			ctx, cancel := context.WithCancel(context.Background())
			calls := 0
			g.Loop(ctx, "c", func(context.Context) {
				calls++
				cancel()
				panic("every pass")
			})
			if calls != 1 {
				t.Errorf("loop ran %d times after its context ended, want 1", calls)
			}
		}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, reg, logs := newGuard(t)
			c.run(g)
			if got := g.Recovered("c"); got != c.want {
				t.Errorf("Recovered = %d, want %d", got, c.want)
			}
			if got := exported(t, reg); got != c.want {
				t.Errorf("%s{component=\"c\"} exported as %d, want %d", MetricName, got, c.want)
			}
			out := logs.String()
			if c.want > 0 && (!strings.Contains(out, "level=ERROR") || !strings.Contains(out, "component=c") || !strings.Contains(out, "goroutine")) {
				t.Errorf("log lacks an Error record with the component and stack:\n%s", out)
			}
			if c.want == 0 && out != "" {
				t.Errorf("logged without a panic:\n%s", out)
			}
		})
	}
}

// rtts is a mesh whose RTT runs the Vivaldi maths on the coordinates it
// holds, as mesh.Mesh does.
type rtts map[string]*coordinate.Coordinate

func (m rtts) RTT(a, b string) (time.Duration, error) { return m[a].DistanceTo(m[b]), nil }

// TestRTTCannotPanic: coordinates of different dimensions give an error,
// the unknown distance callers already handle, not a panic.
func TestRTTCannotPanic(t *testing.T) {
	t.Parallel()
	own := coordinate.NewCoordinate(coordinate.DefaultConfig())
	m := rtts{"self": own, "peer": own.Clone(), "forged": {Vec: []float64{1, 2}}}
	if d, err := RTT(m, "self", "peer"); err != nil || d <= 0 {
		t.Errorf("RTT to a compatible peer = %v, %v; want the two heights, no error", d, err)
	}
	d, err := RTT(m, "self", "forged")
	if !errors.Is(err, ErrPanicked) || !errors.As(err, new(coordinate.DimensionalityConflictError)) || d != 0 {
		t.Errorf("RTT to a 2-dimensional coordinate = %v, %v; want 0 and the recovered DimensionalityConflictError", d, err)
	}
}

// TestNilGuard: a nil guard still recovers.
func TestNilGuard(t *testing.T) {
	t.Parallel()
	var g *Guard
	if err := g.Do("c", func() { panic("x") }); !errors.Is(err, ErrPanicked) {
		t.Errorf("nil guard Do = %v", err)
	}
	if g.Recovered("c") != 0 {
		t.Error("nil guard counted")
	}
}
