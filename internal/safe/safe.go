package safe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// MetricName is the counter of recovered panics, labelled by component.
const MetricName = "strata_panics_recovered_total"

// DefaultPause is how long Loop waits after a panic before it calls the
// loop again, and how long Wait waits: long enough that a fault every pass
// does not spin a core or flood the log, short enough that the work
// resumes within a gossip round or two.
const DefaultPause = time.Second

// ErrPanicked is wrapped by every *PanicError.
var ErrPanicked = errors.New("recovered panic")

// PanicError is a recovered panic: the component it happened in, the
// value passed to panic, and the goroutine's stack at the panic.
type PanicError struct {
	Component string
	Value     any
	Stack     []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("%s: %v: %v", e.Component, ErrPanicked, e.Value)
}

// Unwrap returns ErrPanicked, and the panic value when it is an error
// (a runtime error, a coordinate.DimensionalityConflictError).
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrPanicked, err}
	}
	return []error{ErrPanicked}
}

// Config configures a Guard. The zero value is usable: it logs nowhere and
// exports no metric (panics are still recovered and counted).
type Config struct {
	// Logger receives one Error record per recovered panic, with its
	// component, value and stack. Nil: discarded.
	Logger *slog.Logger
	// Registerer, when set, exports the counter (MetricName).
	Registerer prometheus.Registerer
	// Pause is how long Loop and Wait wait after a panic. Zero:
	// DefaultPause.
	Pause time.Duration
}

// Guard recovers panics of background work. Safe for concurrent use; its
// methods may be called on a nil *Guard, which recovers and discards.
type Guard struct {
	log    *slog.Logger
	panics *prometheus.CounterVec
	pause  time.Duration
}

// New returns a guard and registers its counter with cfg.Registerer. It
// panics if a collector of the same name is registered there already, as
// prometheus.MustRegister does: an agent makes one guard.
func New(cfg Config) *Guard {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Pause <= 0 {
		cfg.Pause = DefaultPause
	}
	g := &Guard{log: cfg.Logger, pause: cfg.Pause, panics: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricName,
		Help: "Panics recovered in the agent's background work, by component: the pass or item was dropped and the work went on. Any is a bug, or a peer sending what no check anticipated: see the Error log for the stack.",
	}, []string{"component"})}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(g.panics)
	}
	return g
}

// Recovered returns how many panics of component this guard recovered.
func (g *Guard) Recovered(component string) int {
	if g == nil {
		return 0
	}
	var m dto.Metric
	if err := g.panics.WithLabelValues(component).Write(&m); err != nil {
		return 0
	}
	return int(m.GetCounter().GetValue())
}

// handle logs and counts a recovered panic value.
func (g *Guard) handle(component string, v any) *PanicError {
	e := &PanicError{Component: component, Value: v, Stack: debug.Stack()}
	if g == nil {
		return e
	}
	g.log.Error("recovered a panic: the work goes on without this pass or item",
		"component", component, "panic", fmt.Sprint(v), "stack", string(e.Stack))
	g.panics.WithLabelValues(component).Inc()
	return e
}

// Recover, deferred, recovers a panic of the function that defers it,
// logs and counts it; that function then returns its zero results.
// It must be deferred directly (defer g.Recover("jobs")), not called from
// another deferred function, or recover does not see the panic.
func (g *Guard) Recover(component string) {
	if v := recover(); v != nil {
		g.handle(component, v)
	}
}

// Do calls fn and returns nil, or, when fn panics, the recovered panic as
// a *PanicError (logged and counted).
func (g *Guard) Do(component string, fn func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = g.handle(component, v)
		}
	}()
	fn()
	return nil
}

// Go runs fn in a new goroutine; a panic in it is recovered, logged and
// counted, and what fn was doing is dropped.
func (g *Guard) Go(component string, fn func()) {
	go func() { _ = g.Do(component, fn) }()
}

// Loop calls run(ctx) until it returns without panicking or ctx ends.
// After a panic it waits the guard's pause and calls run again: for a
// component's Run, whose loop a panic would otherwise end.
func (g *Guard) Loop(ctx context.Context, component string, run func(context.Context)) {
	for {
		if g.Do(component, func() { run(ctx) }) == nil || !g.Wait(ctx) {
			return
		}
	}
}

// Wait waits the guard's pause; it returns false if ctx ended first. A
// loop that recovers each pass with Do waits after one that panicked, so
// that a fault every pass does not spin.
func (g *Guard) Wait(ctx context.Context) bool {
	d := DefaultPause
	if g != nil {
		d = g.pause
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// RTTer is what RTT reads: the mesh's estimate between two nodes.
type RTTer interface {
	RTT(a, b string) (time.Duration, error)
}

// RTT returns m.RTT(a, b), with a panic returned as a *PanicError instead
// (neither logged nor counted: the caller treats it as an unknown
// distance, as it does mesh.ErrNoCoordinate). The Vivaldi maths panics on
// coordinates of different dimensions, and a peer's document carries its
// coordinate: the mesh checks them, and ranking by distance must not
// depend on that check alone.
func RTT(m RTTer, a, b string) (d time.Duration, err error) {
	defer func() {
		if v := recover(); v != nil {
			d, err = 0, &PanicError{Component: "rtt", Value: v, Stack: debug.Stack()}
		}
	}()
	return m.RTT(a, b)
}
