package pki

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"time"
)

// Sentinel errors.
var (
	// ErrNoPEM is returned when input holds no PEM block of the expected type.
	ErrNoPEM = errors.New("pki: no PEM block of the expected type")
	// ErrNotEd25519 is returned when a key is not an ed25519 key.
	ErrNotEd25519 = errors.New("pki: key is not ed25519")
	// ErrUntrustedPeer is returned by the TLS verification when the peer's
	// certificate does not chain to the mesh CA.
	ErrUntrustedPeer = errors.New("pki: peer certificate not issued by the mesh CA")
)

// PEM block types written and accepted by this package.
const (
	PEMCertificate = "CERTIFICATE"
	PEMPrivateKey  = "PRIVATE KEY"
	PEMPublicKey   = "PUBLIC KEY"
)

// Validity periods of what this package issues.
const (
	// CAValidity is how long a mesh CA certificate is valid: 10 years.
	CAValidity = 10 * 365 * 24 * time.Hour
	// NodeCertValidity is how long a node certificate is valid: 2 years.
	NodeCertValidity = 2 * 365 * 24 * time.Hour
)

// ALPN is the application protocol negotiated on the data plane. QUIC
// requires one; both configurations set it.
const ALPN = "strata-data/1"

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewCA makes a mesh certificate authority: a self-signed ed25519 CA
// certificate with the given common name and its private key, both PEM
// encoded (CERTIFICATE and PKCS#8 PRIVATE KEY).
func NewCA(commonName string) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		commonName = "strata mesh CA"
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, fmt.Errorf("pki: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"strata"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	keyPEM, err = EncodePrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return EncodeCert(der), keyPEM, nil
}

// IssueNodeCert issues a certificate for a node, signed by the CA. The
// certificate's key is the node's ed25519 identity key; nodeName becomes the
// common name and a DNS name; each entry of hosts becomes an IP address or a
// DNS name in the certificate. The certificate is good for both server and
// client authentication and is returned PEM encoded.
func IssueNodeCert(caCertPEM, caKeyPEM []byte, nodeKey ed25519.PrivateKey, nodeName string, hosts []string) ([]byte, error) {
	if len(nodeKey) != ed25519.PrivateKeySize {
		return nil, ErrNotEd25519
	}
	return IssueNodeCertFor(caCertPEM, caKeyPEM, nodeKey.Public().(ed25519.PublicKey), nodeName, hosts)
}

// IssueNodeCertFor is IssueNodeCert for a node known by its public key
// only: a node that asked a CA holder for its certificate (bootstrap).
func IssueNodeCertFor(caCertPEM, caKeyPEM []byte, nodeKey ed25519.PublicKey, nodeName string, hosts []string) ([]byte, error) {
	return issue(caCertPEM, caKeyPEM, nodeKey, nodeName, hosts, Claims{}, NodeCertValidity)
}

func issue(caCertPEM, caKeyPEM []byte, nodeKey ed25519.PublicKey, nodeName string, hosts []string, claims Claims, validity time.Duration) ([]byte, error) {
	if len(nodeKey) != ed25519.PublicKeySize {
		return nil, ErrNotEd25519
	}
	if nodeName == "" {
		return nil, errors.New("pki: node name is required")
	}
	caCert, err := DecodeCert(caCertPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	caKey, err := DecodePrivateKey(caKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	if !caCert.PublicKey.(ed25519.PublicKey).Equal(caKey.Public()) {
		return nil, errors.New("pki: CA key does not match CA certificate")
	}
	sn, err := serial()
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: nodeName, Organization: []string{"strata"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{nodeName},
		URIs:         claims.uris(),
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" && h != nodeName {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, nodeKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("pki: create node certificate: %w", err)
	}
	return EncodeCert(der), nil
}

// CheckNodeCert checks that certPEM is a node certificate the CA issued to
// nodeKey under nodeName, good now: what a node that asked for its
// certificate checks before it uses the answer.
func CheckNodeCert(caCertPEM, certPEM []byte, nodeKey ed25519.PublicKey, nodeName string) error {
	ca, err := DecodeCert(caCertPEM)
	if err != nil {
		return fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := DecodeCert(certPEM)
	if err != nil {
		return fmt.Errorf("pki: node certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("pki: node certificate not issued by this mesh's CA: %w", err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !pub.Equal(nodeKey) {
		return errors.New("pki: node certificate is for another key")
	}
	if cert.Subject.CommonName != nodeName {
		return fmt.Errorf("pki: node certificate is for %q, not %q", cert.Subject.CommonName, nodeName)
	}
	return nil
}

// NewSigningKey makes an ed25519 key for signing artifact manifests.
func NewSigningKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate signing key: %w", err)
	}
	return priv, nil
}

// Fingerprint returns the lower-case hex SHA-256 of a certificate's DER
// bytes, the form operators compare by eye.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// EncodeCert returns the PEM encoding of a DER certificate.
func EncodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: PEMCertificate, Bytes: der})
}

// DecodeCert parses the first CERTIFICATE block of PEM input.
func DecodeCert(pemBytes []byte) (*x509.Certificate, error) {
	der, err := decode(pemBytes, PEMCertificate)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse certificate: %w", err)
	}
	return c, nil
}

// EncodePrivateKey returns the PKCS#8 PEM encoding of an ed25519 private key.
func EncodePrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: PEMPrivateKey, Bytes: der}), nil
}

// DecodePrivateKey parses a PKCS#8 PEM ed25519 private key.
func DecodePrivateKey(pemBytes []byte) (ed25519.PrivateKey, error) {
	der, err := decode(pemBytes, PEMPrivateKey)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse private key: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, ErrNotEd25519
	}
	return ek, nil
}

// EncodePublicKey returns the PKIX PEM encoding of an ed25519 public key,
// the form in which agents list the mesh's trusted signing keys.
func EncodePublicKey(key ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: PEMPublicKey, Bytes: der}), nil
}

// DecodePublicKey parses a PKIX PEM ed25519 public key.
func DecodePublicKey(pemBytes []byte) (ed25519.PublicKey, error) {
	der, err := decode(pemBytes, PEMPublicKey)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse public key: %w", err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, ErrNotEd25519
	}
	return ek, nil
}

// DecodePublicKeys parses every PUBLIC KEY block of PEM input, so one file
// can list all of a mesh's trusted signing keys.
func DecodePublicKeys(pemBytes []byte) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	rest := pemBytes
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != PEMPublicKey {
			continue
		}
		k, err := DecodePublicKey(pem.EncodeToMemory(b))
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, ErrNoPEM
	}
	return out, nil
}

func decode(pemBytes []byte, typ string) ([]byte, error) {
	rest := pemBytes
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("%w (want %s)", ErrNoPEM, typ)
		}
		if b.Type == typ {
			return b.Bytes, nil
		}
	}
}

// ServerTLSConfig returns the TLS configuration a node's data-plane server
// uses: TLS 1.3 only, the node's certificate and identity key, and a client
// certificate required and verified against the mesh CA.
func ServerTLSConfig(caCertPEM, certPEM []byte, nodeKey ed25519.PrivateKey) (*tls.Config, error) {
	cert, pool, err := load(caCertPEM, certPEM, nodeKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{ALPN},
	}, nil
}

// ClientTLSConfig returns the TLS configuration a node uses to dial another
// node: TLS 1.3 only, the node's certificate presented as its client
// certificate, and the server's certificate verified against the mesh CA.
// The server's host name is not checked (nodes dial addresses learnt from
// gossip); the chain to the CA is, in VerifyConnection.
func ClientTLSConfig(caCertPEM, certPEM []byte, nodeKey ed25519.PrivateKey) (*tls.Config, error) {
	cert, pool, err := load(caCertPEM, certPEM, nodeKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The standard verification also checks the host name, which mesh
		// nodes do not have in a useful form; VerifyConnection below does
		// the chain verification against the mesh CA instead, and a
		// handshake with an unverified server fails there.
		InsecureSkipVerify: true, //nolint:gosec // chain verified in VerifyConnection
		VerifyConnection:   verifyAgainst(pool, x509.ExtKeyUsageServerAuth),
		NextProtos:         []string{ALPN},
	}, nil
}

// PeerName returns the node name (certificate common name) of the peer of
// a verified connection, or "" when the peer sent no certificate.
func PeerName(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	return cs.PeerCertificates[0].Subject.CommonName
}

// PeerKey returns the ed25519 key of the peer of a verified connection (the
// peer's identity key), or nil.
func PeerKey(cs tls.ConnectionState) ed25519.PublicKey {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	k, _ := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
	return k
}

func verifyAgainst(pool *x509.CertPool, usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return ErrUntrustedPeer
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots:         pool,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{usage},
		})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUntrustedPeer, err)
		}
		return nil
	}
}

func load(caCertPEM, certPEM []byte, nodeKey ed25519.PrivateKey) (tls.Certificate, *x509.CertPool, error) {
	if len(nodeKey) != ed25519.PrivateKeySize {
		return tls.Certificate{}, nil, ErrNotEd25519
	}
	ca, err := DecodeCert(caCertPEM)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	leaf, err := DecodeCert(certPEM)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("pki: node certificate: %w", err)
	}
	if !nodeKey.Public().(ed25519.PublicKey).Equal(leaf.PublicKey) {
		return tls.Certificate{}, nil, errors.New("pki: node key does not match node certificate")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tls.Certificate{
		Certificate: [][]byte{leaf.Raw},
		PrivateKey:  crypto.Signer(nodeKey),
		Leaf:        leaf,
	}, pool, nil
}

// Claims are what a node certificate says of its node beyond its name: the
// node ID (mesh.IDOf of the certificate's key), its site and tier, and
// whether it may own policies (write policies, placements and rollouts).
// Readers of signed gossip authorize each record by its writer's claims.
type Claims struct {
	ID         string
	Site       string
	Tier       string
	Controller bool
}

// claimScheme is the URI scheme of the SAN entries that carry Claims:
// strata:node/ID, strata:site/SITE, strata:tier/TIER, strata:role/controller.
const claimScheme = "strata"

func (c Claims) uris() []*url.URL {
	var out []*url.URL
	add := func(kind, v string) {
		if v != "" {
			out = append(out, &url.URL{Scheme: claimScheme, Opaque: kind + "/" + url.PathEscape(v)})
		}
	}
	add("node", c.ID)
	add("site", c.Site)
	add("tier", c.Tier)
	if c.Controller {
		add("role", "controller")
	}
	return out
}

// ClaimsOf reads the claims of a node certificate; a certificate issued
// before claims existed has none (all fields zero).
func ClaimsOf(cert *x509.Certificate) Claims {
	var c Claims
	for _, u := range cert.URIs {
		if u.Scheme != claimScheme {
			continue
		}
		kind, v, ok := strings.Cut(u.Opaque, "/")
		if !ok {
			continue
		}
		if uv, err := url.PathUnescape(v); err == nil {
			v = uv
		}
		switch kind {
		case "node":
			c.ID = v
		case "site":
			c.Site = v
		case "tier":
			c.Tier = v
		case "role":
			c.Controller = c.Controller || v == "controller"
		}
	}
	return c
}

// IssueNodeCertClaims is IssueNodeCertFor with the node's claims written
// into the certificate (see Claims).
func IssueNodeCertClaims(caCertPEM, caKeyPEM []byte, nodeKey ed25519.PublicKey, nodeName string, hosts []string, claims Claims) ([]byte, error) {
	return issue(caCertPEM, caKeyPEM, nodeKey, nodeName, hosts, claims, NodeCertValidity)
}
