// Package artifacts is the agent's view of models and datasets: the signed
// manifests in the catalog with the nodes that hold their bytes, publishing
// a file as a new version, and pulling a version's bytes from the nearest
// holders over the data plane.
//
//	svc := artifacts.New(artifacts.Config{Mesh: m, Catalog: cat, Store: st, Node: dp, Signing: key})
//	m, err := svc.Lookup(storage.KindModel, "fraud", "")   // newest version
//	if !svc.Has(m.Digest) { _, err = svc.Pull(ctx, m, nil) }
//
// Without a data plane (no mesh CA) the catalog lookups work and everything
// that touches bytes returns ErrNoDataPlane.
//
// Versions are immutable mesh-wide: kind/name@version names one digest
// once a signed manifest of it is known anywhere. Publish refuses other
// bytes under a version the catalog holds (a *ConflictError, which wraps
// storage.ErrExists), from any agent. Where two manifests of one version
// meet anyway (published at once on two agents, or one written over the
// other by a peer), readers agree on the first signed (Manifest.SignedBefore): the
// service remembers the first it verified of each version, and a later one
// with other bytes never replaces it.
package artifacts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/safe"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/storage"
)

// ErrNoDataPlane is returned by calls that need artifact bytes on an agent
// without a mesh CA configured.
var ErrNoDataPlane = errors.New("not configured: artifacts need the mesh CA (run `strata keygen -pki DIR`, then set ca_cert, and ca_key or node_cert, in the agent's config)")

// ErrNoSigningKey is returned by Publish on an agent without a signing key.
var ErrNoSigningKey = errors.New("this agent has no signing_key: it cannot publish artifacts")

// ConflictError is returned by Publish for bytes whose version the mesh
// already names with other bytes. It wraps storage.ErrExists.
type ConflictError struct {
	// Held is the manifest the version names (the first signed).
	Held storage.Manifest
	// Digest is the digest of the bytes refused, when known.
	Digest string
}

func (e *ConflictError) Error() string {
	these := ""
	if e.Digest != "" {
		these = fmt.Sprintf("; these are sha256:%.12s", e.Digest)
	}
	return fmt.Sprintf("%s is already published with other bytes (sha256:%.12s, signed %s%s): versions are immutable across the mesh, so push these bytes under a new version",
		e.Held.Ref(), e.Held.Digest, e.Held.Created.Format(time.RFC3339), these)
}

// Unwrap returns storage.ErrExists.
func (e *ConflictError) Unwrap() error { return storage.ErrExists }

// versionKey is a manifest's catalog key: kind/name/version.
func versionKey(kind storage.Kind, name, version string) string {
	return string(kind) + "/" + name + "/" + version
}

// sameManifest says whether a and b are one signed manifest.
func sameManifest(a, b storage.Manifest) bool {
	return a.Digest == b.Digest && a.Signer == b.Signer && bytes.Equal(a.Signature, b.Signature)
}

// Mesh is what the service reads and writes of the mesh: the nodes'
// locality and distances, and this node's document.
type Mesh interface {
	ID() string
	Name() string
	Nodes() []mesh.Node
	Local() mesh.NodeState
	Update(fn func(*mesh.NodeState)) error
	RTT(a, b string) (time.Duration, error)
}

// Config configures a Service. Mesh and Catalog are required; Store and
// Node are nil on an agent without a data plane.
type Config struct {
	Mesh    Mesh
	Catalog *catalog.Catalog
	Store   *storage.Store
	Node    *dataplane.Node
	// Signing signs published manifests; nil: this agent cannot publish.
	Signing ed25519.PrivateKey
	// HolderWait bounds how long a pull waits for a live holder to appear.
	// Default 10s.
	HolderWait time.Duration
	// Remote, when set, lists holders of a blob in other sites (a
	// federation's summaries); a pull uses them when no agent of this
	// site holds the blob whole.
	Remote func(digest string) []dataplane.Holder
	// OnCorrupt, when set, is told of a held blob found corrupt (and
	// quarantined): the metric and the event.
	OnCorrupt func(digest string, err error)
	Logger    *slog.Logger
	// Guard recovers a panic of a pass of Run (logged, counted). Nil: a
	// guard of its own that logs to Logger and exports no metric.
	Guard *safe.Guard
}

// Service is the agent's artifact component. Safe for concurrent use.
type Service struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	pulling map[string]int // digest → pulls of it running here
	// first is, by kind/name/version, the first signed manifest this
	// service verified (catalog, local store); refused is the signature
	// of the last catalog manifest that lost to it or did not verify, so
	// that it is neither verified nor logged again at every read.
	first   map[string]storage.Manifest
	refused map[string][]byte
	// publishing serializes the publishes of one version here.
	publishing map[string]*sync.Mutex
}

// New returns the service; it starts nothing.
func New(cfg Config) *Service {
	if cfg.HolderWait == 0 {
		cfg.HolderWait = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Guard == nil {
		cfg.Guard = safe.New(safe.Config{Logger: cfg.Logger})
	}
	s := &Service{cfg: cfg, log: cfg.Logger, pulling: map[string]int{}, first: map[string]storage.Manifest{},
		refused: map[string][]byte{}, publishing: map[string]*sync.Mutex{}}
	// What this node published or pulled before a restart counts as
	// seen: a manifest with other bytes written over it meanwhile does not
	// win by arriving first after the start.
	if cfg.Store != nil {
		held, err := cfg.Store.Manifests("")
		if err != nil {
			s.log.Warn("reading the held manifests", "err", err)
		}
		for _, m := range held {
			s.note(m)
		}
	}
	return s
}

// observeGap is the least time between two passes of Run: a burst of
// catalog changes costs one pass.
const observeGap = 250 * time.Millisecond

// Run watches the catalog until ctx ends and, at each change, notes the
// manifests it holds: the first signed of each version is remembered as
// soon as it arrives here, so that a manifest of other bytes written over
// it later (published at once elsewhere, or forged) does not replace it,
// even on an agent that never reads that version in between.
func (s *Service) Run(ctx context.Context) {
	for {
		changed := s.cfg.Catalog.Changed()
		if s.cfg.Guard.Do("artifacts", s.observe) != nil && !s.cfg.Guard.Wait(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(observeGap):
		}
	}
}

// observe resolves every manifest in the catalog.
func (s *Service) observe() {
	ms, _ := s.cfg.Catalog.Manifests.Values() // undecodable ones are counted by the catalog
	for _, m := range ms {
		s.resolve(m)
	}
}

// Seen returns the first signed manifest of kind/name@version this
// service has verified, if any, without reading the catalog.
func (s *Service) Seen(kind storage.Kind, name, version string) (storage.Manifest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.first[versionKey(kind, name, version)]
	return m, ok
}

// note records verified manifest m as seen and returns the manifest its
// version names now: m, or an earlier signed one seen before.
func (s *Service) note(m storage.Manifest) storage.Manifest {
	k := versionKey(m.Kind, m.Name, m.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.first[k]
	if !ok || m.SignedBefore(cur) {
		s.first[k] = m
		if ok && cur.Digest != m.Digest {
			s.log.Warn("two manifests name one version with other bytes: the first signed wins", "ref", m.Ref(),
				"kept", m.Digest, "kept_created", m.Created, "dropped", cur.Digest, "dropped_created", cur.Created)
		}
		return m
	}
	return cur
}

// resolve returns the manifest that m's version names, m being the
// catalog's: m itself, or the first signed one this service saw of it
// when m was signed later, or does not verify, and has other bytes.
// verified is false when what it returns was not verified (m, with no
// verified manifest of its version seen, or no keys to verify with).
func (s *Service) resolve(m storage.Manifest) (_ storage.Manifest, verified bool) {
	k := versionKey(m.Kind, m.Name, m.Version)
	s.mu.Lock()
	cur, ok := s.first[k]
	refused := s.refused[k] != nil && bytes.Equal(s.refused[k], m.Signature)
	s.mu.Unlock()
	switch {
	case ok && sameManifest(cur, m):
		return cur, true
	case refused && ok:
		return cur, true
	case refused || s.cfg.Store == nil:
		// Nothing verified to prefer (or no keys to verify with, and no
		// bytes to serve): the catalog's, whose bytes are verified by
		// whoever pulls them.
		return m, false
	}
	if err := s.cfg.Store.VerifyManifest(m); err != nil {
		s.refuse(k, m)
		s.log.Warn("the catalog's manifest does not verify", "ref", m.Ref(), "digest", m.Digest, "kept", cur.Digest, "err", err)
		if ok {
			return cur, true
		}
		return m, false
	}
	got := s.note(m)
	if !sameManifest(got, m) {
		s.refuse(k, m) // verified once: not again at every read
	}
	if got.Digest != m.Digest {
		s.log.Warn("the catalog names a later-signed manifest with other bytes for a version: kept the first signed", "ref", m.Ref(),
			"kept", got.Digest, "kept_created", got.Created, "refused", m.Digest, "refused_created", m.Created)
	}
	return got, true
}

// refuse remembers catalog manifest m as not the one its version names.
func (s *Service) refuse(k string, m storage.Manifest) {
	sig := m.Signature
	if sig == nil {
		sig = []byte{} // unsigned: remembered too
	}
	s.mu.Lock()
	s.refused[k] = sig
	s.mu.Unlock()
}

// Known returns the manifest the mesh names kind/name@version with, as far
// as this agent knows: the first signed of the verified manifests of it in
// the catalog and seen before (on an agent without a data plane, which
// cannot verify, the catalog's). A miss wraps mesh.ErrNotFound.
func (s *Service) Known(kind storage.Kind, name, version string) (storage.Manifest, error) {
	k := versionKey(kind, name, version)
	if m, err := s.cfg.Catalog.Manifests.Value(k); err == nil {
		if r, verified := s.resolve(m); verified || s.cfg.Store == nil {
			return r, nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.first[k]; ok {
		return m, nil
	}
	return storage.Manifest{}, fmt.Errorf("%w: no %s %q at %s", mesh.ErrNotFound, kind, name, version)
}

// Enabled says whether this agent has a data plane (artifact bytes).
func (s *Service) Enabled() bool { return s.cfg.Store != nil && s.cfg.Node != nil }

// Store is the local blob store, nil without a data plane.
func (s *Service) Store() *storage.Store { return s.cfg.Store }

// Node is the data plane, nil without one.
func (s *Service) Node() *dataplane.Node { return s.cfg.Node }

// Info is a manifest with the nodes that hold its bytes.
type Info struct {
	storage.Manifest
	Holders []string `json:"holders"`
	// Pulling are the nodes downloading it now (they hold some chunks).
	Pulling []string `json:"pulling,omitempty"`
}

// List returns every manifest of kind ("" for all) in the catalog with
// its live holders. Records that do not decode are counted by the catalog
// and returned as the error, beside the ones that do.
func (s *Service) List(kind storage.Kind) ([]Info, error) {
	holders, pulling := map[string][]string{}, map[string][]string{}
	for _, n := range s.cfg.Mesh.Nodes() {
		if n.Status != mesh.StatusAlive {
			continue
		}
		for _, d := range n.Locality.Artifacts {
			holders[d] = append(holders[d], n.Name)
		}
		for _, d := range n.Locality.Pulling {
			pulling[d] = append(pulling[d], n.Name)
		}
	}
	var out []Info
	manifests, err := s.cfg.Catalog.Manifests.Values()
	for _, m := range manifests {
		if kind != "" && m.Kind != kind {
			continue
		}
		m, _ = s.resolve(m)
		h := holders[m.Digest]
		sort.Strings(h)
		if h == nil {
			h = []string{}
		}
		p := pulling[m.Digest]
		sort.Strings(p)
		out = append(out, Info{Manifest: m, Holders: h, Pulling: p})
	}
	return out, err
}

// Lookup finds name at version in the catalog; an empty version means the
// newest (by creation time). A miss wraps mesh.ErrNotFound.
func (s *Service) Lookup(kind storage.Kind, name, version string) (storage.Manifest, error) {
	var best *storage.Manifest
	list, _ := s.List(kind)
	for _, info := range list {
		m := info.Manifest
		if m.Name != name || (version != "" && m.Version != version) {
			continue
		}
		if best == nil || m.Created.After(best.Created) {
			best = &m
		}
	}
	if best == nil {
		v := version
		if v == "" {
			v = "any version"
		}
		return storage.Manifest{}, fmt.Errorf("%w: no %s %q at %s", mesh.ErrNotFound, kind, name, v)
	}
	return *best, nil
}

// ByDigest finds the manifest of one of kinds whose bytes have digest
// (with or without "sha256:"). A miss wraps mesh.ErrNotFound.
func (s *Service) ByDigest(digest string, kinds ...storage.Kind) (storage.Manifest, error) {
	digest = strings.TrimPrefix(digest, "sha256:")
	for _, kind := range kinds {
		list, _ := s.List(kind)
		for _, info := range list {
			if info.Digest == digest {
				return info.Manifest, nil
			}
		}
	}
	return storage.Manifest{}, fmt.Errorf("%w: no artifact with digest sha256:%s", mesh.ErrNotFound, digest)
}

// NextVersion picks the version after the newest numeric version of a
// model ("4" after "3"); a model without numeric versions gets after+".1",
// or "1" when after is empty.
func (s *Service) NextVersion(name, after string) string {
	top := -1
	list, _ := s.List(storage.KindModel)
	for _, info := range list {
		if info.Name != name {
			continue
		}
		if n, err := strconv.Atoi(info.Version); err == nil && n > top {
			top = n
		}
	}
	if top >= 0 {
		return strconv.Itoa(top + 1)
	}
	if after == "" {
		return "1"
	}
	return after + ".1"
}

// Publish stores the file at path as a new signed version and announces it
// to the mesh. A version the mesh already names (the catalog, or what this
// agent saw) takes only the same bytes again: then the manifest already
// published is returned (and this node announced as a holder); other bytes
// get a *ConflictError (storage.ErrExists), and nothing is announced.
func (s *Service) Publish(ctx context.Context, path string, spec storage.PublishSpec) (storage.Manifest, error) {
	if !s.Enabled() {
		return storage.Manifest{}, ErrNoDataPlane
	}
	if s.cfg.Signing == nil {
		return storage.Manifest{}, ErrNoSigningKey
	}
	defer s.lockVersion(versionKey(spec.Kind, spec.Name, spec.Version))()
	f, err := os.Open(path)
	if err != nil {
		return storage.Manifest{}, err
	}
	defer f.Close()
	held, herr := s.cfg.Store.Manifest(spec.Kind, spec.Name, spec.Version)
	heldBefore := herr == nil
	m, err := s.cfg.Store.Publish(ctx, f, spec, s.cfg.Signing)
	if errors.Is(err, storage.ErrExists) && heldBefore {
		// Other bytes than this node holds for the version.
		if known, kerr := s.Known(spec.Kind, spec.Name, spec.Version); kerr == nil {
			held = known
		}
		return storage.Manifest{}, &ConflictError{Held: held}
	}
	if err != nil {
		return storage.Manifest{}, err
	}
	// Compared after the bytes are in, not before: a slow upload leaves
	// a push elsewhere less time to land unseen.
	known, kerr := s.Known(m.Kind, m.Name, m.Version)
	switch {
	case kerr != nil || sameManifest(known, m):
	case known.Digest != m.Digest:
		if !heldBefore {
			// This push recorded m here: forget it (the blob stays
			// until GC finds it unreferenced).
			if err := s.cfg.Store.RemoveManifest(m.Kind, m.Name, m.Version); err != nil {
				s.log.Warn("forgetting a refused manifest", "ref", m.Ref(), "err", err)
			}
		}
		return storage.Manifest{}, &ConflictError{Held: known, Digest: m.Digest}
	case !heldBefore:
		// The same bytes again, published elsewhere first: the mesh's
		// manifest stands, and this node holds its bytes.
		if err := s.cfg.Store.RemoveManifest(m.Kind, m.Name, m.Version); err != nil {
			return storage.Manifest{}, err
		}
		if err := s.cfg.Store.AddManifest(known); err != nil {
			return storage.Manifest{}, err
		}
		m = known
	default:
		m = known
	}
	if err := s.Announce(m); err != nil {
		return m, err
	}
	return m, nil
}

// lockVersion serializes the publishes of one version on this agent; the
// returned func unlocks.
func (s *Service) lockVersion(k string) (unlock func()) {
	s.mu.Lock()
	mu := s.publishing[k]
	if mu == nil {
		mu = &sync.Mutex{}
		s.publishing[k] = mu
	}
	s.mu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// Announce puts a manifest in the catalog and this node's locality. A
// manifest whose version the mesh names with other bytes is refused with a
// *ConflictError; one the catalog holds already is not written again.
func (s *Service) Announce(m storage.Manifest) error {
	known, err := s.Known(m.Kind, m.Name, m.Version)
	switch {
	case err != nil:
	case known.Digest != m.Digest && !m.SignedBefore(known):
		return &ConflictError{Held: known, Digest: m.Digest}
	case sameManifest(known, m):
		if cur, err := s.cfg.Catalog.Manifests.Value(versionKey(m.Kind, m.Name, m.Version)); err == nil && sameManifest(cur, m) {
			s.PublishLocality()
			return nil
		}
	}
	if s.cfg.Store != nil && s.cfg.Store.VerifyManifest(m) == nil {
		s.note(m)
	}
	if _, err := s.cfg.Catalog.Manifests.Put(m); err != nil {
		return err
	}
	s.PublishLocality()
	return nil
}

// Has says whether this node holds a blob's bytes.
func (s *Service) Has(digest string) bool { return s.Enabled() && s.cfg.Store.Has(digest) }

// Open opens a held blob.
func (s *Service) Open(m storage.Manifest) (*os.File, error) {
	if !s.Enabled() {
		return nil, ErrNoDataPlane
	}
	return s.cfg.Store.OpenBlob(m)
}

// Bytes returns a held blob's bytes, checked against its digest first: a
// blob corrupted on disk is quarantined (this node stops advertising it, so
// the next use pulls it again from a verified holder) and an error wrapping
// storage.ErrDigestMismatch is returned.
func (s *Service) Bytes(m storage.Manifest) ([]byte, error) {
	if !s.Enabled() {
		return nil, ErrNoDataPlane
	}
	b, err := s.cfg.Store.ReadVerified(m)
	if errors.Is(err, storage.ErrDigestMismatch) {
		s.quarantine(m.Digest, err)
	}
	return b, err
}

// quarantine takes a corrupt blob out of the store and of this node's
// locality, and reports it.
func (s *Service) quarantine(digest string, cause error) {
	if err := s.cfg.Store.Quarantine(digest); err != nil {
		s.log.Error("quarantining a corrupt blob", "digest", digest, "err", err)
	}
	s.PublishLocality()
	if s.cfg.OnCorrupt != nil {
		s.cfg.OnCorrupt(digest, cause)
	}
}

// Scrub rehashes every held blob and quarantines the corrupt ones; it
// returns how many it checked and how many were corrupt. It stops when ctx
// ends. The agent runs it once at start, in the background.
func (s *Service) Scrub(ctx context.Context) (checked, corrupt int, err error) {
	if !s.Enabled() {
		return 0, 0, nil
	}
	blobs, err := s.cfg.Store.Blobs()
	if err != nil {
		return 0, 0, err
	}
	for _, b := range blobs {
		if err := ctx.Err(); err != nil {
			return checked, corrupt, err
		}
		checked++
		if verr := s.cfg.Store.VerifyBlob(b.Digest); errors.Is(verr, storage.ErrDigestMismatch) {
			corrupt++
			s.quarantine(b.Digest, verr)
		}
	}
	return checked, corrupt, nil
}

// Pull fetches an artifact's bytes from the nearest holders (by estimated
// RTT), several at once, verified per chunk and whole.
func (s *Service) Pull(ctx context.Context, m storage.Manifest, progress func(dataplane.TransferStatus)) (dataplane.PullResult, error) {
	if !s.Enabled() {
		return dataplane.PullResult{}, ErrNoDataPlane
	}
	// The catalog entry and the holders' locality travel separately, so a
	// pull right after a push may see the manifest before any holder: wait
	// a little for one to show up rather than fail.
	holders := s.Holders(m)
	deadline := time.Now().Add(s.cfg.HolderWait)
	for len(holders) == 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return dataplane.PullResult{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		holders = s.Holders(m)
	}
	s.forgetLoser(m)
	// Other agents pulling the same blob learn of this pull and fetch the
	// chunks it has verified from here (peer-assisted fan-out).
	end := s.startPull(m.Digest)
	s.PublishLocality()
	res, err := s.cfg.Node.Pull(ctx, dataplane.PullRequest{Manifest: m, Holders: holders, Progress: progress})
	end()
	s.PublishLocality()
	return res, err
}

// forgetLoser forgets the manifest this node holds for m's version when it
// has other bytes and m is the one the mesh names (signed first): the pull
// records m instead. The other blob stays until GC finds it unreferenced.
func (s *Service) forgetLoser(m storage.Manifest) {
	held, err := s.cfg.Store.Manifest(m.Kind, m.Name, m.Version)
	if err != nil || held.Digest == m.Digest {
		return
	}
	if known, err := s.Known(m.Kind, m.Name, m.Version); err != nil || !sameManifest(known, m) {
		return
	}
	if err := s.cfg.Store.RemoveManifest(m.Kind, m.Name, m.Version); err != nil {
		s.log.Warn("forgetting a manifest signed after the one its version names", "ref", m.Ref(), "err", err)
		return
	}
	s.log.Warn("this node held a manifest signed after the one its version names: pulling the first signed", "ref", m.Ref(), "dropped", held.Digest, "pulling", m.Digest)
}

// Holders lists the live agents that hold an artifact's bytes, or are
// pulling them and so hold some, nearest first by estimated RTT. When no
// agent of the pool holds the whole blob, the holders other sites name
// (Config.Remote) come after its pullers. It is empty while no agent holds
// the whole blob: pullers alone cannot finish.
func (s *Service) Holders(m storage.Manifest) []dataplane.Holder {
	type cand struct {
		h   dataplane.Holder
		rtt time.Duration
	}
	var cands []cand
	whole := false
	self := s.cfg.Mesh.ID()
	for _, n := range s.cfg.Mesh.Nodes() {
		if n.Status != mesh.StatusAlive || n.ID == self || n.Addrs.Data == "" {
			continue
		}
		if slices.Contains(n.Locality.Artifacts, m.Digest) {
			whole = true
		} else if !slices.Contains(n.Locality.Pulling, m.Digest) {
			continue
		}
		rtt, err := safe.RTT(s.cfg.Mesh, s.cfg.Mesh.Name(), n.Name)
		if err != nil {
			rtt = time.Hour // unknown distance, or coordinates that cannot be compared: try it last
		}
		cands = append(cands, cand{dataplane.Holder{ID: n.Name, Addr: n.Addrs.Data}, rtt})
	}
	var remote []dataplane.Holder
	if !whole && s.cfg.Remote != nil {
		remote = s.cfg.Remote(m.Digest)
	}
	if !whole && len(remote) == 0 {
		return nil
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].rtt < cands[j].rtt })
	holders := make([]dataplane.Holder, 0, len(cands)+len(remote))
	for _, c := range cands {
		holders = append(holders, c.h)
	}
	return append(holders, remote...)
}

// startPull counts a pull of digest; the returned func ends it.
func (s *Service) startPull(digest string) (end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pulling[digest]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pulling[digest]--; s.pulling[digest] == 0 {
			delete(s.pulling, digest)
		}
	}
}

// pullingDigests lists, sorted, the digests this node is pulling.
func (s *Service) pullingDigests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.pulling))
}

// LocalDigests lists, sorted, the digests of the blobs this node holds.
func (s *Service) LocalDigests() []string {
	if !s.Enabled() {
		return nil
	}
	blobs, err := s.cfg.Store.Blobs()
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(blobs))
	for _, b := range blobs {
		out = append(out, b.Digest)
	}
	sort.Strings(out)
	return out
}

// PublishLocality writes the blobs this node holds and pulls into its
// document, so placement and pullers see them.
func (s *Service) PublishLocality() {
	if !s.Enabled() {
		return
	}
	digests := s.LocalDigests()
	// Datasets held, by name and by name:version, for placement near data.
	var datasets []string
	if ms, err := s.cfg.Store.Manifests(storage.KindDataset); err == nil {
		for _, m := range ms {
			if _, ok := slices.BinarySearch(digests, m.Digest); ok {
				datasets = append(datasets, m.Name, m.Name+":"+m.Version)
			}
		}
	}
	sort.Strings(datasets)
	datasets = slices.Compact(datasets)
	pulling := s.pullingDigests()
	loc := s.cfg.Mesh.Local().Locality
	if slices.Equal(digests, loc.Artifacts) && slices.Equal(datasets, loc.Datasets) && slices.Equal(pulling, loc.Pulling) {
		return
	}
	if err := s.cfg.Mesh.Update(func(st *mesh.NodeState) {
		st.Locality.Artifacts, st.Locality.Datasets, st.Locality.Pulling = digests, datasets, pulling
	}); err != nil {
		s.log.Warn("publishing locality", "err", err)
	}
}

// OpenVerified opens a held blob for streaming. The reader hashes what it
// reads; at the end, a blob that does not hash to its digest is
// quarantined (as Bytes does) and the final Read returns an error wrapping
// storage.ErrDigestMismatch instead of io.EOF, so a reader that streams
// it on can abort.
func (s *Service) OpenVerified(m storage.Manifest) (io.ReadCloser, int64, error) {
	f, err := s.Open(m)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return &verifying{f: f, h: sha256.New(), m: m, s: s}, fi.Size(), nil
}

type verifying struct {
	f *os.File
	h hash.Hash
	m storage.Manifest
	s *Service
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.m.Digest {
			err = fmt.Errorf("%s: blob hashes to %s, not its digest %s: %w", v.m.Ref(), got, v.m.Digest, storage.ErrDigestMismatch)
			v.s.quarantine(v.m.Digest, err)
		}
	}
	return n, err
}

func (v *verifying) Close() error { return v.f.Close() }
