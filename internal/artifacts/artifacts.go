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
package artifacts

import (
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
}

// Service is the agent's artifact component. Safe for concurrent use.
type Service struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	pulling map[string]int // digest → pulls of it running here
}

// New returns the service; it starts nothing.
func New(cfg Config) *Service {
	if cfg.HolderWait == 0 {
		cfg.HolderWait = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: cfg.Logger, pulling: map[string]int{}}
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
// to the mesh.
func (s *Service) Publish(ctx context.Context, path string, spec storage.PublishSpec) (storage.Manifest, error) {
	if !s.Enabled() {
		return storage.Manifest{}, ErrNoDataPlane
	}
	if s.cfg.Signing == nil {
		return storage.Manifest{}, ErrNoSigningKey
	}
	f, err := os.Open(path)
	if err != nil {
		return storage.Manifest{}, err
	}
	defer f.Close()
	m, err := s.cfg.Store.Publish(ctx, f, spec, s.cfg.Signing)
	if err != nil {
		return storage.Manifest{}, err
	}
	if err := s.Announce(m); err != nil {
		return m, err
	}
	return m, nil
}

// Announce puts a manifest in the catalog and this node's locality.
func (s *Service) Announce(m storage.Manifest) error {
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
	// Other agents pulling the same blob learn of this pull and fetch the
	// chunks it has verified from here (peer-assisted fan-out).
	end := s.startPull(m.Digest)
	s.PublishLocality()
	res, err := s.cfg.Node.Pull(ctx, dataplane.PullRequest{Manifest: m, Holders: holders, Progress: progress})
	end()
	s.PublishLocality()
	return res, err
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
