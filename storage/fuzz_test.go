package storage

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"
)

// FuzzManifest: any bytes decoded as a manifest validate and verify, or
// fail, without a panic; a manifest never verifies under a key that did not
// sign it.
func FuzzManifest(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	m := Manifest{Kind: KindModel, Name: "m", Version: "1", Digest: "ab", Size: 3, ChunkSize: 4}
	Sign(&m, priv)
	good, _ := json.Marshal(m)
	f.Add(good)
	for _, seed := range []string{`{}`, `{"kind":"model","name":"../x","version":"1"}`, `{"chunks":["zz"],"chunk_size":0,"size":10}`, `{"size":-5,"chunk_size":-1}`, `[`} {
		f.Add([]byte(seed))
	}
	ring := NewKeyring(pub)
	other := NewKeyring(ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if json.Unmarshal(b, &m) != nil {
			return
		}
		_ = m.Validate()
		_ = ring.Verify(m)
		if other.Verify(m) == nil {
			t.Fatal("a manifest verified under a key that signed nothing")
		}
		for i := range min(len(m.Chunks), 4) {
			_ = m.ChunkLen(i)
		}
		_ = m.Canonical()
	})
}
