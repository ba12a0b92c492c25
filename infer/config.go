package infer

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Server. The zero value of every field means the
// documented default; DefaultConfig returns them filled in. A Config is not
// mutated after New.
type Config struct {
	// NodeName is sent in the Strata-Served-By header of every response, so a
	// caller can tell which agent answered (forwarding makes this useful).
	// Default: the host name.
	NodeName string

	// LibraryPath is the ONNX Runtime shared library. Default:
	// $STRATA_ORT_LIB, else the first of LibraryCandidates that exists.
	// The runtime is process-global: every Server in a process must name the
	// same library.
	LibraryPath string

	// MaxRequestBytes caps an inference request body; larger bodies get
	// 413, at once when Content-Length says so. Default: 64 MiB.
	MaxRequestBytes int64

	// MaxInflightBytes caps the request bytes being read or served at once
	// on this server, and MaxModelInflightBytes those for one model: a
	// request that would pass either gets 429 with Retry-After. A request
	// reserves its Content-Length, or MaxRequestBytes when it has none
	// (chunked). Defaults: 256 MiB and 128 MiB.
	MaxInflightBytes, MaxModelInflightBytes int64

	// DisableBatching turns dynamic batching off: every request is its own
	// session call. Default: false (batching on for models that allow it).
	DisableBatching bool

	// BatchWindow is the longest a batch takes new requests. A batch closes
	// when it is full, when its window has passed, or as soon as a runner
	// is idle for it, so a lone request never waits for companions: batches
	// form while the runners are busy. Default: 2ms.
	BatchWindow time.Duration

	// MaxBatch caps the rows (first-dimension entries) of one batched
	// session call. Requests with at least this many rows run alone.
	// Default: 32.
	MaxBatch int

	// MaxRunRows caps the rows of one session call: a request with more
	// rows (of a model whose inputs have a dynamic first dimension) runs
	// as consecutive calls of at most this many rows, and its outputs are
	// joined. ONNX Runtime's working set grows with the rows of a call (a
	// scikit-learn classifier's ZipMap makes a map per row): one 48 MB
	// request of 3M rows took an agent to 5 GB. Default: 16384.
	MaxRunRows int

	// BatchRunners is how many batched session calls of one model version may
	// run at once. More runners cut queueing when cores are plentiful; fewer
	// make bigger batches. Default: 2 (measured best for a small MLP on two
	// cores; see BenchmarkBatching).
	BatchRunners int

	// IntraOpThreads is ONNX Runtime's intra-op thread count per session
	// call. Serving spreads concurrent requests (and batches) over cores,
	// and ONNX Runtime's spinning worker threads would compete with them,
	// so the default is 1; raise it for large models served at low
	// concurrency. It is bounded to one less than the host's cores, so
	// that a session never takes every core from the agent. Default: 1.
	IntraOpThreads int

	// SampleFraction is the fraction of inference requests, in [0, 1], whose
	// inputs and outputs are kept for drift detection. Default: 0 (none).
	SampleFraction float64

	// SampleFloor is the request rate per model, per second, up to which
	// every request is sampled when SampleFraction is above 0: a
	// low-traffic edge reads every row, so its drift monitors see enough
	// rows to decide. Beyond it, SampleFraction of the rest is sampled.
	// Negative: none beyond SampleFraction. Default: 10.
	SampleFloor float64

	// SampleCapacity is how many rows each model's sample ring holds; the
	// oldest rows are dropped first. Default: 1024.
	SampleCapacity int

	// Observer, when set, receives every sampled request's rows (the same
	// rows Samples returns) as they are taken, for streaming consumers such
	// as drift monitors. It is called synchronously on the request's
	// goroutine, so it must be quick and must not keep the slice's rows
	// past the call unless it copies them. Default: nil.
	Observer func(model string, rows []Sample)

	// Origin, when set, names the client site a request came from, for
	// Traffic's per-site counts; "" counts it in no site. It is called
	// once per request answered, on its goroutine. Default: nil.
	Origin func(r *http.Request) string

	// Seed seeds the sampling decisions, so tests are reproducible.
	// Default: 1.
	Seed int64

	// Forwarder serves requests for models this server does not hold. Nil
	// means such requests get 404.
	Forwarder Forwarder

	// SpillInflight is how many requests of one model version may be in
	// flight here before a new one (not itself forwarded) is offered to
	// another replica first: the Forwarder sends it to one that is alive,
	// answering and expected to answer sooner (see WithSpill), and this
	// server answers it when none takes it in time or it refuses (429,
	// 5xx). A site whose agents all serve a
	// model would otherwise keep its peak to itself, whatever replicas
	// autoscaling added elsewhere. A version whose median answer here
	// takes SlowAnswer or more (a host short of CPU) offers every request
	// on, whatever is in flight: the Forwarder still sends it only where
	// it would be answered sooner. Negative: never. Default: 64 (a full
	// batch of one-row requests for each default runner).
	SpillInflight int

	// Registerer receives the server's Prometheus collectors. Nil means they
	// are created but not registered.
	Registerer prometheus.Registerer

	// Logger receives lifecycle logs. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	var c Config
	c.EnsureDefaults()
	return c
}

// EnsureDefaults fills in the zero fields of c with their defaults.
func (c *Config) EnsureDefaults() {
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	c.LibraryPath = ConfiguredLibrary(c.LibraryPath)
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 64 << 20
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = 256 << 20
	}
	if c.MaxModelInflightBytes == 0 {
		c.MaxModelInflightBytes = 128 << 20
	}
	if c.BatchWindow == 0 {
		c.BatchWindow = 2 * time.Millisecond
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 32
	}
	if c.MaxRunRows == 0 {
		c.MaxRunRows = 16384
	}
	if c.BatchRunners == 0 {
		c.BatchRunners = 2
	}
	if c.SpillInflight == 0 {
		c.SpillInflight = 64
	}
	if c.IntraOpThreads == 0 {
		c.IntraOpThreads = 1
	}
	if c.SampleFloor == 0 {
		c.SampleFloor = 10
	}
	if c.SampleCapacity == 0 {
		c.SampleCapacity = 1024
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every problem with c in one error. It does not fill in
// defaults; call EnsureDefaults first.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxRequestBytes is %d; it must be positive", c.MaxRequestBytes))
	}
	if c.BatchWindow < 0 {
		errs = append(errs, fmt.Errorf("BatchWindow is %v; it must be positive (set DisableBatching to turn batching off)", c.BatchWindow))
	}
	if c.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("MaxBatch is %d; it must be positive", c.MaxBatch))
	}
	if c.MaxRunRows < 0 {
		errs = append(errs, fmt.Errorf("MaxRunRows is %d; it must be positive", c.MaxRunRows))
	}
	if c.BatchRunners < 0 {
		errs = append(errs, fmt.Errorf("BatchRunners is %d; it must be positive", c.BatchRunners))
	}
	if c.IntraOpThreads < 0 {
		errs = append(errs, fmt.Errorf("IntraOpThreads is %d; it must be >= 0", c.IntraOpThreads))
	}
	if c.SampleFraction < 0 || c.SampleFraction > 1 {
		errs = append(errs, fmt.Errorf("SampleFraction is %v; it must be in [0, 1]", c.SampleFraction))
	}
	if c.SampleCapacity < 0 {
		errs = append(errs, fmt.Errorf("SampleCapacity is %d; it must be positive", c.SampleCapacity))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("infer: invalid config: %w", errors.Join(errs...))
}
