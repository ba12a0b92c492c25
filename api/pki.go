package api

// CertRequest asks a CA holder for a node certificate (POST
// /v1/pki/certificates, scope cert): a new agent bootstrapping into the
// mesh without a copy of the CA key.
type CertRequest struct {
	// Name is the node name the certificate is for.
	Name string `json:"name"`
	// PublicKey is the node's ed25519 identity key, PEM encoded.
	PublicKey string `json:"public_key"`
	// Hosts are addresses or DNS names the node serves the data plane on.
	Hosts []string `json:"hosts,omitempty"`
	// Site, Tier and Controller are the claims the certificate makes of
	// the node: gossip from it is believed only within them.
	Site       string `json:"site,omitempty"`
	Tier       string `json:"tier,omitempty"`
	Controller bool   `json:"controller,omitempty"`
}

// CertResponse is the certificate issued: PEM, signed by the mesh CA.
type CertResponse struct {
	Certificate string `json:"certificate"`
	// IssuedBy is the name of the agent that issued it.
	IssuedBy string `json:"issued_by"`
}

// Keyring lists an agent's gossip keys by fingerprint (GET /v1/keyring).
type Keyring struct {
	// Primary is the key gossip is encrypted with; Keys every key it is
	// decrypted with.
	Primary string   `json:"primary"`
	Keys    []string `json:"keys"`
}

// KeyringRequest changes an agent's gossip keyring (POST /v1/keyring, scope
// write): op install, use or remove, key the base64 key.
type KeyringRequest struct {
	Op  string `json:"op"`
	Key string `json:"key"`
}
