package infer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by a Server after Close.
var ErrClosed = errors.New("infer: server closed")

// ErrModelNotReady is returned for a model that is placed but not serving
// yet, or that failed to load; the HTTP handler answers it with 503.
var ErrModelNotReady = errors.New("infer: model not ready")

// Forwarder serves requests for models this server does not hold, typically
// by proxying them to the nearest agent that does. The agent implements it.
//
// Forward is called concurrently, from HTTP handler goroutines, with the
// request body unread; it may block for as long as the request lives. It must
// write the whole response when it returns nil. It returns an error wrapping
// ErrModelNotFound when no replica holds the model (the server answers 404),
// and any other error when it could not reach one (the server answers 502);
// in both cases it must not have written to w.
type Forwarder interface {
	Forward(w http.ResponseWriter, r *http.Request, model, version string) error
}

// Request is an inference request in Go form.
type Request struct {
	// Model names the model; Version picks a version, "" meaning the one
	// served now.
	Model, Version string
	// ID is echoed in the response.
	ID string
	// Inputs are the model's inputs, in any order.
	Inputs []Tensor
	// Outputs names the outputs wanted; empty means all, in model order.
	Outputs []string
}

// Response is the answer to a Request.
type Response struct {
	Model, Version, ID string
	Outputs            []Tensor
}

// Server holds loaded model versions and answers inference requests for them,
// in Go (Infer) and over the Open Inference Protocol (Handler). Its methods
// are safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	coin    coin
	handler http.Handler
	budget  *budget
	// freeing is set while returnMemory runs.
	freeing atomic.Bool

	mu       sync.RWMutex
	models   map[string]*version
	standbys map[string]*version // see LoadStandby
	samplers map[string]*sampler
	stats    sync.Map // "name@version" → *versionStats
	closed   bool
}

// New returns a Server for cfg (defaults filled in for zero fields). It
// initialises the process-global ONNX Runtime environment, and fails with
// ErrRuntimeUnavailable, saying how to install it, when the library is
// missing.
func New(cfg Config) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := InitRuntime(cfg.LibraryPath); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("infer: register metrics: %w", err)
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "infer"),
		metrics:  m,
		coin:     coin{rng: rand.New(rand.NewSource(cfg.Seed))},
		models:   make(map[string]*version),
		standbys: make(map[string]*version),
		samplers: make(map[string]*sampler),
		budget:   newBudget(cfg.MaxInflightBytes, cfg.MaxModelInflightBytes),
	}
	s.handler = s.routes()
	return s, nil
}

// Load loads model (ONNX bytes) as version ver of name. When another version
// of name is loaded, it keeps serving until the new one is ready; then new
// requests go to the new one and the old closes once its in-flight requests
// have finished. Loading a version that is already served reloads it the
// same way. Models whose inputs or outputs are 0-d or of an unsupported type
// are refused.
// Check loads model as Load would, without serving it: nil when ONNX
// Runtime can run it here. An operator it lacks is an error wrapping
// ErrUnsupportedOperator that names the operator and its operator set.
func (s *Server) Check(name, ver string, model []byte) error {
	v, err := newVersion(name, ver, model, &s.cfg)
	if err != nil {
		return err
	}
	v.close()
	return nil
}

func (s *Server) Load(ctx context.Context, name, ver string, model []byte) error {
	start := time.Now()
	v, err := s.newServable(ctx, "load", name, ver, model)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		v.retire()
		return ErrClosed
	}
	old := s.models[name]
	s.models[name] = v
	if s.samplers[name] == nil {
		s.samplers[name] = &sampler{}
	}
	s.mu.Unlock()
	if old != nil {
		old.retire()
		s.log.Info("model swapped", "model", name, "version", ver, "previous_version", old.info.Version, "load_ms", time.Since(start).Milliseconds())
	} else {
		s.log.Info("model loaded", "model", name, "version", ver, "batching", v.info.Batching, "load_ms", time.Since(start).Milliseconds())
	}
	return nil
}

// newServable opens model as version ver of name, with its batcher when
// the model batches, for what ("load", "load standby"); it fails for an
// empty name or version, and when ctx ends before or while it opens.
func (s *Server) newServable(ctx context.Context, what, name, ver string, model []byte) (*version, error) {
	if name == "" || ver == "" {
		return nil, fmt.Errorf("infer: %s: model name and version must not be empty (got %q, %q)", what, name, ver)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := newVersion(name, ver, model, &s.cfg)
	if err != nil {
		return nil, err
	}
	if v.info.Batching {
		obs := s.metrics.batch.WithLabelValues(name, ver)
		v.batcher = newBatcher(v, s.cfg.BatchWindow, s.cfg.MaxBatch, s.cfg.BatchRunners,
			func(rows int) { obs.Observe(float64(rows)) })
	}
	if err := ctx.Err(); err != nil {
		v.retire()
		return nil, err
	}
	return v, nil
}

// Unload stops serving name. With ver non-empty, only that version is
// unloaded, and ErrModelNotFound is returned when it is not the one served.
// In-flight requests finish first.
func (s *Server) Unload(name, ver string) error {
	s.mu.Lock()
	v := s.models[name]
	if v == nil || (ver != "" && v.info.Version != ver) {
		s.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrModelNotFound, modelRef(name, ver))
	}
	delete(s.models, name)
	s.mu.Unlock()
	v.retire()
	s.log.Info("model unloaded", "model", name, "version", v.info.Version)
	return nil
}

// Models describes the model versions served, sorted by name.
func (s *Server) Models() []ModelInfo {
	s.mu.RLock()
	out := make([]ModelInfo, 0, len(s.models))
	for _, v := range s.models {
		out = append(out, cloneInfo(v.info))
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Model describes the served version of name, or returns ErrModelNotFound.
func (s *Server) Model(name, ver string) (ModelInfo, error) {
	v, err := s.acquire(name, ver)
	if err != nil {
		return ModelInfo{}, err
	}
	defer v.release()
	return cloneInfo(v.info), nil
}

// sample keeps a request's rows for drift detection: every request while
// the model's rate is under SampleFloor per second, then SampleFraction
// of them.
func (s *Server) sample(v *version, inputs, outs []Tensor) {
	if s.cfg.SampleFraction <= 0 {
		return
	}
	s.mu.RLock()
	sm := s.samplers[v.info.Name]
	s.mu.RUnlock()
	if sm == nil || !(sm.take(time.Now(), s.cfg.SampleFloor) || s.coin.flip(s.cfg.SampleFraction)) {
		return
	}
	if rs := rowsOf(v.info.Version, inputs, outs); rs != nil {
		sm.add(rs, s.cfg.SampleCapacity)
		if s.cfg.Observer != nil {
			s.cfg.Observer(v.info.Name, rs)
		}
	}
}

// Samples returns the rows sampled from name's traffic (see
// Config.SampleFraction), oldest first, across versions (each row says
// which answered it); nil when none. Samples outlive Unload, so a drift
// detector can still read them.
func (s *Server) Samples(name string) []Sample {
	s.mu.RLock()
	sm := s.samplers[name]
	s.mu.RUnlock()
	if sm == nil {
		return nil
	}
	return sm.snapshot()
}

// Close unloads every model; in-flight requests finish first. It is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	vs, sbs := s.models, s.standbys
	s.models, s.standbys = map[string]*version{}, map[string]*version{}
	s.mu.Unlock()
	for _, v := range vs {
		v.retire()
	}
	for _, v := range sbs {
		v.retire()
	}
	return nil
}

func cloneInfo(m ModelInfo) ModelInfo {
	c := m
	c.Inputs = slices.Clone(m.Inputs)
	c.Outputs = slices.Clone(m.Outputs)
	for i := range c.Inputs {
		c.Inputs[i].Shape = slices.Clone(c.Inputs[i].Shape)
	}
	for i := range c.Outputs {
		c.Outputs[i].Shape = slices.Clone(c.Outputs[i].Shape)
	}
	return c
}

func modelRef(name, ver string) string {
	if ver == "" {
		return fmt.Sprintf("model %q", name)
	}
	return fmt.Sprintf("model %q version %q", name, ver)
}

// acquire returns the served version of name (which must be ver when ver is
// non-empty) with a reference held; the caller must release it.
func (s *Server) acquire(name, ver string) (*version, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	v := s.models[name]
	if v == nil || (ver != "" && v.info.Version != ver) {
		return nil, fmt.Errorf("%w: %s is not served here", ErrModelNotFound, modelRef(name, ver))
	}
	v.acquire()
	return v, nil
}

// Infer runs req on the version of req.Model served now, batching it with
// concurrent requests when the model allows. Errors wrap ErrModelNotFound,
// ErrBadInput (the request does not fit the model), ErrScalarTensor or
// ErrUnsupportedDatatype; others come from ONNX Runtime.
func (s *Server) Infer(ctx context.Context, req *Request) (*Response, error) {
	v, err := s.acquire(req.Model, req.Version)
	if err != nil {
		return nil, err
	}
	defer v.release()
	return s.infer(ctx, v, req)
}

func (s *Server) infer(ctx context.Context, v *version, req *Request) (*Response, error) {
	inputs, rows, err := v.check(req.Inputs)
	if err != nil {
		return nil, err
	}
	want := make([]int, 0, len(req.Outputs))
	for _, name := range req.Outputs {
		i := slices.IndexFunc(v.info.Outputs, func(t TensorInfo) bool { return t.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: model %s has no output %q (outputs: %s)", ErrBadInput, v.info.Name, name, quotedNames(v.info.Outputs))
		}
		want = append(want, i)
	}
	var outs []Tensor
	switch {
	case v.batcher != nil && rows > 0 && rows < s.cfg.MaxBatch:
		outs, err = v.batcher.do(ctx, inputs, rows)
	case rows > s.cfg.MaxRunRows && v.splittable():
		s.metrics.batch.WithLabelValues(v.info.Name, v.info.Version).Observe(float64(rows))
		outs, err = v.runSplit(inputs, rows, s.cfg.MaxRunRows)
	default:
		s.metrics.batch.WithLabelValues(v.info.Name, v.info.Version).Observe(float64(max(rows, 1)))
		outs, err = v.run(inputs)
	}
	if err != nil {
		return nil, err
	}
	s.sample(v, inputs, outs)
	if len(want) > 0 {
		sel := make([]Tensor, len(want))
		for i, j := range want {
			sel[i] = outs[j]
		}
		outs = sel
	}
	return &Response{Model: v.info.Name, Version: v.info.Version, ID: req.ID, Outputs: outs}, nil
}
