package infer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// A standby is a model version loaded and ready here that this server
// does not serve while a replica elsewhere does: a request for it is
// forwarded as for any model not served here, and answered by the
// standby only when forwarding fails (no replica answers in time, or
// none is left). Promote makes it the served version without loading it
// again. The agent loads the standbys of the replicas placement would
// move here if their nodes failed (a policy's `warm: true`).

// LoadStandby loads model (ONNX bytes) as a standby of version ver of
// name, replacing a standby of name loaded before.
func (s *Server) LoadStandby(ctx context.Context, name, ver string, model []byte) error {
	start := time.Now()
	v, err := s.newServable(ctx, "load standby", name, ver, model)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		v.retire()
		return ErrClosed
	}
	old := s.standbys[name]
	s.standbys[name] = v
	s.mu.Unlock()
	if old != nil {
		old.retire()
		s.metrics.standbys.DeleteLabelValues(name, old.info.Version)
	}
	s.metrics.standbys.WithLabelValues(name, ver).Set(1)
	s.log.Info("standby loaded", "model", name, "version", ver, "load_ms", time.Since(start).Milliseconds())
	return nil
}

// UnloadStandby unloads the standby of name at version ver; it returns
// ErrModelNotFound when there is none.
func (s *Server) UnloadStandby(name, ver string) error {
	s.mu.Lock()
	v := s.standbys[name]
	if v == nil || v.info.Version != ver {
		s.mu.Unlock()
		return fmt.Errorf("%w: no standby of %s", ErrModelNotFound, modelRef(name, ver))
	}
	delete(s.standbys, name)
	s.mu.Unlock()
	v.retire()
	s.metrics.standbys.DeleteLabelValues(name, ver)
	s.log.Info("standby unloaded", "model", name, "version", ver)
	return nil
}

// Promote serves the standby of name at version ver, as Load would have
// after loading it (the version served before retires once its requests
// end). It says false, and changes nothing, when there is no such
// standby.
func (s *Server) Promote(name, ver string) bool {
	s.mu.Lock()
	v := s.standbys[name]
	if v == nil || v.info.Version != ver || s.closed {
		s.mu.Unlock()
		return false
	}
	delete(s.standbys, name)
	old := s.models[name]
	s.models[name] = v
	if s.samplers[name] == nil {
		s.samplers[name] = &sampler{}
	}
	s.mu.Unlock()
	if old != nil {
		old.retire()
	}
	s.metrics.standbys.DeleteLabelValues(name, ver)
	s.log.Info("standby promoted: serving", "model", name, "version", ver)
	return true
}

// Standbys describes the standbys loaded here, in no particular order.
func (s *Server) Standbys() []ModelInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ModelInfo, 0, len(s.standbys))
	for _, v := range s.standbys {
		out = append(out, cloneInfo(v.info))
	}
	return out
}

// standby returns the standby of name (at ver, when not empty) with a
// reference held, or nil.
func (s *Server) standby(name, ver string) *version {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := s.standbys[name]
	if v == nil || s.closed || (ver != "" && v.info.Version != ver) {
		return nil
	}
	v.acquire()
	return v
}

type fallbackKey struct{}

// WithFallback marks a request's context: the caller can answer the
// request itself should forwarding fail, so a Forwarder should give up on
// a replica that does not answer soon, and not try replicas it believes
// failed.
func WithFallback(ctx context.Context) context.Context {
	return context.WithValue(ctx, fallbackKey{}, true)
}

// HasFallback says whether ctx was marked by WithFallback.
func HasFallback(ctx context.Context) bool {
	b, _ := ctx.Value(fallbackKey{}).(bool)
	return b
}

type spillKey struct{}

// WithSpill marks a request's context as spilled by a busy replica that
// expects to answer it in here (its p50 times the requests ahead): a
// Forwarder sends it only to a replica it expects to answer sooner.
func WithSpill(ctx context.Context, here time.Duration) context.Context {
	return context.WithValue(ctx, spillKey{}, here)
}

// SpillHere returns what WithSpill marked ctx with, and whether it did.
func SpillHere(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(spillKey{}).(time.Duration)
	return d, ok
}

// forwardOrStandby forwards r, for a model not served here of which v is
// a standby; when forwarding fails, it returns v (the caller answers from
// it) with r's body restored. Otherwise it releases v and returns nil,
// the response written.
func (s *Server) forwardOrStandby(w http.ResponseWriter, r *http.Request, v *version, name, ver string) (*version, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		v.release()
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ferr := s.cfg.Forwarder.Forward(w, r.WithContext(WithFallback(r.Context())), name, ver)
	if ferr == nil {
		v.release()
		return nil, nil
	}
	s.log.Debug("answering from the standby: forwarding failed", "model", name, "version", v.info.Version, "error", ferr)
	s.metrics.standby.WithLabelValues(name, v.info.Version).Inc()
	r.Body = io.NopCloser(bytes.NewReader(body))
	return v, nil
}

// spill offers r, for version v served here while SpillInflight of its
// requests are in flight, to another replica (one alive and answering,
// see WithFallback, and expected to answer sooner than this server,
// see WithSpill). It says true, v released, when one answered; false,
// with r's body restored, when this server is to answer it.
func (s *Server) spill(w http.ResponseWriter, r *http.Request, v *version, inflight int64) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// Answered here: reading on meets the same error (a body over
		// the limit is 413).
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	here := s.Traffic(v.info.Name, v.info.Version).P50 * time.Duration(1+inflight)
	ctx := WithSpill(WithFallback(r.Context()), here)
	if err := s.cfg.Forwarder.Forward(w, r.WithContext(ctx), v.info.Name, v.info.Version); err != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		return false
	}
	v.release()
	s.metrics.spilled.WithLabelValues(v.info.Name, v.info.Version).Inc()
	return true
}
