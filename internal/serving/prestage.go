package serving

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// DefaultPrestageBudget is LoaderConfig.PrestageBudget's default.
const DefaultPrestageBudget = 8 << 30

// standbyModel is a model this node holds, or should, as a standby.
type standbyModel struct {
	m storage.Manifest
	// warm: the policy asks for it loaded, or its replica's node is not
	// alive (see standbyModels), needing mem bytes of memory (its
	// replicas' request, or twice the model's size).
	warm bool
	mem  int64
	// replica: the placement has moved the replica here; its standby,
	// if loaded, is kept until the loader promotes it.
	replica bool
}

// downHold is how long a cold standby stays wanted loaded after its
// replica's node was last seen not alive: on a busy host a member turns
// suspect and alive again, and a model is not loaded and dropped at each
// turn.
const downHold = time.Minute

// replicaDown says whether the node named name, which holds a replica
// this node is the standby of, is known and not alive: suspect, failed,
// unreachable or gone.
func (s *Loader) replicaDown(name string) bool {
	n, err := s.cfg.Mesh.Node(name)
	return err == nil && n.Status != mesh.StatusAlive && n.Status != mesh.StatusUnknown
}

// standbyModels lists the models of the services whose placements name
// this node the standby of a replica (see catalog.PlacedNode.Standby), or
// a replica's node, and whose policies prestage, by digest. A standby is
// wanted loaded (warm) where its policy says so, and also while, and for
// downHold after, its replica's node is not alive: a replica that died
// moves here after the failure detector has ruled, and the model loads
// meanwhile instead of after. s.mu is held.
func (s *Loader) standbyModels() []standbyModel {
	me := s.cfg.Mesh.Name()
	now := time.Now()
	for d, at := range s.downSeen {
		if now.Sub(at) >= downHold {
			delete(s.downSeen, d)
		}
	}
	changed, gone := s.cfg.Catalog.Placements.Next(&s.namedRead)
	if s.namedRead.Relisted() {
		clear(s.named) // what changed names is all there is
	}
	for _, r := range changed {
		if p := r.Value; p.Kind == policy.KindInferenceService && slices.ContainsFunc(p.Nodes, func(pn catalog.PlacedNode) bool { return pn.Standby == me || pn.Name == me }) {
			s.named[r.Key] = p
		} else {
			delete(s.named, r.Key)
		}
	}
	for _, key := range gone {
		delete(s.named, key)
	}
	var want []standbyModel
	for _, key := range slices.Sorted(maps.Keys(s.named)) {
		rec := s.named[key]
		p, err := s.cfg.Catalog.Policies.Value(rec.Key)
		if err != nil {
			continue
		}
		doc, err := p.Document()
		if err != nil || doc.InferenceService == nil || !doc.InferenceService.Prestage {
			continue
		}
		spec := doc.InferenceService
		// A replica here loads the model anyway; a standby loaded
		// before the replica moved here waits for its promotion.
		replica := slices.ContainsFunc(rec.Nodes, func(pn catalog.PlacedNode) bool { return pn.Name == me })
		for _, pn := range rec.Nodes {
			if pn.Standby != me && !(replica && pn.Name == me) {
				continue
			}
			m, err := s.modelManifest(s.cfg.Catalog.ModelFor(p, spec, pn.Name))
			if err != nil {
				continue
			}
			mem := int64(spec.Resources.Memory)
			if mem <= 0 {
				mem = 2 * m.Size
			}
			if pn.Standby == me && s.replicaDown(pn.Name) {
				if _, ok := s.downSeen[m.Digest]; !ok && !spec.Warm {
					s.log.Info("a cold standby's replica is on a node not alive: loading it where memory allows", "model", m.Ref(), "node", pn.Name)
				}
				s.downSeen[m.Digest] = now
			}
			_, down := s.downSeen[m.Digest]
			warm := spec.Warm || down
			i := slices.IndexFunc(want, func(w standbyModel) bool { return w.m.Digest == m.Digest })
			if i < 0 {
				want = append(want, standbyModel{m: m, warm: warm, mem: mem, replica: replica})
				continue
			}
			want[i].warm = want[i].warm || warm
			want[i].mem = max(want[i].mem, mem)
			want[i].replica = want[i].replica || replica
		}
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].m.Digest < want[j].m.Digest })
	return want
}

// prestage pulls, without loading them, the models this node is the
// standby of (see standbyModels), so that a replica moved here when its
// node fails loads from this disk instead of across the WAN. It pulls one
// at a time, in digest order, while the standby models held here stay
// within the budget; a model over it is left for its holders. The ones
// whose policies say warm it then loads as standbys (see warm). s.mu is
// held.
func (s *Loader) prestage(ctx context.Context) {
	budget := s.cfg.PrestageBudget
	if budget == 0 {
		budget = DefaultPrestageBudget
	}
	if budget < 0 {
		return
	}
	want := s.standbyModels()
	s.warm(ctx, want)
	if s.prestaging != "" {
		return
	}
	var held int64
	var missing []storage.Manifest
	for _, w := range want {
		if w.replica {
			continue
		}
		if s.cfg.Artifacts.Has(w.m.Digest) {
			held += w.m.Size
		} else {
			missing = append(missing, w.m)
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

// warm loads, as standbys in ONNX Runtime (see infer.Server.LoadStandby),
// the standby models held here whose policies say warm, one at a time,
// while this node's unreserved memory, less what the standbys loaded
// already need, holds the next one; and unloads the standbys no longer
// wanted. A standby answers the requests made here when no replica does,
// and becomes this node's replica without loading again (see reconcile).
// s.mu is held.
func (s *Loader) warm(ctx context.Context, want []standbyModel) {
	keep := map[string]bool{}
	var need int64
	for _, w := range want {
		if w.warm {
			keep[w.m.Digest] = true
		}
	}
	for digest, sm := range s.standbys {
		if keep[digest] {
			need += sm.mem
			continue
		}
		if err := s.cfg.Inference.UnloadStandby(sm.name, sm.version); err != nil && !errors.Is(err, infer.ErrModelNotFound) {
			s.log.Warn("unloading a standby", "model", sm.name, "err", err)
		}
		delete(s.standbys, digest)
	}
	if s.warming != "" {
		return
	}
	free := s.cfg.Mesh.Local().Load.FreeMemory
	for _, w := range want {
		if !w.warm || w.replica || !s.cfg.Artifacts.Has(w.m.Digest) || s.standbys[w.m.Digest].name != "" || s.failedWarm[w.m.Digest] {
			continue
		}
		if need+w.mem > free {
			if !s.overBudget["warm "+w.m.Digest] {
				s.log.Info("not loading a standby: not enough unreserved memory", "model", w.m.Ref(), "needs", w.mem, "free", free-need)
				s.overBudget["warm "+w.m.Digest] = true
			}
			continue
		}
		s.warming = w.m.Digest
		go s.warmLoad(ctx, w)
		return
	}
}

// warmLoad loads w as a standby, for warm.
func (s *Loader) warmLoad(ctx context.Context, w standbyModel) {
	start := time.Now()
	var err error
	if perr := s.cfg.Guard.Do("serving", func() {
		var b []byte
		if b, err = s.cfg.Artifacts.Bytes(w.m); err == nil {
			err = s.cfg.Inference.LoadStandby(ctx, w.m.Name, w.m.Version, b)
		}
	}); perr != nil {
		err = perr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.warming = ""
	if err != nil {
		s.log.Warn("loading a standby failed", "model", w.m.Ref(), "err", err)
		s.failedWarm[w.m.Digest] = true // a replica moved here reports why
		return
	}
	s.standbys[w.m.Digest] = servedModel{name: w.m.Name, version: w.m.Version, digest: w.m.Digest, mem: w.mem}
	s.log.Info("standby loaded", "model", w.m.Ref(), "took", time.Since(start).Round(time.Millisecond))
	s.publishLocked()
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
