// Package pki holds the mesh's public-key plumbing: the mesh certificate
// authority made by `strata keygen`, node certificates issued from it for
// mutual TLS on the data plane, the artifact signing key, and PEM encoding
// of all of them.
//
// The CA key is ed25519: small, fast, deterministic signatures, and Go's TLS
// 1.3 stack verifies ed25519 certificate chains natively. A node's
// certificate carries the node's own ed25519 identity key, so the key that
// names a node (its node ID derives from it) is the key that proves it in a
// TLS handshake.
//
//	caCert, caKey, _ := pki.NewCA("prod mesh")
//	certPEM, _ := pki.IssueNodeCert(caCert, caKey, nodeKey, "node-a", []string{"10.0.0.5"})
//	srv, _ := pki.ServerTLSConfig(caCert, certPEM, nodeKey)
//	cli, _ := pki.ClientTLSConfig(caCert, certPEM, nodeKey)
//
// Both configurations require TLS 1.3 and a peer certificate that chains to
// the mesh CA; a peer whose certificate was issued by any other CA is refused
// during the handshake. Host names are not checked: membership of the mesh is
// what the CA vouches for, and PeerName reports which node answered.
package pki
