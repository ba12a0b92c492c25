package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/storage"
)

// keyNodeCert is where an agent keeps the certificate it issued itself.
const keyNodeCert = "agent/node-cert"

// ErrNoDataPlane is returned by artifact calls on an agent without a mesh
// CA configured.
var ErrNoDataPlane = errors.New("not configured: artifacts need the mesh CA (run `strata keygen -pki DIR`, then set ca_cert, and ca_key or node_cert, in the agent's config)")

// PKI is the agent's key material as PEM: the mesh CA's certificate, and
// either the CA's key (the agent issues its own certificate at first start)
// or a certificate issued to this node's identity key; the signing key that
// may publish artifacts; and the public keys trusted to sign manifests
// (default: the signing key's).
type PKI struct {
	CACert, CAKey, NodeCert, SigningKey, TrustedKeys []byte
}

func (c *Config) loadPKI() (PKI, error) {
	p := c.PKI
	read := func(dst *[]byte, path, what string) error {
		if path == "" || len(*dst) > 0 {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		*dst = b
		return nil
	}
	return p, errors.Join(
		read(&p.CACert, c.CACertFile, "ca_cert"),
		read(&p.CAKey, c.CAKeyFile, "ca_key"),
		read(&p.NodeCert, c.NodeCertFile, "node_cert"),
		read(&p.SigningKey, c.SigningKeyFile, "signing_key"),
		read(&p.TrustedKeys, c.TrustedKeysFile, "trusted_keys"),
	)
}

// artifacts is the agent's artifact store and data plane.
type artifacts struct {
	store   *storage.Store
	node    *dataplane.Node
	signing ed25519.PrivateKey // nil: this agent cannot publish

	mu      sync.Mutex
	pulling map[string]int // digest → pulls of it running here
}

// startPull counts a pull of digest; the returned func ends it.
func (ar *artifacts) startPull(digest string) (end func()) {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	if ar.pulling == nil {
		ar.pulling = map[string]int{}
	}
	ar.pulling[digest]++
	return func() {
		ar.mu.Lock()
		defer ar.mu.Unlock()
		if ar.pulling[digest]--; ar.pulling[digest] == 0 {
			delete(ar.pulling, digest)
		}
	}
}

// pullingDigests lists, sorted, the digests this node is pulling.
func (ar *artifacts) pullingDigests() []string {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return slices.Sorted(maps.Keys(ar.pulling))
}

// openArtifacts opens the store and starts the data plane, when a CA is
// configured; otherwise it returns nil and artifact calls answer
// ErrNoDataPlane.
func (a *Agent) openArtifacts() (*artifacts, error) {
	p, err := a.cfg.loadPKI()
	if err != nil {
		return nil, err
	}
	if len(p.CACert) == 0 {
		return nil, nil
	}
	cert := p.NodeCert
	if len(cert) == 0 {
		cert, err = a.db.Get([]byte(keyNodeCert))
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
	}
	if len(cert) == 0 {
		if len(p.CAKey) == 0 {
			return nil, errors.New("data plane: set node_cert, or ca_key so the agent can issue its own certificate")
		}
		host, _, _ := net.SplitHostPort(a.cfg.DataAddr)
		hosts := []string{"127.0.0.1", "::1", "localhost"}
		if host != "" && host != "0.0.0.0" && host != "::" {
			hosts = append(hosts, host)
		}
		if cert, err = pki.IssueNodeCert(p.CACert, p.CAKey, a.id.Key, a.cfg.Name, hosts); err != nil {
			return nil, fmt.Errorf("data plane: issue node certificate: %w", err)
		}
		if err := a.db.Put([]byte(keyNodeCert), cert); err != nil {
			return nil, err
		}
	}
	var signing ed25519.PrivateKey
	if len(p.SigningKey) > 0 {
		if signing, err = pki.DecodePrivateKey(p.SigningKey); err != nil {
			return nil, fmt.Errorf("signing_key: %w", err)
		}
	}
	var trusted []ed25519.PublicKey
	if len(p.TrustedKeys) > 0 {
		if trusted, err = pki.DecodePublicKeys(p.TrustedKeys); err != nil {
			return nil, fmt.Errorf("trusted_keys: %w", err)
		}
	} else if signing != nil {
		trusted = []ed25519.PublicKey{signing.Public().(ed25519.PublicKey)}
	}
	store, err := storage.OpenStore(storage.StoreOptions{
		Dir: filepath.Join(a.cfg.DataDir, "artifacts"), DB: a.db, Trusted: trusted, Logger: a.log,
		Pinned: a.pinned,
	})
	if err != nil {
		return nil, err
	}
	srvTLS, err := pki.ServerTLSConfig(p.CACert, cert, a.id.Key)
	if err != nil {
		store.Close()
		return nil, err
	}
	cliTLS, err := pki.ClientTLSConfig(p.CACert, cert, a.id.Key)
	if err != nil {
		store.Close()
		return nil, err
	}
	dc := dataplane.DefaultConfig()
	dc.ListenAddr, dc.Store, dc.ServerTLS, dc.ClientTLS, dc.Logger = a.cfg.DataAddr, store, srvTLS, cliTLS, a.log
	dc.IngressBytesPerSec, dc.EgressBytesPerSec = int64(a.cfg.IngressLimit), int64(a.cfg.EgressLimit)
	dc.Handler = a.peerRoutes()
	if a.cfg.MaxConcurrentPulls > 0 {
		dc.MaxConcurrentPulls = a.cfg.MaxConcurrentPulls
	}
	node, err := dataplane.New(dc)
	if err != nil {
		store.Close()
		return nil, err
	}
	registerDataPlaneMetrics(a.reg, node)
	return &artifacts{store: store, node: node, signing: signing}, nil
}

// registerDataPlaneMetrics exports the data plane's counters at /metrics.
func registerDataPlaneMetrics(reg prometheus.Registerer, n *dataplane.Node) {
	counter := func(name, help string, v func(dataplane.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(n.Stats())) })
	}
	reg.MustRegister(
		counter("strata_dataplane_sent_bytes_total", "Chunk bytes this agent served to other agents.",
			func(s dataplane.Stats) int64 { return s.BytesSent }),
		counter("strata_dataplane_received_bytes_total", "Chunk bytes this agent fetched from other agents.",
			func(s dataplane.Stats) int64 { return s.BytesReceived }),
		counter("strata_dataplane_chunks_served_total", "Chunks this agent served.",
			func(s dataplane.Stats) int64 { return s.ChunksServed }),
		counter("strata_dataplane_chunks_fetched_total", "Chunks this agent fetched and verified.",
			func(s dataplane.Stats) int64 { return s.ChunksFetched }),
		counter("strata_dataplane_chunks_rejected_total", "Fetched chunks that failed their digest (and were fetched again elsewhere).",
			func(s dataplane.Stats) int64 { return s.ChunksRejected }),
		counter("strata_dataplane_holders_rejected_total", "Holders dropped from a pull for serving a corrupted chunk.",
			func(s dataplane.Stats) int64 { return s.HoldersRejected }),
		counter("strata_dataplane_seeded_refusals_total", "Chunk requests answered \"fetch it from your peers\" (super-seeding).",
			func(s dataplane.Stats) int64 { return s.SeededRefusals }),
		counter("strata_dataplane_busy_refusals_total", "Chunk requests refused because the queue under the egress cap was full.",
			func(s dataplane.Stats) int64 { return s.BusyRefusals }),
		counter("strata_dataplane_proxied_requests_total", "Requests (forwarded inference, job logs) this agent sent to peers over the data plane.",
			func(s dataplane.Stats) int64 { return s.Proxied }),
		counter("strata_dataplane_proxy_served_total", "Requests peers sent this agent over the data plane.",
			func(s dataplane.Stats) int64 { return s.ProxyServed }),
	)
}

func (ar *artifacts) close() error {
	if ar == nil {
		return nil
	}
	return errors.Join(ar.node.Close(), ar.store.Close())
}

// pinned keeps, through GC, every blob a placement here needs: the models
// this node serves.
func (a *Agent) pinned(digest string) bool {
	s := a.srvg
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.loaded {
		if m.digest == digest {
			return true
		}
	}
	return false
}

// localDigests lists the digests of the blobs this node holds.
func (ar *artifacts) localDigests() []string {
	blobs, err := ar.store.Blobs()
	if err != nil {
		return nil
	}
	var out []string
	for _, b := range blobs {
		out = append(out, b.Digest)
	}
	sort.Strings(out)
	return out
}

// publishLocality writes the blobs this node holds into its document, so
// placement and pullers see them.
func (a *Agent) publishLocality() {
	if a.art == nil {
		return
	}
	digests := a.art.localDigests()
	// Datasets held, by name and by name:version, for placement near data.
	var datasets []string
	if ms, err := a.art.store.Manifests(storage.KindDataset); err == nil {
		for _, m := range ms {
			if _, ok := slices.BinarySearch(digests, m.Digest); ok {
				datasets = append(datasets, m.Name, m.Name+":"+m.Version)
			}
		}
	}
	sort.Strings(datasets)
	datasets = slices.Compact(datasets)
	pulling := a.art.pullingDigests()
	loc := a.mesh.Local().Locality
	if slices.Equal(digests, loc.Artifacts) && slices.Equal(datasets, loc.Datasets) && slices.Equal(pulling, loc.Pulling) {
		return
	}
	if err := a.mesh.Update(func(s *mesh.NodeState) {
		s.Locality.Artifacts, s.Locality.Datasets, s.Locality.Pulling = digests, datasets, pulling
	}); err != nil {
		a.log.Warn("publishing locality", "err", err)
	}
}

// ArtifactInfo is a manifest with the nodes that hold its bytes.
type ArtifactInfo struct {
	storage.Manifest
	Holders []string `json:"holders"`
	// Pulling are the nodes downloading it now (they hold some chunks).
	Pulling []string `json:"pulling,omitempty"`
}

// artifactsList returns every manifest in the catalog with its holders.
func (a *Agent) artifactsList(kind storage.Kind) []ArtifactInfo {
	holders, pulling := map[string][]string{}, map[string][]string{}
	for _, n := range a.mesh.Nodes() {
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
	var out []ArtifactInfo
	manifests, err := a.cat.Manifests.Values()
	a.decodeErrors(err)
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
		out = append(out, ArtifactInfo{Manifest: m, Holders: h, Pulling: p})
	}
	return out
}

// lookupManifest finds name at version in the catalog; an empty version
// means the newest (by creation time).
func (a *Agent) lookupManifest(kind storage.Kind, name, version string) (storage.Manifest, error) {
	var best *storage.Manifest
	for _, info := range a.artifactsList(kind) {
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

// publish stores an artifact from a file and announces it to the mesh.
func (a *Agent) publish(ctx context.Context, path string, spec storage.PublishSpec) (storage.Manifest, error) {
	if a.art == nil {
		return storage.Manifest{}, ErrNoDataPlane
	}
	if a.art.signing == nil {
		return storage.Manifest{}, errors.New("this agent has no signing_key: it cannot publish artifacts")
	}
	f, err := os.Open(path)
	if err != nil {
		return storage.Manifest{}, err
	}
	defer f.Close()
	m, err := a.art.store.Publish(ctx, f, spec, a.art.signing)
	if err != nil {
		return storage.Manifest{}, err
	}
	if err := a.announce(m); err != nil {
		return m, err
	}
	return m, nil
}

// announce puts a manifest in the catalog and this node's locality.
func (a *Agent) announce(m storage.Manifest) error {
	if _, err := a.cat.Manifests.Put(m); err != nil {
		return err
	}
	a.publishLocality()
	return nil
}

// pull fetches an artifact's bytes from the nearest holders (by estimated
// RTT), several at once, verified per chunk and whole.
func (a *Agent) pull(ctx context.Context, m storage.Manifest, progress func(dataplane.TransferStatus)) (dataplane.PullResult, error) {
	if a.art == nil {
		return dataplane.PullResult{}, ErrNoDataPlane
	}
	// The catalog entry and the holders' locality travel separately, so a
	// pull right after a push may see the manifest before any holder: wait
	// a little for one to show up rather than fail.
	holders := a.holdersOf(m)
	deadline := time.Now().Add(holderWait)
	for len(holders) == 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return dataplane.PullResult{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		holders = a.holdersOf(m)
	}
	// Other agents pulling the same blob learn of this pull and fetch the
	// chunks it has verified from here (peer-assisted fan-out).
	end := a.art.startPull(m.Digest)
	a.publishLocality()
	res, err := a.art.node.Pull(ctx, dataplane.PullRequest{Manifest: m, Holders: holders, Progress: progress})
	end()
	a.publishLocality()
	return res, err
}

// holderWait bounds how long a pull waits for a live holder to appear.
const holderWait = 10 * time.Second

// holdersOf lists the live agents that hold an artifact's bytes, or are
// pulling them and so hold some, nearest first by estimated RTT. It is
// empty while no agent holds the whole blob: pullers alone cannot finish.
func (a *Agent) holdersOf(m storage.Manifest) []dataplane.Holder {
	type cand struct {
		h   dataplane.Holder
		rtt time.Duration
	}
	var cands []cand
	whole := false
	for _, n := range a.mesh.Nodes() {
		if n.Status != mesh.StatusAlive || n.ID == a.ID() || n.Addrs.Data == "" {
			continue
		}
		if slices.Contains(n.Locality.Artifacts, m.Digest) {
			whole = true
		} else if !slices.Contains(n.Locality.Pulling, m.Digest) {
			continue
		}
		rtt, err := a.mesh.RTT(a.cfg.Name, n.Name)
		if err != nil {
			rtt = time.Hour // unknown distance: try it last
		}
		cands = append(cands, cand{dataplane.Holder{ID: n.Name, Addr: n.Addrs.Data}, rtt})
	}
	if !whole {
		return nil
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].rtt < cands[j].rtt })
	var holders []dataplane.Holder
	for _, c := range cands {
		holders = append(holders, c.h)
	}
	return holders
}

// modelBytes returns a held model's bytes.
func (a *Agent) modelBytes(m storage.Manifest) ([]byte, error) {
	f, err := a.art.store.OpenBlob(m)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, err
	}
	return b, nil
}

func trimMesh(err error) string { return strings.TrimPrefix(err.Error(), "mesh: ") }
