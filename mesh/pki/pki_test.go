package pki

import (
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type testNode struct {
	key  ed25519.PrivateKey
	cert []byte
}

func newNode(tb testing.TB, caCert, caKey []byte, name string) testNode {
	tb.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := IssueNodeCert(caCert, caKey, key, name, []string{"127.0.0.1", "node.example"})
	if err != nil {
		tb.Fatal(err)
	}
	return testNode{key: key, cert: cert}
}

func newCA(tb testing.TB) (cert, key []byte) {
	tb.Helper()
	cert, key, err := NewCA("test CA")
	if err != nil {
		tb.Fatal(err)
	}
	return cert, key
}

// handshake runs a TLS handshake over an in-memory pipe and returns the
// names each side saw and the errors of both sides.
func handshake(tb testing.TB, srv, cli *tls.Config) (srvSaw, cliSaw string, srvErr, cliErr error) {
	tb.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := tls.Server(a, srv)
	c := tls.Client(b, cli)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srvErr = s.Handshake()
		if srvErr != nil {
			a.Close()
		} else {
			srvSaw = PeerName(s.ConnectionState())
			_, srvErr = s.Write([]byte{1})
		}
	}()
	cliErr = c.Handshake()
	if cliErr == nil {
		cliSaw = PeerName(c.ConnectionState())
		// In TLS 1.3 the client finishes before the server has checked
		// the client's certificate; the first read surfaces a refusal.
		_, cliErr = c.Read(make([]byte, 1))
	}
	b.Close()
	<-done
	return srvSaw, cliSaw, srvErr, cliErr
}

func TestMutualTLS(t *testing.T) {
	caCert, caKey := newCA(t)
	otherCert, otherKey := newCA(t)
	server := newNode(t, caCert, caKey, "server")
	client := newNode(t, caCert, caKey, "client")
	rogue := newNode(t, otherCert, otherKey, "rogue")

	tests := []struct {
		name         string
		srv, cli     testNode
		srvCA, cliCA []byte
		wantOK       bool
	}{
		{name: "same CA", srv: server, cli: client, srvCA: caCert, cliCA: caCert, wantOK: true},
		{name: "client from another CA", srv: server, cli: rogue, srvCA: caCert, cliCA: otherCert},
		{name: "server from another CA", srv: rogue, cli: client, srvCA: otherCert, cliCA: caCert},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := ServerTLSConfig(tt.srvCA, tt.srv.cert, tt.srv.key)
			if err != nil {
				t.Fatal(err)
			}
			cc, err := ClientTLSConfig(tt.cliCA, tt.cli.cert, tt.cli.key)
			if err != nil {
				t.Fatal(err)
			}
			srvSaw, cliSaw, srvErr, cliErr := handshake(t, sc, cc)
			if tt.wantOK {
				if srvErr != nil || cliErr != nil {
					t.Fatalf("handshake failed: server %v, client %v", srvErr, cliErr)
				}
				if diff := cmp.Diff([]string{"client", "server"}, []string{srvSaw, cliSaw}); diff != "" {
					t.Errorf("peer names (-want +got):\n%s", diff)
				}
				return
			}
			if srvErr == nil && cliErr == nil {
				t.Fatal("handshake with a peer from another CA succeeded")
			}
		})
	}
}

func TestServerRefusesClientFromOtherCA(t *testing.T) {
	caCert, caKey := newCA(t)
	otherCert, otherKey := newCA(t)
	server := newNode(t, caCert, caKey, "server")
	rogue := newNode(t, otherCert, otherKey, "rogue")
	sc, _ := ServerTLSConfig(caCert, server.cert, server.key)
	// The rogue trusts the real CA, so only the server's check can stop it.
	cc, _ := ClientTLSConfig(caCert, rogue.cert, rogue.key)
	_, _, srvErr, _ := handshake(t, sc, cc)
	if srvErr == nil {
		t.Fatal("server accepted a client certificate from another CA")
	}
}

func TestClientRefusesServerFromOtherCA(t *testing.T) {
	caCert, caKey := newCA(t)
	otherCert, otherKey := newCA(t)
	client := newNode(t, caCert, caKey, "client")
	rogue := newNode(t, otherCert, otherKey, "rogue")
	// The rogue server trusts the real CA, so only the client can stop it.
	sc, _ := ServerTLSConfig(caCert, rogue.cert, rogue.key)
	cc, _ := ClientTLSConfig(caCert, client.cert, client.key)
	_, _, _, cliErr := handshake(t, sc, cc)
	if !errors.Is(cliErr, ErrUntrustedPeer) {
		t.Fatalf("client error = %v, want %v", cliErr, ErrUntrustedPeer)
	}
}

func TestPEMRoundTrip(t *testing.T) {
	key, err := NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	privPEM, err := EncodePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(key) {
		t.Error("private key changed in a PEM round trip")
	}
	pub := key.Public().(ed25519.PublicKey)
	pubPEM, err := EncodePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	key2, _ := NewSigningKey()
	pub2PEM, _ := EncodePublicKey(key2.Public().(ed25519.PublicKey))
	keys, err := DecodePublicKeys(append(pubPEM, pub2PEM...))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !keys[0].Equal(pub) || !keys[1].Equal(key2.Public()) {
		t.Errorf("DecodePublicKeys = %d keys, want the 2 encoded", len(keys))
	}
	if _, err := DecodeCert(pubPEM); !errors.Is(err, ErrNoPEM) {
		t.Errorf("DecodeCert(public key) error = %v, want %v", err, ErrNoPEM)
	}
}

func TestIssueNodeCert(t *testing.T) {
	caCert, caKey := newCA(t)
	n := newNode(t, caCert, caKey, "edge-1")
	c, err := DecodeCert(n.cert)
	if err != nil {
		t.Fatal(err)
	}
	if !n.key.Public().(ed25519.PublicKey).Equal(c.PublicKey) {
		t.Error("node certificate does not carry the node's identity key")
	}
	got := struct {
		CN  string
		DNS []string
		IPs []string
	}{CN: c.Subject.CommonName, DNS: c.DNSNames}
	for _, ip := range c.IPAddresses {
		got.IPs = append(got.IPs, ip.String())
	}
	want := struct {
		CN  string
		DNS []string
		IPs []string
	}{CN: "edge-1", DNS: []string{"edge-1", "node.example"}, IPs: []string{"127.0.0.1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("certificate names (-want +got):\n%s", diff)
	}
	_, otherKey := newCA(t)
	if _, err := IssueNodeCert(caCert, otherKey, n.key, "x", nil); err == nil {
		t.Error("IssueNodeCert with a key that does not match the CA certificate succeeded")
	}
}
