package agent

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/internal/artifacts"
	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/storage"
)

// keyNodeCert is where an agent keeps the certificate it issued itself.
const keyNodeCert = "agent/node-cert"

// ErrNoDataPlane is returned by artifact calls on an agent without a mesh
// CA configured.
var ErrNoDataPlane = artifacts.ErrNoDataPlane

// ArtifactInfo is a manifest with the nodes that hold its bytes.
type ArtifactInfo = artifacts.Info

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

// dataPlane is the agent's blob store, data-plane node and signing key,
// opened before the mesh (the node document advertises the data address).
type dataPlane struct {
	store   *storage.Store
	node    *dataplane.Node
	signing ed25519.PrivateKey // nil: this agent cannot publish
	// caCert and cert are the mesh CA's certificate and this node's
	// (PEM): the mesh signs and verifies gossip with them (mesh.Trust).
	// caKey, when this agent holds it, renews cert.
	caCert, caKey, cert []byte
	// tlsCert is the certificate the data plane presents, replaced when
	// it is renewed.
	tlsCert atomic.Pointer[tls.Certificate]
}

// useCert makes certPEM the certificate the data plane presents.
func (dp *dataPlane) useCert(certPEM []byte, key ed25519.PrivateKey) error {
	leaf, err := pki.DecodeCert(certPEM)
	if err != nil {
		return err
	}
	dp.tlsCert.Store(&tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf})
	return nil
}

// certHosts are the addresses a node certificate names.
func (a *Agent) certHosts() []string {
	host, _, _ := net.SplitHostPort(a.cfg.DataAddr)
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if host != "" && host != "0.0.0.0" && host != "::" {
		hosts = append(hosts, host)
	}
	return hosts
}

// renewCert issues this node's certificate again with the CA key and puts
// it in use with no restart: the data plane's next handshakes present it
// and the mesh's next documents carry it. An agent without the CA key
// renews at its next start (bootstrap asks again then).
func (a *Agent) renewCert() error {
	dp := a.dp
	if dp == nil || len(dp.caKey) == 0 {
		return errors.New("renewing the node certificate needs ca_key here; restart with bootstrap to ask for a new one")
	}
	cert, err := pki.IssueNodeCertClaims(dp.caCert, dp.caKey, a.id.Public(), a.cfg.Name, a.certHosts(), a.claims())
	if err != nil {
		return err
	}
	if err := a.mesh.SetCert(cert); err != nil {
		return err
	}
	if err := dp.useCert(cert, a.id.Key); err != nil {
		return err
	}
	if err := a.db.Put([]byte(keyNodeCert), cert); err != nil {
		return err
	}
	a.log.Info("node certificate renewed", "expires", a.mesh.CertExpiry().Format(time.RFC3339))
	return nil
}

// renewLoop renews the node certificate when it is within
// certRenewBefore of its expiry, checking every certCheckEvery.
func (a *Agent) renewLoop(ctx context.Context) {
	t := time.NewTicker(certCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if exp := a.mesh.CertExpiry(); exp.IsZero() || time.Until(exp) > certRenewBefore {
			continue
		}
		if err := a.renewCert(); err != nil {
			a.log.Warn("node certificate expires soon and was not renewed", "expires", a.mesh.CertExpiry().Format(time.RFC3339), "err", err)
		}
	}
}

// certCheckEvery is how often renewLoop looks at the certificate's expiry.
const certCheckEvery = time.Hour

func (dp *dataPlane) close() error {
	if dp == nil {
		return nil
	}
	return errors.Join(dp.node.Close(), dp.store.Close())
}

// openArtifacts opens the store and starts the data plane, when a CA is
// configured; otherwise it returns nil and artifact calls answer
// ErrNoDataPlane.
func (a *Agent) openArtifacts() (*dataPlane, error) {
	p, err := a.cfg.loadPKI()
	if err != nil {
		return nil, err
	}
	if len(p.CACert) == 0 {
		return nil, nil
	}
	if len(p.CAKey) > 0 {
		a.issueCert = func(req api.CertRequest) ([]byte, error) { return a.issueNodeCert(p, req) }
	}
	claims := a.claims()
	cert := p.NodeCert
	if len(cert) == 0 {
		cert, err = a.db.Get([]byte(keyNodeCert))
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		// A certificate issued before signed gossip, or for another
		// site, tier or role, is issued again.
		if len(cert) > 0 {
			if why := certStale(cert, claims); why != "" {
				a.log.Info("issuing this node's certificate again", "why", why)
				cert = nil
			}
		}
	} else if why := certStale(cert, claims); why != "" {
		return nil, fmt.Errorf("node_cert: %s: issue it again for node %s, site %q, tier %q, controller %v, or leave node_cert out so the agent issues its own (ca_key) or asks for one (bootstrap)", why, claims.ID, claims.Site, claims.Tier, claims.Controller)
	}
	hosts := a.certHosts()
	if len(cert) == 0 {
		switch {
		case len(p.CAKey) > 0:
			if cert, err = pki.IssueNodeCertClaims(p.CACert, p.CAKey, a.id.Public(), a.cfg.Name, hosts, claims); err != nil {
				return nil, fmt.Errorf("data plane: issue node certificate: %w", err)
			}
		case a.cfg.Bootstrap != "":
			if cert, err = a.bootstrapCert(p.CACert, hosts, claims); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New("data plane: set node_cert, ca_key so the agent can issue its own certificate, or bootstrap (an agent that holds ca_key) and bootstrap_token_file")
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
	dp := &dataPlane{signing: signing, caCert: p.CACert, caKey: p.CAKey, cert: cert}
	if err := dp.useCert(cert, a.id.Key); err != nil {
		store.Close()
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
	// The certificate in use can be replaced (renewed) with no restart:
	// every handshake takes the current one.
	srvTLS.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return dp.tlsCert.Load(), nil }
	cliTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return dp.tlsCert.Load(), nil }
	dc.ListenAddr, dc.Store, dc.ServerTLS, dc.ClientTLS, dc.Logger = a.cfg.DataAddr, store, srvTLS, cliTLS, a.log
	dc.IngressBytesPerSec, dc.EgressBytesPerSec = int64(a.cfg.IngressLimit), int64(a.cfg.EgressLimit)
	dc.NodeID = mesh.IDOf // a forwarded request goes only to the node whose key its ID names
	dc.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Peers may call before New has built the API.
		if h := a.peer.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.Error(w, "starting", http.StatusServiceUnavailable)
	})
	if a.cfg.MaxConcurrentPulls > 0 {
		dc.MaxConcurrentPulls = a.cfg.MaxConcurrentPulls
	}
	node, err := dataplane.New(dc)
	if err != nil {
		store.Close()
		return nil, err
	}
	registerDataPlaneMetrics(a.reg, node)
	dp.store, dp.node = store, node
	return dp, nil
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
		counter("strata_dataplane_relayed_requests_total", "Data-plane requests this agent sent over a federation (libp2p) stream, to holders in other sites whose QUIC address did not answer.",
			func(s dataplane.Stats) int64 { return s.Relayed }),
		counter("strata_dataplane_relay_served_total", "Data-plane requests other sites' agents sent this agent over a federation (libp2p) stream.",
			func(s dataplane.Stats) int64 { return s.RelayServed }),
	)
}

// pinned keeps, through GC, every blob a placement here needs: the models
// this node serves.
func (a *Agent) pinned(digest string) bool {
	return a.srvg != nil && a.srvg.Serves(digest)
}

// issueNodeCert issues a certificate to a node that asked for one over the
// API (bootstrap), unless its name belongs to another identity in the mesh:
// the certificate would let the asker pass for that node on the data plane.
func (a *Agent) issueNodeCert(p PKI, req api.CertRequest) ([]byte, error) {
	pub, err := pki.DecodePublicKey([]byte(req.PublicKey))
	if err != nil {
		return nil, fmt.Errorf("public_key: %w", err)
	}
	id := mesh.IDOf(pub)
	if req.Name == a.cfg.Name && id != a.id.ID() {
		return nil, fmt.Errorf("%w: %s is this agent", httpapi.ErrNameHeld, req.Name)
	}
	for _, m := range a.mesh.Members() {
		if m.Name == req.Name && m.ID != "" && m.ID != id && m.Status != mesh.StatusLeft {
			return nil, fmt.Errorf("%w: %s is node %s (%s); a node that lost its identity key must be removed first", httpapi.ErrNameHeld, req.Name, m.ID, m.Status)
		}
	}
	return pki.IssueNodeCertClaims(p.CACert, p.CAKey, pub, req.Name, req.Hosts,
		pki.Claims{ID: id, Site: req.Site, Tier: req.Tier, Controller: req.Controller})
}

// claims are what this node's certificate must say of it.
func (a *Agent) claims() pki.Claims {
	return pki.Claims{ID: a.id.ID(), Site: a.cfg.Site, Tier: a.cfg.Tier, Controller: a.cfg.controller()}
}

// certStale says why a node certificate (PEM) does not fit claims, or "".
func certStale(certPEM []byte, want pki.Claims) string {
	cert, err := pki.DecodeCert(certPEM)
	if err != nil {
		return err.Error()
	}
	got := pki.ClaimsOf(cert)
	switch {
	case got.ID == "":
		return "the certificate was issued before signed gossip and names no node ID, site or role"
	case got != want:
		return fmt.Sprintf("the certificate names node %s, site %q, tier %q, controller %v", got.ID, got.Site, got.Tier, got.Controller)
	case time.Until(cert.NotAfter) < certRenewBefore:
		return "the certificate expires at " + cert.NotAfter.Format(time.RFC3339)
	}
	return ""
}

// certRenewBefore is how long before its expiry a node certificate the
// agent can issue again (it holds the CA key, or bootstraps) is renewed at
// start.
const certRenewBefore = 30 * 24 * time.Hour

// bootstrapCert asks the agent at cfg.Bootstrap for this node's
// certificate, with the token in bootstrap_token(_file), and checks that
// the mesh CA issued it to this node's key and name.
func (a *Agent) bootstrapCert(caCert []byte, hosts []string, claims pki.Claims) ([]byte, error) {
	token := cmp.Or(a.cfg.BootstrapToken, os.Getenv("STRATA_BOOTSTRAP_TOKEN"))
	if token == "" && a.cfg.BootstrapTokenFile != "" {
		b, err := os.ReadFile(a.cfg.BootstrapTokenFile)
		if err != nil {
			return nil, fmt.Errorf("bootstrap_token_file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, errors.New("bootstrap: set bootstrap_token_file or $STRATA_BOOTSTRAP_TOKEN (a token with scope cert on the bootstrap agent)")
	}
	pub, err := pki.EncodePublicKey(a.id.Public())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootstrapTimeout)
	defer cancel()
	res, err := client.New(a.cfg.Bootstrap, client.WithToken(token)).IssueCert(ctx, api.CertRequest{Name: a.cfg.Name, PublicKey: string(pub), Hosts: hosts,
		Site: claims.Site, Tier: claims.Tier, Controller: claims.Controller})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: asking %s for a node certificate: %w", a.cfg.Bootstrap, err)
	}
	cert := []byte(res.Certificate)
	if err := pki.CheckNodeCert(caCert, cert, a.id.Public(), a.cfg.Name); err != nil {
		return nil, fmt.Errorf("bootstrap: the certificate %s sent: %w", a.cfg.Bootstrap, err)
	}
	a.log.Info("node certificate issued by the mesh CA", "issued_by", res.IssuedBy, "bootstrap", a.cfg.Bootstrap)
	return cert, nil
}

// bootstrapTimeout bounds the certificate request at first start.
const bootstrapTimeout = 30 * time.Second
