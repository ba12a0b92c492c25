package serving

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// DefaultPrestageBudget is LoaderConfig.PrestageBudget's default.
const DefaultPrestageBudget = 8 << 30

// prestage pulls, without loading them, the models of the services whose
// placements name this node the standby of a replica (see
// catalog.PlacedNode.Standby), so that a replica moved here when its node
// fails loads from this disk instead of across the WAN. It pulls one at a
// time, in policy order, while the standby models held here stay within
// the budget; a model over it is left for its holders. s.mu is held.
func (s *Loader) prestage(ctx context.Context) {
	budget := s.cfg.PrestageBudget
	if budget == 0 {
		budget = DefaultPrestageBudget
	}
	if budget < 0 || s.prestaging != "" {
		return
	}
	me := s.cfg.Mesh.Name()
	recs, _ := s.cfg.Catalog.Placements.Select(func(_ string, p catalog.Placement) bool {
		return p.Kind == policy.KindInferenceService && slices.ContainsFunc(p.Nodes, func(pn catalog.PlacedNode) bool { return pn.Standby == me })
	})
	var want []storage.Manifest
	for _, r := range recs {
		rec := r.Value
		if slices.ContainsFunc(rec.Nodes, func(pn catalog.PlacedNode) bool { return pn.Name == me }) {
			continue // a replica here loads it anyway
		}
		p, err := s.cfg.Catalog.Policies.Value(rec.Key)
		if err != nil {
			continue
		}
		doc, err := p.Document()
		if err != nil || doc.InferenceService == nil || !doc.InferenceService.Prestage {
			continue
		}
		for _, pn := range rec.Nodes {
			if pn.Standby != me {
				continue
			}
			m, err := s.modelManifest(s.cfg.Catalog.ModelFor(p, doc.InferenceService, pn.Name))
			if err == nil && !slices.ContainsFunc(want, func(w storage.Manifest) bool { return w.Digest == m.Digest }) {
				want = append(want, m)
			}
		}
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].Digest < want[j].Digest })
	var held int64
	var missing []storage.Manifest
	for _, m := range want {
		if s.cfg.Artifacts.Has(m.Digest) {
			held += m.Size
		} else {
			missing = append(missing, m)
		}
	}
	s.standbyBytes = held
	for _, m := range missing {
		if held+m.Size > budget {
			if !s.overBudget[m.Digest] {
				s.log.Info("not prestaging a model: over the prestage budget", "model", m.Ref(), "bytes", m.Size, "held", held, "budget", budget)
				s.overBudget[m.Digest] = true
			}
			continue
		}
		s.prestaging = m.Digest
		go s.prestagePull(ctx, m)
		return
	}
}

// prestagePull pulls m for prestage.
func (s *Loader) prestagePull(ctx context.Context, m storage.Manifest) {
	start := time.Now()
	var err error
	if perr := s.cfg.Guard.Do("serving", func() { _, err = s.cfg.Artifacts.Pull(ctx, m, nil) }); perr != nil {
		err = perr
	}
	if err != nil {
		s.log.Warn("prestaging a model failed", "model", m.Ref(), "err", err)
	} else {
		s.log.Info("prestaged model", "model", m.Ref(), "bytes", m.Size, "took", time.Since(start).Round(time.Millisecond))
	}
	s.mu.Lock()
	s.prestaging = ""
	s.mu.Unlock()
}

// StandbyBytes is the size of the models held here as a standby, at the
// last look.
func (s *Loader) StandbyBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.standbyBytes
}
