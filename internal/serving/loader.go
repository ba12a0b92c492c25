// Package serving keeps the models this node was assigned loaded in ONNX
// Runtime (Loader), and sends requests for models served elsewhere to the
// nearest replica (Forwarder).
//
//	l := serving.NewLoader(serving.LoaderConfig{Mesh: m, Catalog: cat, Artifacts: svc, Inference: srv})
//	go l.Run(ctx)
//	f := serving.NewForwarder(serving.ForwarderConfig{Mesh: m, DataPlane: dp})
package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/backoff"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
)

// Mesh is what the loader reads and writes of the mesh.
type Mesh interface {
	Name() string
	Local() mesh.NodeState
	Node(nameOrID string) (mesh.Node, error)
	Update(fn func(*mesh.NodeState)) error
	Changed() <-chan struct{}
}

// Artifacts is what the loader needs of the artifact component.
type Artifacts interface {
	Enabled() bool
	Lookup(kind storage.Kind, name, version string) (storage.Manifest, error)
	ByDigest(digest string, kinds ...storage.Kind) (storage.Manifest, error)
	Has(digest string) bool
	Pull(ctx context.Context, m storage.Manifest, progress func(dataplane.TransferStatus)) (dataplane.PullResult, error)
	Bytes(m storage.Manifest) ([]byte, error)
}

var _ Artifacts = (*artifacts.Service)(nil)

// Inference loads and unloads model versions, and standbys
// (*infer.Server).
type Inference interface {
	Load(ctx context.Context, name, version string, model []byte) error
	Unload(name, version string) error
	LoadStandby(ctx context.Context, name, version string, model []byte) error
	UnloadStandby(name, version string) error
	Promote(name, version string) bool
}

// Model is a model version loaded here.
type Model struct{ Name, Version string }

// LoaderConfig configures a Loader. Inference is nil on an agent without
// ONNX Runtime: it then loads nothing, and says so of every replica
// assigned here.
type LoaderConfig struct {
	Mesh      Mesh
	Catalog   *catalog.Catalog
	Artifacts Artifacts
	Inference Inference
	// InferenceErr is why Inference is nil, for the replicas' state.
	InferenceErr error
	// OnLoaded, when set, is told the models loaded here, by policy key,
	// after every change (the drift watch follows them). It is called
	// with the loader's lock held and must not call back into it.
	OnLoaded func(map[string]Model)
	// PrestageBudget bounds the bytes of models this node pulls ahead of
	// time as a standby (see prestage): 0 means DefaultPrestageBudget, a
	// negative budget pulls nothing.
	PrestageBudget int64
	Logger         *slog.Logger
	// Guard recovers panics of the component's background work (logged,
	// counted). Nil: a guard of its own that logs to Logger and exports
	// no metric.
	Guard *safe.Guard
}

// servedModel is a model loaded here for a policy, or as a standby
// (needing mem bytes of memory).
type servedModel struct {
	name, version, digest string
	mem                   int64
}

// Loader keeps the models loaded here in line with the inference
// assignments this node admitted: it pulls the bytes from the nearest
// holders, loads them (a new version swaps in beside the old) and unloads
// what is no longer assigned. Safe for concurrent use.
type Loader struct {
	cfg     LoaderConfig
	log     *slog.Logger
	mu      sync.Mutex
	loaded  map[string]servedModel // policy key → model
	loading map[string]bool
	// replicas is each assigned policy's state here, published in the
	// node's document.
	replicas map[string]mesh.Replica
	// prestaging is the digest of the model being pulled as a standby;
	// standbyBytes the size of those held; overBudget the models not
	// pulled for the budget (logged once).
	prestaging   string
	standbyBytes int64
	overBudget   map[string]bool
	// named are the inference services' placements that name this node a
	// replica's node or a standby, by key, kept up to date from what
	// changed since namedRead: listing every placement each pass kept
	// them all decoded (see standbyModels).
	named     map[string]catalog.Placement
	namedRead catalog.Cursor
	// standbys are the models loaded as standbys, by digest; warming the
	// digest of the one loading; failedWarm those that failed to load.
	standbys   map[string]servedModel
	warming    string
	failedWarm map[string]bool
	// downSeen holds, by digest, when a replica this node is the cold
	// standby of was last seen on a node not alive (see standbyModels).
	downSeen map[string]time.Time
}

// NewLoader returns a loader; nothing loads until Run.
func NewLoader(cfg LoaderConfig) *Loader {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Guard == nil {
		cfg.Guard = safe.New(safe.Config{Logger: cfg.Logger})
	}
	return &Loader{cfg: cfg, log: cfg.Logger, loaded: map[string]servedModel{}, loading: map[string]bool{}, replicas: map[string]mesh.Replica{}, overBudget: map[string]bool{},
		standbys: map[string]servedModel{}, failedWarm: map[string]bool{}, downSeen: map[string]time.Time{},
		named: map[string]catalog.Placement{}}
}

// Serves says whether a blob is a model loaded here (kept through GC).
func (s *Loader) Serves(digest string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.loaded {
		if m.digest == digest {
			return true
		}
	}
	_, ok := s.standbys[digest]
	return ok
}

// Run keeps the loaded models in line until ctx ends.
func (s *Loader) Run(ctx context.Context) {
	for {
		changed := s.cfg.Mesh.Changed()
		if s.cfg.Guard.Do("serving", func() { s.reconcile(ctx) }) != nil {
			if !s.cfg.Guard.Wait(ctx) {
				return
			}
			continue // the pass again, after the pause
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			// Let a burst of changes land before the next pass: while
			// thousands of policies are applied the mesh changes
			// thousands of times a second, and each pass reads every
			// assignment held here.
			select {
			case <-ctx.Done():
				return
			case <-time.After(passGap):
			}
		case <-time.After(5 * time.Second):
		}
	}
}

// passGap is the least time between two passes of the loader that a
// change of the mesh starts.
const passGap = 50 * time.Millisecond

// wanted resolves the models of the inference policies admitted here; the
// policies whose model it cannot resolve yet are in unresolved, with why.
func (s *Loader) wanted() (out map[string]storage.Manifest, unresolved map[string]string) {
	out, unresolved = map[string]storage.Manifest{}, map[string]string{}
	for _, as := range s.cfg.Mesh.Local().Assignments {
		if !as.Accepted || !strings.HasPrefix(as.Key, policy.KindInferenceService+"/") {
			continue
		}
		rec, err := s.cfg.Catalog.Policies.Value(as.Key)
		if err != nil {
			continue // not replicated here yet, or deleted
		}
		doc, err := rec.Document()
		if err != nil || doc.InferenceService == nil {
			continue
		}
		ref := s.cfg.Catalog.ModelFor(rec, doc.InferenceService, s.cfg.Mesh.Name())
		m, err := s.modelManifest(ref)
		if err != nil {
			s.log.Debug("model not resolvable yet", "policy", as.Key, "err", err)
			unresolved[as.Key] = fmt.Sprintf("model %s not published (or not replicated here yet)", refString(ref))
			continue
		}
		out[as.Key] = m
	}
	return out, unresolved
}

func refString(r policy.ModelRef) string {
	switch {
	case r.Digest != "":
		return r.Name + "@" + r.Digest
	case r.Version != "":
		return r.Name + ":" + r.Version
	}
	return r.Name
}

// loadBackoff is how long after its attempts-th failure in a row a load is
// tried again: 5s, doubling, at most 5 minutes. A permanent error (an
// operator ONNX Runtime lacks) is not retried in a loop.
func loadBackoff(attempts int) time.Duration {
	return backoff.Exp(5*time.Second, 5*time.Minute, attempts)
}

// setReplica records a policy's replica state here; s.mu is held.
func (s *Loader) setReplica(key, model, state, reason string, attempts int) {
	r := s.replicas[key]
	if r.Model == model && r.State == state && r.Reason == reason && r.Attempts == attempts {
		return
	}
	if r.Model != model || r.State != state {
		r.Since = time.Now().UTC()
	}
	r.Policy, r.Model, r.State, r.Reason, r.Attempts = key, model, state, reason, attempts
	s.replicas[key] = r
}

// modelManifest finds the manifest a policy's model reference names.
func (s *Loader) modelManifest(ref policy.ModelRef) (storage.Manifest, error) {
	return ModelManifest(s.cfg.Artifacts, ref)
}

// ModelManifest finds the manifest a policy's model reference names: by
// digest, or by name and version (newest when empty).
func ModelManifest(art interface {
	Lookup(kind storage.Kind, name, version string) (storage.Manifest, error)
	ByDigest(digest string, kinds ...storage.Kind) (storage.Manifest, error)
}, ref policy.ModelRef) (storage.Manifest, error) {
	if ref.Digest != "" {
		return art.ByDigest(ref.Digest, storage.KindModel)
	}
	return art.Lookup(storage.KindModel, ref.Name, ref.Version)
}

// synced tells the drift watch what is loaded now; s.mu is held.
func (s *Loader) synced() {
	if s.cfg.OnLoaded == nil {
		return
	}
	out := make(map[string]Model, len(s.loaded))
	for key, sm := range s.loaded {
		out[key] = Model{Name: sm.name, Version: sm.version}
	}
	s.cfg.OnLoaded(out)
}

func (s *Loader) reconcile(ctx context.Context) {
	if s.cfg.Inference == nil || !s.cfg.Artifacts.Enabled() {
		s.cannotServe()
		return
	}
	want, unresolved := s.wanted()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, why := range unresolved {
		if _, ok := s.loaded[key]; !ok {
			s.setReplica(key, "", mesh.ReplicaLoading, why, 0)
		}
	}
	for key := range s.replicas {
		if _, ok := want[key]; !ok && unresolved[key] == "" {
			delete(s.replicas, key)
		}
	}
	for key, m := range want {
		ref := m.Name + "@" + m.Version
		if cur, ok := s.loaded[key]; ok && cur.digest == m.Digest {
			// Loaded already. When it was kept serving while not
			// assigned here (make before break) and is assigned again,
			// its replica state was dropped with the assignment: say it
			// serves, or the placement waits for this replica forever.
			s.setReplica(key, ref, mesh.ReplicaServing, "", 0)
			continue
		}
		if s.loading[key] {
			continue
		}
		if sb, ok := s.standbys[m.Digest]; ok && s.cfg.Inference.Promote(sb.name, sb.version) {
			// Warm here already: it serves now, without loading again.
			delete(s.standbys, m.Digest)
			s.loaded[key] = servedModel{name: m.Name, version: m.Version, digest: m.Digest}
			s.setReplica(key, ref, mesh.ReplicaServing, "", 0)
			s.log.Info("serving model: its standby here took over", "policy", key, "model", m.Ref())
			continue
		}
		r := s.replicas[key]
		if r.State == mesh.ReplicaFailed && r.Model == ref && time.Since(r.Since) < loadBackoff(r.Attempts) {
			continue
		}
		attempts := 0
		if r.Model == ref {
			attempts = r.Attempts
		}
		if _, serving := s.loaded[key]; !serving {
			s.setReplica(key, ref, mesh.ReplicaLoading, "", attempts)
		}
		s.loading[key] = true
		go s.load(ctx, key, m)
	}
	for key, cur := range s.loaded {
		if _, ok := want[key]; ok || s.stillNeeded(key) {
			continue
		}
		if err := s.cfg.Inference.Unload(cur.name, cur.version); err != nil && !errors.Is(err, infer.ErrModelNotFound) {
			s.log.Warn("unloading model", "model", cur.name, "err", err)
		}
		delete(s.loaded, key)
		s.log.Info("model unloaded", "policy", key, "model", cur.name, "version", cur.version)
	}
	s.prestage(ctx)
	// The drift watch first: rows served once the document says so are
	// monitored.
	s.synced()
	s.publishLocked()
}

// stillNeeded says whether a model this node no longer is assigned must
// keep serving: make before break. While the policy exists and the nodes
// of its current placement do not all serve its current model yet, the old
// replica goes on answering (forwarded requests included).
func (s *Loader) stillNeeded(key string) bool {
	p, err := s.cfg.Catalog.Policies.Value(key)
	if err != nil {
		return false // deleted
	}
	doc, err := p.Document()
	if err != nil || doc.InferenceService == nil {
		return false
	}
	rec, err := s.cfg.Catalog.Placements.Value(key)
	ok := err == nil
	if !ok || rec.State != catalog.StatePlaced || len(rec.Nodes) == 0 {
		return true
	}
	ready := 0
	for _, pn := range rec.Nodes {
		m, err := s.modelManifest(s.cfg.Catalog.ModelFor(p, doc.InferenceService, pn.Name))
		if err != nil {
			return true
		}
		n, err := s.cfg.Mesh.Node(pn.Name)
		if err == nil && n.Status == mesh.StatusAlive && slices.Contains(n.Models, m.Name+"@"+m.Version) {
			ready++
		}
	}
	return ready < len(rec.Nodes)
}

// load pulls (if needed) and loads one model version. Loading a new version
// of a served model swaps it in once it is ready; requests never fail. A
// panic (in ranking holders by what their documents say, say) fails this
// load like an error: it is retried with backoff.
func (s *Loader) load(ctx context.Context, key string, m storage.Manifest) {
	var err error
	if perr := s.cfg.Guard.Do("serving", func() { err = s.pullAndLoad(ctx, m) }); perr != nil {
		err = perr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.loading, key)
	ref := m.Name + "@" + m.Version
	if err != nil {
		attempts := 1
		if r := s.replicas[key]; r.Model == ref {
			attempts = r.Attempts + 1
		}
		if _, serving := s.loaded[key]; !serving {
			s.setReplica(key, ref, mesh.ReplicaFailed, err.Error(), attempts)
		}
		s.log.Warn("loading model failed", "policy", key, "model", m.Ref(), "err", err, "attempt", attempts, "retry_in", loadBackoff(attempts))
		s.publishLocked()
		return
	}
	s.setReplica(key, ref, mesh.ReplicaServing, "", 0)
	s.loaded[key] = servedModel{name: m.Name, version: m.Version, digest: m.Digest}
	s.log.Info("serving model", "policy", key, "model", m.Ref())
	s.synced() // before the document says it serves (see reconcile)
	s.publishLocked()
}

// cannotServe says of every replica assigned here that it failed, and
// why: an agent without ONNX Runtime, or without a data plane to pull
// models over, serves nothing, and its placements say so where users
// look instead of "loading" for ever.
func (s *Loader) cannotServe() {
	why := "this agent has no data plane (no mesh CA): it cannot pull models"
	if s.cfg.Inference == nil {
		why = "this agent serves no models: ONNX Runtime is not loaded"
		if s.cfg.InferenceErr != nil {
			why += " (" + s.cfg.InferenceErr.Error() + ")"
		}
	}
	// Looked up in the document, not gathered into a map each pass: a
	// node may hold thousands of assignments.
	local := s.cfg.Mesh.Local()
	wanted := func(as mesh.Assignment) bool {
		return as.Accepted && strings.HasPrefix(as.Key, policy.KindInferenceService+"/")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.replicas {
		if as, ok := local.Assignment(key); !ok || !wanted(as) {
			delete(s.replicas, key)
		}
	}
	for _, as := range local.Assignments {
		if wanted(as) {
			s.setReplica(as.Key, s.replicas[as.Key].Model, mesh.ReplicaFailed, why, 0)
		}
	}
	s.publishLocked()
}

// pullAndLoad pulls m's bytes unless held here and loads them.
func (s *Loader) pullAndLoad(ctx context.Context, m storage.Manifest) error {
	if !s.cfg.Artifacts.Has(m.Digest) {
		if _, err := s.cfg.Artifacts.Pull(ctx, m, nil); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
	}
	b, err := s.cfg.Artifacts.Bytes(m)
	if err != nil {
		return err
	}
	return s.cfg.Inference.Load(ctx, m.Name, m.Version, b)
}

// publishLocked writes the models served here, and the standbys loaded
// here, into the node's document.
func (s *Loader) publishLocked() {
	var models, standbys []string
	for _, m := range s.loaded {
		models = append(models, m.name+"@"+m.version)
	}
	sort.Strings(models)
	models = slices.Compact(models)
	for _, m := range s.standbys {
		standbys = append(standbys, m.name+"@"+m.version)
	}
	sort.Strings(standbys)
	replicas := make([]mesh.Replica, 0, len(s.replicas))
	for key, r := range s.replicas {
		if sm, ok := s.loaded[key]; ok && r.State != mesh.ReplicaServing && r.Model == sm.name+"@"+sm.version {
			r.State, r.Reason = mesh.ReplicaServing, ""
		}
		replicas = append(replicas, r)
	}
	slices.SortFunc(replicas, func(a, b mesh.Replica) int { return strings.Compare(a.Policy, b.Policy) })
	local := s.cfg.Mesh.Local()
	if slices.Equal(models, local.Models) && slices.Equal(standbys, local.Standbys) && slices.EqualFunc(replicas, local.Replicas, func(a, b mesh.Replica) bool {
		return a.Policy == b.Policy && a.Model == b.Model && a.State == b.State && a.Reason == b.Reason && a.Attempts == b.Attempts
	}) {
		return
	}
	if err := s.cfg.Mesh.Update(func(st *mesh.NodeState) { st.Models, st.Standbys, st.Replicas = models, standbys, replicas }); err != nil {
		s.log.Warn("publishing served models", "err", err)
	}
}
