package storage

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Kind says what an artifact is.
type Kind string

// The kinds of artifact.
const (
	KindModel   Kind = "model"
	KindDataset Kind = "dataset"
	// KindCode is a training job's code: a tar archive unpacked into
	// the job's working directory (see trainer.PackCode).
	KindCode Kind = "code"
)

// Manifest errors. A manifest that fails any of these is refused and its
// blob is never loaded.
var (
	// ErrUnsigned is returned for a manifest with no signer or signature.
	ErrUnsigned = errors.New("storage: manifest is not signed")
	// ErrUnknownSigner is returned for a manifest signed by a key that is not
	// among the mesh's trusted signing keys.
	ErrUnknownSigner = errors.New("storage: manifest signer is not trusted")
	// ErrBadSignature is returned when the signature does not verify over the
	// manifest's canonical encoding (the manifest was altered after signing).
	ErrBadSignature = errors.New("storage: manifest signature does not verify")
	// ErrInvalidManifest is returned for a manifest whose fields do not hang
	// together (chunk count and size, digest form, missing name).
	ErrInvalidManifest = errors.New("storage: invalid manifest")
)

// Manifest names one version of a model or dataset and says how to fetch
// and check its bytes. It is signed with an ed25519 key over Canonical().
type Manifest struct {
	// Kind is model or dataset.
	Kind Kind `json:"kind"`
	// Name is the artifact's name, such as "fraud-scorer".
	Name string `json:"name"`
	// Version is the version string, such as "v3" or "2026-11-22.1".
	Version string `json:"version"`
	// Digest is the lower-case hex SHA-256 of the whole blob (64 chars).
	Digest string `json:"digest"`
	// Size is the blob's length in bytes.
	Size int64 `json:"size"`
	// ChunkSize is the length in bytes of every chunk but the last.
	ChunkSize int64 `json:"chunk_size"`
	// Chunks holds the hex SHA-256 of each chunk, in order.
	Chunks []string `json:"chunks"`
	// Created is when the manifest was made (UTC, signed to the nanosecond).
	Created time.Time `json:"created"`
	// Metadata is free-form, as given by the publisher; for an ONNX model
	// the publisher records its inputs and outputs here.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Signer is the KeyID of the signing key.
	Signer string `json:"signer"`
	// Signature is the ed25519 signature over Canonical().
	Signature []byte `json:"signature"`
}

// Ref returns "kind/name@version", the form the CLI and logs print.
func (m Manifest) Ref() string { return string(m.Kind) + "/" + m.Name + "@" + m.Version }

// ChunkLen returns the length of chunk i.
func (m Manifest) ChunkLen(i int) int64 {
	off := int64(i) * m.ChunkSize
	if rest := m.Size - off; rest < m.ChunkSize {
		return rest
	}
	return m.ChunkSize
}

// Clone returns a deep copy.
func (m Manifest) Clone() Manifest {
	c := m
	c.Chunks = append([]string(nil), m.Chunks...)
	c.Signature = bytes.Clone(m.Signature)
	if m.Metadata != nil {
		c.Metadata = make(map[string]string, len(m.Metadata))
		for k, v := range m.Metadata {
			c.Metadata[k] = v
		}
	}
	return c
}

// Canonical returns the bytes that are signed: every field but Signature,
// length-prefixed in a fixed order, metadata sorted by key, Created as
// UnixNano. Two manifests with equal fields encode to equal bytes whatever
// the JSON or map order they travelled in.
func (m Manifest) Canonical() []byte {
	var b bytes.Buffer
	b.WriteString("strata-manifest-v1\x00")
	str := func(s string) {
		var n [binary.MaxVarintLen64]byte
		b.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		b.WriteString(s)
	}
	num := func(v int64) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(v))
		b.Write(n[:])
	}
	str(string(m.Kind))
	str(m.Name)
	str(m.Version)
	str(m.Digest)
	num(m.Size)
	num(m.ChunkSize)
	num(int64(len(m.Chunks)))
	for _, c := range m.Chunks {
		str(c)
	}
	num(m.Created.UnixNano())
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	num(int64(len(keys)))
	for _, k := range keys {
		str(k)
		str(m.Metadata[k])
	}
	str(m.Signer)
	return b.Bytes()
}

// Validate checks that the manifest's fields hang together; it does not
// check the signature.
func (m Manifest) Validate() error {
	var errs []error
	if m.Kind != KindModel && m.Kind != KindDataset && m.Kind != KindCode {
		errs = append(errs, fmt.Errorf("kind %q: want model, dataset or code", m.Kind))
	}
	if !validName(m.Name) {
		errs = append(errs, fmt.Errorf("name %q: want 1-128 characters of [A-Za-z0-9._-]", m.Name))
	}
	if !validName(m.Version) {
		errs = append(errs, fmt.Errorf("version %q: want 1-128 characters of [A-Za-z0-9._-]", m.Version))
	}
	if !validDigest(m.Digest) {
		errs = append(errs, fmt.Errorf("digest %q: want 64 lower-case hex characters", m.Digest))
	}
	if m.Size < 0 || m.ChunkSize <= 0 {
		errs = append(errs, fmt.Errorf("size %d, chunk size %d: want size >= 0 and chunk size > 0", m.Size, m.ChunkSize))
	} else {
		want := int((m.Size + m.ChunkSize - 1) / m.ChunkSize)
		if len(m.Chunks) != want {
			errs = append(errs, fmt.Errorf("%d chunk digests for size %d and chunk size %d: want %d", len(m.Chunks), m.Size, m.ChunkSize, want))
		}
	}
	for i, c := range m.Chunks {
		if !validDigest(c) {
			errs = append(errs, fmt.Errorf("chunk %d digest %q: want 64 lower-case hex characters", i, c))
			break
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidManifest, errors.Join(errs...))
	}
	return nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// KeyID names a signing key: the first 16 hex characters of the SHA-256 of
// the public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Sign sets m.Signer to the key's ID and m.Signature to an ed25519
// signature over m.Canonical().
func Sign(m *Manifest, key ed25519.PrivateKey) {
	m.Signer = KeyID(key.Public().(ed25519.PublicKey))
	m.Signature = ed25519.Sign(key, m.Canonical())
}

// Keyring holds the mesh's trusted manifest signing keys, by KeyID. The zero
// value trusts nobody. It is read-only after NewKeyring and safe for
// concurrent use.
type Keyring struct {
	keys map[string]ed25519.PublicKey
}

// NewKeyring returns a keyring trusting the given public keys.
func NewKeyring(keys ...ed25519.PublicKey) Keyring {
	k := Keyring{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for _, pub := range keys {
		k.keys[KeyID(pub)] = pub
	}
	return k
}

// IDs returns the trusted key IDs, sorted.
func (k Keyring) IDs() []string {
	ids := make([]string, 0, len(k.keys))
	for id := range k.keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Verify checks m's structure and its signature against the trusted keys.
// It returns ErrInvalidManifest, ErrUnsigned, ErrUnknownSigner or
// ErrBadSignature (wrapped, with the manifest's reference).
func (k Keyring) Verify(m Manifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%s: %w", m.Ref(), err)
	}
	if m.Signer == "" || len(m.Signature) == 0 {
		return fmt.Errorf("%s: %w", m.Ref(), ErrUnsigned)
	}
	pub, ok := k.keys[m.Signer]
	if !ok {
		return fmt.Errorf("%s: %w: key %s (trusted: %v)", m.Ref(), ErrUnknownSigner, m.Signer, k.IDs())
	}
	if !ed25519.Verify(pub, m.Canonical(), m.Signature) {
		return fmt.Errorf("%s: %w", m.Ref(), ErrBadSignature)
	}
	return nil
}

// SignedBefore reports whether m precedes o for the same
// kind/name@version: signed earlier (Created, which the signature covers),
// or, signed at the same instant, with the lower digest. Of manifests with
// other bytes for one version, the first signed is the version: every
// reader, and the mesh when it merges copies of the catalog, keeps it.
func (m Manifest) SignedBefore(o Manifest) bool {
	if !m.Created.Equal(o.Created) {
		return m.Created.Before(o.Created)
	}
	return m.Digest < o.Digest
}
