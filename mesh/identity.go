package mesh

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
)

// Identity is a node's ed25519 key pair. It is made once, at first start, and
// kept in the agent's data dir; the node ID derives from its public key, so a
// node keeps its ID across restarts.
type Identity struct {
	// Key is the private key. Its public half names the node.
	Key ed25519.PrivateKey
}

// NewIdentity makes a fresh random identity.
func NewIdentity() (Identity, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Identity{}, fmt.Errorf("mesh: generate identity: %w", err)
	}
	return Identity{Key: priv}, nil
}

// IdentityFromSeed rebuilds an identity from its 32-byte seed, the form in
// which it is stored.
func IdentityFromSeed(seed []byte) (Identity, error) {
	if len(seed) != ed25519.SeedSize {
		return Identity{}, errors.New("mesh: identity seed must be 32 bytes")
	}
	return Identity{Key: ed25519.NewKeyFromSeed(seed)}, nil
}

// Seed returns the 32-byte seed that IdentityFromSeed accepts.
func (i Identity) Seed() []byte { return i.Key.Seed() }

// Public returns the public key.
func (i Identity) Public() ed25519.PublicKey { return i.Key.Public().(ed25519.PublicKey) }

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// ID returns the node ID: 16 lower-case base32 characters of the SHA-256 of
// the public key (80 bits), stable for the life of the key.
func (i Identity) ID() string { return IDOf(i.Public()) }

// IDOf is the node ID of the identity whose public key is pub.
func IDOf(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return strings.ToLower(idEncoding.EncodeToString(sum[:10]))
}
