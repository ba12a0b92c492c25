package mesh

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"

	"github.com/strata-mesh/strata/storage"
)

// Gossip key rotation, without a restart and without losing a packet, in
// three steps each run on every agent before the next (as Consul's
// keyring): install the new key (every agent now decrypts both), use it
// (agents encrypt with it; those not switched yet still decrypt it), remove
// the old one. The keyring is kept in the store, so a restart comes back
// with the keys it had; once the store holds a keyring, the configured
// gossip key only starts a new data dir.

// keyKeyring is where the keyring is persisted.
const keyKeyring = "mesh/keyring"

// ErrNoKeyring is returned by keyring calls on a mesh whose gossip is not
// encrypted.
var ErrNoKeyring = errors.New("mesh: gossip is not encrypted: start every agent with a gossip key first")

// KeyringStatus lists the gossip keys an agent holds, by fingerprint.
type KeyringStatus struct {
	// Primary is the fingerprint of the key gossip is encrypted with.
	Primary string `json:"primary"`
	// Keys are the fingerprints of every key gossip is decrypted with,
	// the primary among them.
	Keys []string `json:"keys"`
}

// KeyFingerprint names a gossip key without revealing it: "sha256:" and
// the first 8 bytes of its SHA-256 in hex.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

type storedKeyring struct {
	Primary []byte   `json:"primary"`
	Keys    [][]byte `json:"keys"`
}

// loadKeyring builds the keyring from the store and the configured key;
// nil without a configured key.
func loadKeyring(db *storage.DB, configured []byte) (*memberlist.Keyring, error) {
	if len(configured) == 0 {
		return nil, nil
	}
	primary, keys := configured, [][]byte{configured}
	if db != nil {
		b, err := db.Get([]byte(keyKeyring))
		switch {
		case err == nil:
			var st storedKeyring
			if err := json.Unmarshal(b, &st); err != nil {
				return nil, fmt.Errorf("mesh: stored keyring: %w", err)
			}
			// The stored keyring wins over the configured key, which may
			// be the one a rotation removed (as Consul's keyring file).
			if len(st.Primary) > 0 {
				primary, keys = st.Primary, st.Keys
			}
		case !errors.Is(err, storage.ErrNotFound):
			return nil, fmt.Errorf("mesh: stored keyring: %w", err)
		}
	}
	kr, err := memberlist.NewKeyring(nil, primary)
	if err != nil {
		return nil, fmt.Errorf("mesh: keyring: %w", err)
	}
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return nil, fmt.Errorf("mesh: keyring: %w", err)
		}
	}
	return kr, nil
}

// Keyring lists the gossip keys this agent holds.
func (m *Mesh) Keyring() (KeyringStatus, error) {
	if m.keyring == nil {
		return KeyringStatus{}, ErrNoKeyring
	}
	st := KeyringStatus{Primary: KeyFingerprint(m.keyring.GetPrimaryKey())}
	for _, k := range m.keyring.GetKeys() {
		st.Keys = append(st.Keys, KeyFingerprint(k))
	}
	slices.Sort(st.Keys)
	return st, nil
}

// InstallKey adds key to the keys gossip is decrypted with.
func (m *Mesh) InstallKey(key []byte) error {
	return m.keyringOp(func(kr *memberlist.Keyring) error { return kr.AddKey(key) })
}

// UseKey makes an installed key the one gossip is encrypted with.
func (m *Mesh) UseKey(key []byte) error {
	return m.keyringOp(func(kr *memberlist.Keyring) error {
		if !slices.ContainsFunc(kr.GetKeys(), func(k []byte) bool { return bytes.Equal(k, key) }) {
			return fmt.Errorf("mesh: key %s is not installed: install it on every agent first", KeyFingerprint(key))
		}
		return kr.UseKey(key)
	})
}

// RemoveKey removes a key that is not the primary.
func (m *Mesh) RemoveKey(key []byte) error {
	return m.keyringOp(func(kr *memberlist.Keyring) error {
		if bytes.Equal(kr.GetPrimaryKey(), key) {
			return fmt.Errorf("mesh: key %s is the one in use: use another first", KeyFingerprint(key))
		}
		return kr.RemoveKey(key)
	})
}

func (m *Mesh) keyringOp(op func(*memberlist.Keyring) error) error {
	if m.keyring == nil {
		return ErrNoKeyring
	}
	m.keyringMu.Lock()
	defer m.keyringMu.Unlock()
	if err := op(m.keyring); err != nil {
		return err
	}
	if m.cfg.DB == nil {
		return nil
	}
	b, err := json.Marshal(storedKeyring{Primary: m.keyring.GetPrimaryKey(), Keys: m.keyring.GetKeys()})
	if err != nil {
		return err
	}
	return m.cfg.DB.Put([]byte(keyKeyring), b)
}
