package mesh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/strata-mesh/strata/mesh/pki"
)

// Trust makes every agent speak only for itself. With it, each node
// document and catalog entry this node writes is signed with the node's
// identity key, and every one that arrives is verified against its
// writer's certificate (issued by the mesh CA, naming the node's ID, name,
// site, tier and roles) before it is merged or relayed; a record that
// fails is dropped and counted in strata_gossip_records_refused_total,
// never relayed. Authorize then says whether the verified writer may write
// that key (a node writes its own document; see catalog.Authorize for
// entries).
//
// The gossip key only lets a host into a site's pool: without a node
// certificate a member can relay others' records but write none.
type Trust struct {
	// CA is the mesh CA's certificate (PEM). Required.
	CA []byte
	// Cert is this node's certificate (PEM), issued by CA to the node's
	// identity key with its claims (pki.IssueNodeCertClaims). Required.
	Cert []byte
	// Authorize says whether w may write e, reading what it needs of the
	// catalog held here through r (the entry e would replace, the
	// placement a job's record derives from). It is called for every
	// entry this node writes or merges, outside the mesh's lock, and must
	// not write to the mesh. Nil lets every verified writer write every
	// key.
	Authorize func(r Reader, w Writer, e Entry) error
	// AcceptUnsigned takes unsigned records, as agents from before
	// signing write them, during a rolling upgrade. Leave it off once
	// every agent runs a version that signs (docs/security.md).
	AcceptUnsigned bool
}

// Reader is what Trust.Authorize reads of the catalog; *Mesh implements it.
type Reader interface {
	// Lookup returns the entry of key as held here, tombstone included.
	Lookup(key string) (Entry, bool)
}

// Writer is who wrote a record, as its verified certificate names it.
type Writer struct {
	// ID is the node ID (IDOf the certificate's key); Name the node name
	// (the certificate's common name).
	ID, Name string
	// Site and Tier are the node's site and tier.
	Site, Tier string
	// Controller is true when the node may own policies: write
	// policies, placements, rollouts and experiments.
	Controller bool

	key      ed25519.PublicKey
	notAfter time.Time
}

// ErrForbidden is returned by Put and Delete when this node may not write
// the key (Trust.Authorize refused it): the mesh would refuse the record.
var ErrForbidden = errors.New("mesh: not authorized")

// Reasons a record is refused, the reason label of
// strata_gossip_records_refused_total.
const (
	refuseUnsigned     = "unsigned"
	refuseBadCert      = "bad_certificate"
	refuseCertMismatch = "certificate_mismatch"
	refuseSignature    = "bad_signature"
	refuseUnknown      = "unknown_writer"
	refuseInvalid      = "invalid"
	refuseFuture       = "future_version"
	refuseForbidden    = "forbidden"
)

// refusal is why a record was refused: its metric label and the detail.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.reason + ": " + r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(reason string, format string, args ...any) *refusal {
	return &refusal{reason: reason, err: fmt.Errorf(format, args...)}
}

// trustState is a mesh's verification state: the CA, this node's key and
// certificate, and the writers verified so far.
type trustState struct {
	cfg  Trust
	pool *x509.CertPool
	key  ed25519.PrivateKey

	mu sync.Mutex
	// self is this node as its certificate names it, selfDER the
	// certificate, carried in its documents (replaced by SetCert).
	self    Writer
	selfDER []byte
	// certs caches verified certificates by the SHA-256 of their DER.
	certs map[[32]byte]*Writer
	// writers is the latest verified certificate of each node ID, from
	// its documents or from entries that carried it.
	writers map[string]*Writer
	ders    map[string][]byte
}

func newTrust(t Trust, id Identity, name string) (*trustState, error) {
	ca, err := pki.DecodeCert(t.CA)
	if err != nil {
		return nil, fmt.Errorf("mesh: trust CA: %w", err)
	}
	ts := &trustState{cfg: t, pool: x509.NewCertPool(), key: id.Key,
		certs: map[[32]byte]*Writer{}, writers: map[string]*Writer{}, ders: map[string][]byte{}}
	ts.pool.AddCert(ca)
	cert, err := pki.DecodeCert(t.Cert)
	if err != nil {
		return nil, fmt.Errorf("mesh: node certificate: %w", err)
	}
	w, err := ts.verifyCert(cert.Raw, time.Now())
	if err != nil {
		return nil, fmt.Errorf("mesh: node certificate: %w", err)
	}
	if w.ID != id.ID() || !w.key.Equal(id.Public()) {
		return nil, fmt.Errorf("mesh: node certificate is for node %s, not this node's identity %s", w.ID, id.ID())
	}
	if w.Name != name {
		return nil, fmt.Errorf("mesh: node certificate is for %q, not %q", w.Name, name)
	}
	ts.self, ts.selfDER = *w, cert.Raw
	ts.learn(w, cert.Raw)
	return ts, nil
}

// checkOwn verifies a certificate (PEM) for this node: issued by the mesh
// CA to its identity key and name.
func (t *trustState) checkOwn(certPEM []byte, name string) (*Writer, []byte, error) {
	cert, err := pki.DecodeCert(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("mesh: node certificate: %w", err)
	}
	w, err := t.verifyCert(cert.Raw, time.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("mesh: node certificate: %w", err)
	}
	if !w.key.Equal(t.key.Public()) {
		return nil, nil, fmt.Errorf("mesh: node certificate is for node %s, not this node's identity", w.ID)
	}
	if w.Name != name {
		return nil, nil, fmt.Errorf("mesh: node certificate is for %q, not %q", w.Name, name)
	}
	return w, cert.Raw, nil
}

// SetCert replaces this node's certificate (PEM), for one renewed before
// it expires, with no restart: the certificate must be issued by the mesh
// CA to this node's key and name, for its site and tier. The node's next
// document carries it, and is written at once.
func (m *Mesh) SetCert(certPEM []byte) error {
	if m.trust == nil {
		return errors.New("mesh: no trust configured: nothing signs with a certificate")
	}
	w, der, err := m.trust.checkOwn(certPEM, m.cfg.Name)
	if err != nil {
		return err
	}
	if old := m.trust.me(); w.Site != old.Site || w.Tier != old.Tier {
		return fmt.Errorf("mesh: the new certificate names site %q and tier %q, this node is in site %q, tier %q", w.Site, w.Tier, old.Site, old.Tier)
	}
	m.trust.mu.Lock()
	m.trust.self, m.trust.selfDER = *w, der
	m.trust.mu.Unlock()
	m.trust.learn(w, der)
	return m.Update(func(s *NodeState) {
		if w.Controller {
			s.Controller = s.Controller || m.cfg.Local.Controller
		}
	})
}

// CertExpiry is when this node's certificate expires; zero without trust.
func (m *Mesh) CertExpiry() time.Time {
	if m.trust == nil {
		return time.Time{}
	}
	return m.trust.me().notAfter
}

// verifyCert verifies a certificate (DER) against the mesh CA and returns
// its writer, from the cache when it was verified before.
func (t *trustState) verifyCert(der []byte, now time.Time) (*Writer, error) {
	sum := sha256.Sum256(der)
	t.mu.Lock()
	w := t.certs[sum]
	t.mu.Unlock()
	if w == nil {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: t.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: now}); err != nil {
			return nil, fmt.Errorf("not issued by the mesh CA: %w", err)
		}
		pub, ok := cert.PublicKey.(ed25519.PublicKey)
		if !ok {
			return nil, pki.ErrNotEd25519
		}
		c := pki.ClaimsOf(cert)
		if c.ID == "" || c.Site == "" {
			return nil, errors.New("certificate names no node ID and site: issued before signed gossip; issue it again")
		}
		if c.ID != IDOf(pub) {
			return nil, fmt.Errorf("certificate names node %s but its key is node %s", c.ID, IDOf(pub))
		}
		w = &Writer{ID: c.ID, Name: cert.Subject.CommonName, Site: c.Site, Tier: c.Tier, Controller: c.Controller,
			key: pub, notAfter: cert.NotAfter}
		t.mu.Lock()
		if len(t.certs) > maxCachedCerts {
			clear(t.certs)
		}
		t.certs[sum] = w
		t.mu.Unlock()
	}
	if now.After(w.notAfter) {
		return nil, fmt.Errorf("certificate of %s expired at %s", w.Name, w.notAfter.Format(time.RFC3339))
	}
	return w, nil
}

// maxCachedCerts bounds the verified-certificate cache: a peer sending
// many distinct valid certificates must not grow it without end.
const maxCachedCerts = 1 << 14

// learn records w as the writer of its node ID.
func (t *trustState) learn(w *Writer, der []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.writers[w.ID]; old == nil || !w.notAfter.Before(old.notAfter) {
		t.writers[w.ID], t.ders[w.ID] = w, der
	}
}

// writer returns the known writer of a node ID, nil when none.
func (t *trustState) writer(id string) (*Writer, []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.writers[id], t.ders[id]
}

// sigKey is the JSON member a signature is appended as; a record's
// certificate, when it carries one, follows it. Both are the last members
// of NodeState and Entry, so a decoded record encodes back to the bytes
// signed.
var sigKey = []byte(`,"sig":"`)

// sign appends this node's signature of body (a JSON object) and, when
// withCert, its certificate.
func (t *trustState) sign(body []byte, withCert bool) (raw, sig, cert []byte) {
	sig = ed25519.Sign(t.key, body)
	if withCert {
		t.mu.Lock()
		cert = t.selfDER
		t.mu.Unlock()
	}
	return appendTrailer(body, sig, cert), sig, cert
}

// me is this node as its certificate names it.
func (t *trustState) me() Writer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.self
}

func appendTrailer(body, sig, cert []byte) []byte {
	out := make([]byte, 0, len(body)+len(sig)*2+len(cert)*2+32)
	out = append(out, body[:len(body)-1]...)
	out = append(out, sigKey...)
	out = base64.StdEncoding.AppendEncode(out, sig)
	out = append(out, '"')
	if len(cert) > 0 {
		out = append(out, `,"cert":"`...)
		out = base64.StdEncoding.AppendEncode(out, cert)
		out = append(out, '"')
	}
	return append(out, '}')
}

// signedBody returns the bytes a signed record's signature covers: the
// record without its trailing signature and certificate. ok is false when
// raw does not end in exactly the trailer sig and cert make.
func signedBody(raw, sig, cert []byte) ([]byte, bool) {
	i := bytes.LastIndex(raw, sigKey)
	if i < 1 || len(sig) == 0 {
		return nil, false
	}
	body := append(raw[:i:i], '}')
	if !bytes.Equal(appendTrailer(body, sig, cert), raw) {
		return nil, false
	}
	return body, true
}

// verifyDoc checks a peer's document: signed by the key its certificate
// names, the certificate issued by the mesh CA to the node, name, site and
// tier the document claims, and controller only where the certificate
// says so.
func (t *trustState) verifyDoc(s *NodeState, raw []byte, now time.Time) *refusal {
	if len(s.Sig) == 0 {
		if t.cfg.AcceptUnsigned {
			return nil
		}
		return refuse(refuseUnsigned, "document of %s is not signed", s.Name)
	}
	w, err := t.verifyCert(s.Cert, now)
	if err != nil {
		return refuse(refuseBadCert, "document of %s: %v", s.Name, err)
	}
	switch {
	case w.ID != s.ID:
		return refuse(refuseCertMismatch, "document of node %s carries the certificate of node %s", s.ID, w.ID)
	case w.Name != s.Name:
		return refuse(refuseCertMismatch, "document names %q, its certificate %q", s.Name, w.Name)
	case w.Site != s.Site:
		return refuse(refuseCertMismatch, "document of %s names site %q, its certificate %q", s.Name, s.Site, w.Site)
	case w.Tier != "" && w.Tier != s.Tier:
		return refuse(refuseCertMismatch, "document of %s names tier %q, its certificate %q", s.Name, s.Tier, w.Tier)
	case s.Controller && !w.Controller:
		return refuse(refuseCertMismatch, "document of %s claims the controller role its certificate does not give", s.Name)
	}
	body, ok := signedBody(raw, s.Sig, s.Cert)
	if !ok || !ed25519.Verify(w.key, body, s.Sig) {
		return refuse(refuseSignature, "document of %s: signature does not verify", s.Name)
	}
	t.learn(w, s.Cert)
	return nil
}

// verifyEntry checks a catalog entry's signature against its writer's
// certificate (carried by the entry across sites, else learnt from the
// writer's document) and returns the writer.
func (t *trustState) verifyEntry(e *Entry, raw []byte, now time.Time) (*Writer, *refusal) {
	if len(e.Sig) == 0 {
		if t.cfg.AcceptUnsigned {
			return nil, nil
		}
		return nil, refuse(refuseUnsigned, "entry %s is not signed", e.Key)
	}
	var w *Writer
	if len(e.Cert) > 0 {
		var err error
		if w, err = t.verifyCert(e.Cert, now); err != nil {
			return nil, refuse(refuseBadCert, "entry %s: %v", e.Key, err)
		}
		if w.ID != e.Origin {
			return nil, refuse(refuseCertMismatch, "entry %s of node %s carries the certificate of node %s", e.Key, e.Origin, w.ID)
		}
	} else if w, _ = t.writer(e.Origin); w == nil {
		return nil, refuse(refuseUnknown, "entry %s: no certificate known for node %s", e.Key, e.Origin)
	} else if now.After(w.notAfter) {
		return nil, refuse(refuseBadCert, "entry %s: certificate of %s expired", e.Key, w.Name)
	}
	if raw == nil {
		var err error
		if raw, err = json.Marshal(e); err != nil {
			return nil, refuse(refuseInvalid, "entry %s: %v", e.Key, err)
		}
	}
	body, ok := signedBody(raw, e.Sig, e.Cert)
	if !ok || !ed25519.Verify(w.key, body, e.Sig) {
		return nil, refuse(refuseSignature, "entry %s of %s: signature does not verify", e.Key, w.Name)
	}
	if len(e.Cert) > 0 {
		t.learn(w, e.Cert)
	}
	return w, nil
}

// refused counts a refused record and logs it, at most one line a second
// for all (the metric counts each). A writer not known yet is routine
// while a node's first document is on its way (its entries arrived
// first), so it logs at debug.
func (m *Mesh) refused(kind string, r *refusal) {
	m.metrics.recordsRefused.WithLabelValues(kind, r.reason).Inc()
	ok, n := m.refusals.allow("refused", time.Now())
	if !ok {
		m.metrics.logSuppressed.Inc()
		return
	}
	level := slog.LevelWarn
	if r.reason == refuseUnknown {
		level = slog.LevelDebug
	}
	m.log.Log(context.Background(), level, "gossiped record refused", "kind", kind, "reason", r.reason, "err", r.err, "suppressed_since_last", n)
}

// knownCerts returns the certificate of every writer known here.
func (t *trustState) knownCerts() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([][]byte, 0, len(t.ders))
	for _, d := range t.ders {
		out = append(out, d)
	}
	return out
}

// learnCerts verifies certificates a peer sent and learns their writers;
// ones that do not verify are dropped (counted as refused entries' cause
// when an entry then names an unknown writer).
func (t *trustState) learnCerts(ders [][]byte, now time.Time) {
	for _, d := range ders {
		if w, err := t.verifyCert(d, now); err == nil {
			t.learn(w, d)
		}
	}
}
