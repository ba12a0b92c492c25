package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
)

func TestPushPullModels(t *testing.T) {
	keys, err := NewDevPKI()
	if err != nil {
		t.Fatal(err)
	}
	agents := devMesh(t, 3, func(c *Config) { c.PKI = keys })
	blob := make([]byte, 3<<20+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range blob {
		blob[i] = byte(r.Uint32())
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
	// The same version with other bytes is refused: versions are immutable.
	if code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=fraud&version=3", []byte("other")); code != http.StatusConflict {
		t.Errorf("re-push with other bytes = %d %s, want 409", code, body)
	}

	// Another agent sees the manifest (catalog) and pulls the bytes.
	meshtest.WaitFor(t, 15*time.Second, "the manifest at the far agent", func() bool {
		_, err := agents[2].lookupManifest(storage.KindModel, "fraud", "3")
		return err == nil
	})
	code, body = post(t, agents[2].Handler(), http.MethodPost, "/v1/artifacts/pull?name=fraud", nil)
	if code != http.StatusOK {
		t.Fatalf("pull = %d %s", code, body)
	}
	got, err := agents[2].modelBytes(m)
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
}

func TestArtifactsNeedPKI(t *testing.T) {
	agents := devMesh(t, 1)
	code, body := post(t, agents[0].Handler(), http.MethodPost, "/v1/artifacts?name=a&version=1", []byte("x"))
	if code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("strata keygen -pki")) {
		t.Errorf("push without a CA = %d %s", code, body)
	}
}
