package serving

import (
	"sync"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
)

// sloRefresh is how often SLOs reads the policies that changed.
const sloRefresh = time.Second

// SLOs knows, per model name, the tightest latency SLO of the
// InferenceServices that serve it, for the forwarder (ForwarderConfig.SLO).
// It reads the policies that changed at most every second, and decodes
// only those. Safe for concurrent use.
type SLOs struct {
	cat *catalog.Catalog

	mu       sync.Mutex
	read     time.Time
	pols     catalog.Cursor // the policies read
	byPolicy map[string]modelSLO
	byModel  map[string]time.Duration
}

type modelSLO struct {
	model string
	p99   time.Duration
}

// NewSLOs returns an index over cat's policies.
func NewSLOs(cat *catalog.Catalog) *SLOs {
	return &SLOs{cat: cat, byPolicy: map[string]modelSLO{}, byModel: map[string]time.Duration{}}
}

// For returns the tightest latency SLO of the services that serve model
// (by name), 0 when none has one.
func (s *SLOs) For(model string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.read) >= sloRefresh {
		s.read = now
		s.refresh()
	}
	return s.byModel[model]
}

// refresh reads what changed among the policies; s.mu is held.
func (s *SLOs) refresh() {
	changed, gone := s.cat.Policies.Next(&s.pols)
	dirty := len(changed) > 0 || len(gone) > 0 || s.pols.Relisted()
	if s.pols.Relisted() {
		clear(s.byPolicy) // what changed names is all there is
	}
	for _, key := range gone {
		delete(s.byPolicy, key)
	}
	for _, r := range changed {
		delete(s.byPolicy, r.Key)
		doc, err := r.Value.Document()
		if err != nil || doc.InferenceService == nil || doc.InferenceService.Latency == nil || doc.InferenceService.Model.Name == "" {
			continue
		}
		svc := doc.InferenceService
		s.byPolicy[r.Key] = modelSLO{model: svc.Model.Name, p99: time.Duration(svc.Latency.P99)}
	}
	if !dirty {
		return
	}
	by := make(map[string]time.Duration, len(s.byModel))
	for _, m := range s.byPolicy {
		if cur, ok := by[m.model]; !ok || m.p99 < cur {
			by[m.model] = m.p99
		}
	}
	s.byModel = by
}
