package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer/onnx"
)

func TestPushPullModels(t *testing.T) {
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	agents := devMesh(t, 3, func(c *Config) { c.PKI = keys })
	// A real ONNX model (a push is refused otherwise) of a few MiB: many
	// chunks to move.
	blob, _, err := onnx.RandomMLP(1, 1024, 768, 1)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(blob)
	want := hex.EncodeToString(sum[:])

	code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=fraud&version=3", blob)
	var m storage.Manifest
	if code != http.StatusCreated || json.Unmarshal(body, &m) != nil {
		t.Fatalf("push = %d %s", code, body)
	}
	if m.Digest != want || m.Size != int64(len(blob)) || m.Signer == "" {
		t.Errorf("manifest %+v; want digest %s", m, want)
	}
	// Bytes that are not an ONNX model are refused, saying why.
	if code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=pem&version=1", []byte("-----BEGIN CERTIFICATE-----\nMIIB\n")); code != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte("not an ONNX model")) {
		t.Errorf("push of a PEM file = %d %s, want 422 saying it is not an ONNX model", code, body)
	}
	// The pushed model's operator sets are in its signed manifest.
	if m.Metadata[MetaOpsets] == "" || m.Metadata["strata.outputs"] == "" {
		t.Errorf("manifest metadata %v; want the operator sets and outputs", m.Metadata)
	}
	// The same version with other bytes is refused: versions are immutable.
	other, _, _ := onnx.RandomMLP(2, 3, 1)
	if code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=fraud&version=3", other); code != http.StatusConflict {
		t.Errorf("re-push with other bytes = %d %s, want 409", code, body)
	}

	// Another agent sees the manifest (catalog) and pulls the bytes.
	meshtest.WaitFor(t, 15*time.Second, "the manifest at the far agent", func() bool {
		_, err := agents[2].art.Lookup(storage.KindModel, "fraud", "3")
		return err == nil
	})
	code, body = post(t, agents[2].Handler(), http.MethodPost, "/v1/artifacts/pull?name=fraud", nil)
	if code != http.StatusOK {
		t.Fatalf("pull = %d %s", code, body)
	}
	got, err := agents[2].art.Bytes(m)
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("pulled bytes differ (err %v)", err)
	}

	meshtest.WaitFor(t, 15*time.Second, "both holders listed everywhere", func() bool {
		_, body := get(t, agents[1].Handler(), "/v1/models/fraud")
		var mi ModelInfo
		if json.Unmarshal(body, &mi) != nil || len(mi.Versions) != 1 {
			return false
		}
		h := mi.Versions[0].Holders
		return len(h) == 2 && h[0] == agents[0].Name() && h[1] == agents[2].Name()
	})
	if code, _ := get(t, agents[1].Handler(), "/v1/models/nope"); code != http.StatusNotFound {
		t.Errorf("unknown model = %d, want 404", code)
	}
	if code, _ := post(t, agents[1].Handler(), http.MethodPost, "/v1/artifacts/pull?name=nope", nil); code != http.StatusNotFound {
		t.Errorf("pull unknown = %d, want 404", code)
	}
	code, body = get(t, agents[2].Handler(), "/v1/transfers")
	if code != http.StatusOK || !bytes.Contains(body, []byte(m.Digest)) {
		t.Errorf("transfers = %d %s", code, body)
	}

	// Integrity at rest: a byte flipped in agents[2]'s copy on disk is
	// caught before anything reads it, the copy is quarantined and no
	// longer advertised, and a pull fetches good bytes again.
	tamper := func() {
		t.Helper()
		path := agents[2].art.Store().BlobPath(m.Digest)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tamper()
	if _, err := agents[2].art.Bytes(m); !errors.Is(err, storage.ErrDigestMismatch) {
		t.Fatalf("reading a tampered blob: err = %v, want ErrDigestMismatch", err)
	}
	if agents[2].art.Has(m.Digest) {
		t.Error("the tampered blob is still held")
	}
	meshtest.WaitFor(t, 15*time.Second, "the tampered copy no longer advertised", func() bool {
		list, _ := agents[1].art.List(storage.KindModel)
		return len(list) == 1 && slices.Equal(list[0].Holders, []string{agents[0].Name()})
	})
	if code, body := post(t, agents[2].Handler(), http.MethodPost, "/v1/artifacts/pull?name=fraud", nil); code != http.StatusOK {
		t.Fatalf("pull after quarantine = %d %s", code, body)
	}
	if got, err := agents[2].art.Bytes(m); err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("bytes after the new pull differ (err %v)", err)
	}
	// The start-up scrub finds one changed while the agent was down.
	tamper()
	if checked, bad, err := agents[2].art.Scrub(context.Background()); err != nil || checked != 1 || bad != 1 {
		t.Errorf("scrub: checked %d, corrupt %d, err %v; want 1, 1", checked, bad, err)
	}
	_, metrics := get(t, agents[2].Handler(), "/metrics")
	if !bytes.Contains(metrics, []byte("strata_artifacts_corrupt_total 2")) {
		t.Errorf("/metrics lacks strata_artifacts_corrupt_total 2:\n%s", grepLines(metrics, "strata_artifacts_"))
	}
}

// TestPullersHelpEachOther starts a pull from an origin behind a slow
// link, then a second pull of the same model: the second agent learns from
// the mesh that the first is pulling and fetches chunks from it, so the
// origin does not send every chunk twice.
func TestPullersHelpEachOther(t *testing.T) {
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	agents := devMesh(t, 3, func(c *Config) {
		c.PKI = keys
		if started == 0 { // agents[0], the origin
			c.EgressLimit = 4 << 20 // 4 MiB/s: 16 chunks a second
		}
		started++
	})
	origin, first, second := agents[0], agents[1], agents[2]
	blob := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{3, 4}).Read(blob)
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(path, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	// Small chunks, so that the origin is still sending the first copy
	// (and refers the second puller to the first) when the second starts.
	m, err := origin.art.Publish(context.Background(), path, storage.PublishSpec{Kind: storage.KindModel, Name: "big", Version: "1", ChunkSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 15*time.Second, "the origin's locality at both pullers", func() bool {
		return len(first.art.Holders(m)) == 1 && len(second.art.Holders(m)) == 1
	})

	type result struct {
		res dataplane.PullResult
		err error
	}
	pull := func(a *Agent) <-chan result {
		c := make(chan result, 1)
		go func() {
			res, err := a.art.Pull(context.Background(), m, nil)
			c <- result{res, err}
		}()
		return c
	}
	firstDone := pull(first)
	// The second pull starts once the mesh says the first is pulling and
	// the first holds a verified chunk to share.
	meshtest.WaitFor(t, 30*time.Second, "the first puller advertised, with a chunk", func() bool {
		n, err := second.mesh.Node(first.Name())
		if err != nil || !slices.Contains(n.Locality.Pulling, m.Digest) {
			return false
		}
		p := first.art.Store().Partial(m.Digest)
		if p == nil {
			return false
		}
		done, _, _ := p.Progress()
		return done > 0
	})
	if hs := second.art.Holders(m); len(hs) != 2 {
		t.Fatalf("the second puller sees holders %+v; want the origin and the first puller", hs)
	}
	r2 := <-pull(second)
	r1 := <-firstDone
	if r1.err != nil || r2.err != nil {
		t.Fatalf("pulls: %v, %v", r1.err, r2.err)
	}
	secondRes := r2.res
	got, err := second.art.Bytes(m)
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("the second puller's bytes differ (err %v)", err)
	}
	fromPeer := int64(0)
	for _, src := range secondRes.Status.Sources {
		if src.ID == first.Name() {
			fromPeer = src.Bytes
		}
	}
	if fromPeer == 0 {
		t.Errorf("the second pull took nothing from the first puller: %+v", secondRes.Status.Sources)
	}
	// The chunks the first puller served show in its metrics.
	_, metrics := get(t, first.Handler(), "/metrics")
	if !bytes.Contains(metrics, []byte("strata_dataplane_chunks_served_total")) || bytes.Contains(metrics, []byte("strata_dataplane_chunks_served_total 0\n")) {
		t.Errorf("/metrics of the first puller lacks its served chunks:\n%s", grepLines(metrics, "strata_dataplane_"))
	}
	// Once done, neither advertises a pull, and both hold the blob.
	meshtest.WaitFor(t, 15*time.Second, "the pullers listed as holders", func() bool {
		list, _ := origin.art.List(storage.KindModel)
		for _, ai := range list {
			if ai.Digest == m.Digest {
				return len(ai.Holders) == 3 && len(ai.Pulling) == 0
			}
		}
		return false
	})
}

// TestVersionImmutableAcrossAgents pushes fraud@1 through one agent and
// then other bytes under the same version through another: 409 with the
// reason, from any agent, and the mesh keeps the first bytes. The same
// bytes again are the manifest already published (201). A manifest with
// other bytes written into the catalog later, signed later (as a forged
// or racing write would arrive by gossip), switches nothing any agent
// serves.
func TestVersionImmutableAcrossAgents(t *testing.T) {
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	agents := devMesh(t, 3, func(c *Config) { c.PKI = keys })
	a, c := agents[0], agents[2]
	blob, _, err := onnx.RandomMLP(1, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := onnx.RandomMLP(2, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, a.Handler(), http.MethodPost, "/v1/artifacts?name=irisr&version=1", blob)
	var first storage.Manifest
	if code != http.StatusCreated || json.Unmarshal(body, &first) != nil {
		t.Fatalf("push at %s = %d %s", a.Name(), code, body)
	}
	meshtest.WaitFor(t, 15*time.Second, "the manifest at "+c.Name(), func() bool {
		_, err := c.art.Lookup(storage.KindModel, "irisr", "1")
		return err == nil
	})

	code, body = post(t, c.Handler(), http.MethodPost, "/v1/artifacts?name=irisr&version=1", other)
	var refusal struct{ Error, Field string }
	if code != http.StatusConflict || json.Unmarshal(body, &refusal) != nil || refusal.Field != "version" ||
		!strings.Contains(refusal.Error, "model/irisr@1 is already published with other bytes (sha256:"+first.Digest[:12]) {
		t.Fatalf("push of other bytes at %s = %d %s; want 409 naming the digest published", c.Name(), code, body)
	}
	code, body = post(t, c.Handler(), http.MethodPost, "/v1/artifacts?name=irisr&version=1", blob)
	var again storage.Manifest
	if code != http.StatusCreated || json.Unmarshal(body, &again) != nil || again.Digest != first.Digest || !again.Created.Equal(first.Created) || !bytes.Equal(again.Signature, first.Signature) {
		t.Fatalf("push of the same bytes at %s = %d %s; want 201 and the first manifest", c.Name(), code, body)
	}

	// Every agent has noted the first, reading it or not (the service
	// watches the catalog).
	meshtest.WaitFor(t, 15*time.Second, "the first manifest noted by every agent", func() bool {
		for _, ag := range agents {
			if m, ok := ag.art.Seen(storage.KindModel, "irisr", "1"); !ok || m.Digest != first.Digest {
				return false
			}
		}
		return true
	})
	// A later-signed manifest of other bytes (a signed one: the signing
	// key is the mesh's) is refused where it is written: every agent
	// would refuse it (catalog.Authorizer), and the writer's mesh says so
	// first.
	sk, err := pki.DecodePrivateKey(keys.SigningKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(other)
	forged := first.Clone()
	forged.Digest, forged.Size, forged.Chunks, forged.Created = hex.EncodeToString(sum[:]), int64(len(other)), []string{hex.EncodeToString(sum[:])}, first.Created.Add(time.Minute)
	storage.Sign(&forged, sk)
	if _, err := c.cat.Manifests.Put(forged); !errors.Is(err, mesh.ErrForbidden) || !errors.Is(err, catalog.ErrImmutable) {
		t.Fatalf("writing a later manifest of other bytes: %v, want it refused as immutable", err)
	}
	for _, ag := range agents {
		if m, err := ag.cat.Manifests.Value("model/irisr/1"); err != nil || m.Digest != first.Digest {
			t.Errorf("%s's catalog holds %.12s (%v), want the first signed %.12s", ag.Name(), m.Digest, err, first.Digest)
		}
	}
	for _, ag := range agents {
		if m, err := ag.art.Lookup(storage.KindModel, "irisr", "1"); err != nil || m.Digest != first.Digest {
			t.Errorf("%s resolves irisr@1 to %.12s (%v), want the first signed %.12s", ag.Name(), m.Digest, err, first.Digest)
		}
	}
}

func TestArtifactsNeedPKI(t *testing.T) {
	agents := devMesh(t, 1)
	code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=a&version=1", []byte("x"))
	if code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("strata keygen -pki")) {
		t.Errorf("push without a CA = %d %s", code, body)
	}
}

// grepLines returns the lines of b that contain s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
