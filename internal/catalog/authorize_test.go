package catalog_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/storage"
)

// held is a catalog as Authorize reads it.
type held map[string]mesh.Entry

func (h held) Lookup(key string) (mesh.Entry, bool) {
	e, ok := h[key]
	return e, ok
}

func value(tb testing.TB, v any) json.RawMessage {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ctrl := mesh.Writer{ID: "c1", Name: "gpu-1", Site: "rack", Tier: mesh.TierOnprem, Controller: true}
	edge := mesh.Writer{ID: "e1", Name: "edge-a-1", Site: "edge-a", Tier: mesh.TierEdge}
	other := mesh.Writer{ID: "e2", Name: "edge-a-2", Site: "edge-a", Tier: mesh.TierEdge}
	digest := func(c byte) string {
		b := make([]byte, 64)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	h := held{
		"placements/TrainingJob/train": {Key: "placements/TrainingJob/train", Value: value(t, catalog.Placement{Key: "TrainingJob/train", Epoch: 3,
			Nodes: []catalog.PlacedNode{{Name: "edge-a-1", ID: "e1"}}})},
		"artifacts/model/fraud/3": {Key: "artifacts/model/fraud/3", Value: value(t, storage.Manifest{Name: "fraud", Version: "3", Digest: digest('c'), Created: t0})},
		"jobs/train":              {Key: "jobs/train", Value: value(t, catalog.Job{Name: "train", Key: "TrainingJob/train"})},
	}
	job := value(t, catalog.Job{Name: "train", Key: "TrainingJob/train"})
	manifest := func(d byte, at time.Time) json.RawMessage {
		return value(t, storage.Manifest{Digest: digest(d), Created: at})
	}
	tests := []struct {
		name string
		w    mesh.Writer
		e    mesh.Entry
		want error
	}{
		{"controller writes a policy", ctrl, mesh.Entry{Key: "policies/TrainingJob/train"}, nil},
		{"edge writes a policy", edge, mesh.Entry{Key: "policies/TrainingJob/pwn"}, catalog.ErrNotController},
		{"edge deletes a policy", edge, mesh.Entry{Key: "policies/TrainingJob/train", Deleted: true}, catalog.ErrNotController},
		{"edge writes a placement", edge, mesh.Entry{Key: "placements/TrainingJob/train"}, catalog.ErrNotController},
		{"edge writes a rollout", edge, mesh.Entry{Key: "rollouts/InferenceService/x"}, catalog.ErrNotController},
		{"edge writes an experiment", edge, mesh.Entry{Key: "experiments/sweep"}, catalog.ErrNotController},
		{"the placed node records its job", edge, mesh.Entry{Key: "jobs/train", Value: job}, nil},
		{"another node records that job", other, mesh.Entry{Key: "jobs/train", Value: job}, catalog.ErrNotAssigned},
		{"the placed node records a run of its epoch", edge, mesh.Entry{Key: "jobs/train", Value: value(t, catalog.Job{Name: "train", Key: "TrainingJob/train", Epoch: 3})}, nil},
		{"the placed node records a run of a later epoch", edge, mesh.Entry{Key: "jobs/train", Value: value(t, catalog.Job{Name: "train", Key: "TrainingJob/train", Epoch: 1 << 62, State: catalog.JobSucceeded})}, catalog.ErrNotAssigned},
		{"a node records a job never placed", edge, mesh.Entry{Key: "jobs/ghost", Value: value(t, catalog.Job{Name: "ghost", Key: "TrainingJob/ghost"})}, catalog.ErrNotAssigned},
		{"the placed node deletes its job record", edge, mesh.Entry{Key: "jobs/train", Deleted: true}, nil},
		{"another node deletes it", other, mesh.Entry{Key: "jobs/train", Deleted: true}, catalog.ErrNotAssigned},
		{"a controller records a job", ctrl, mesh.Entry{Key: "jobs/ghost", Value: job}, nil},
		{"a node's own gang member record", edge, mesh.Entry{Key: "gang-members/train/edge-a-1"}, nil},
		{"another node's gang member record", other, mesh.Entry{Key: "gang-members/train/edge-a-1"}, catalog.ErrNotAssigned},
		{"a node's own drift record", edge, mesh.Entry{Key: "drift/InferenceService/fraud/edge-a-1"}, nil},
		{"another node's drift record", edge, mesh.Entry{Key: "drift/InferenceService/fraud/edge-a-2"}, catalog.ErrNotAssigned},
		{"a node's own drift log", edge, mesh.Entry{Key: "drift-log/InferenceService/fraud/edge-a-1", Value: value(t, catalog.DriftLog{Policy: "InferenceService/fraud", Node: "edge-a-1", Site: "edge-a"})}, nil},
		{"a node deletes its own drift log", edge, mesh.Entry{Key: "drift-log/InferenceService/fraud/edge-a-1", Deleted: true}, nil},
		{"another node's drift log", other, mesh.Entry{Key: "drift-log/InferenceService/fraud/edge-a-1", Value: value(t, catalog.DriftLog{Policy: "InferenceService/fraud", Node: "edge-a-1", Site: "edge-a"})}, catalog.ErrNotAssigned},
		{"a controller writes a node's drift log", ctrl, mesh.Entry{Key: "drift-log/InferenceService/fraud/edge-a-1", Value: value(t, catalog.DriftLog{Policy: "InferenceService/fraud", Node: "edge-a-1", Site: "edge-a"})}, catalog.ErrNotAssigned},
		{"a drift log under its key naming another node", edge, mesh.Entry{Key: "drift-log/InferenceService/fraud/edge-a-1", Value: value(t, catalog.DriftLog{Policy: "InferenceService/fraud", Node: "edge-a-2", Site: "edge-a"})}, catalog.ErrNotAssigned},
		{"a drift log naming another site", edge, mesh.Entry{Key: "drift-log/InferenceService/fraud/edge-a-1", Value: value(t, catalog.DriftLog{Policy: "InferenceService/fraud", Node: "edge-a-1", Site: "edge-b"})}, catalog.ErrNotAssigned},
		{"a new artifact version", edge, mesh.Entry{Key: "artifacts/model/fraud/4", Value: value(t, storage.Manifest{Digest: digest('b')})}, nil},
		{"the same artifact again", edge, mesh.Entry{Key: "artifacts/model/fraud/3", Value: manifest('c', t0)}, nil},
		{"other bytes for an artifact version, signed later", ctrl, mesh.Entry{Key: "artifacts/model/fraud/3", Value: manifest('d', t0.Add(time.Second))}, catalog.ErrImmutable},
		{"other bytes signed at the same time, higher digest", ctrl, mesh.Entry{Key: "artifacts/model/fraud/3", Value: manifest('d', t0)}, catalog.ErrImmutable},
		{"other bytes signed at the same time, lower digest", ctrl, mesh.Entry{Key: "artifacts/model/fraud/3", Value: manifest('b', t0)}, nil},
		{"other bytes signed earlier (a concurrent push)", ctrl, mesh.Entry{Key: "artifacts/model/fraud/3", Value: manifest('d', t0.Add(-time.Second))}, nil},
		{"edge deletes an artifact", edge, mesh.Entry{Key: "artifacts/model/fraud/3", Deleted: true}, catalog.ErrNotController},
		{"a site's federation record", edge, mesh.Entry{Key: "federation/wan", Scope: mesh.ScopeSite}, nil},
		{"a global federation record", edge, mesh.Entry{Key: "federation/wan", Scope: mesh.ScopeGlobal}, catalog.ErrNotController},
		{"edge writes an unknown table", edge, mesh.Entry{Key: "secrets/x"}, catalog.ErrNotController},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := catalog.Authorize(h, tt.w, tt.e)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Authorize = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestAuthorizeVerifiedManifest: with the trusted keys, a manifest that
// verifies replaces one that does not, whenever it was signed, and one
// that does not verify never replaces one.
func TestAuthorizeVerifiedManifest(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	good := func(m storage.Manifest) error {
		if m.Signer != "trusted" {
			return errors.New("untrusted")
		}
		return nil
	}
	a := catalog.Authorizer{VerifyManifest: good}
	w := mesh.Writer{ID: "e1", Name: "edge-a-1"}
	squat := held{"artifacts/model/m/1": {Key: "artifacts/model/m/1", Value: value(t, storage.Manifest{Digest: "aa", Created: t0.Add(-time.Hour)})}}
	legit := value(t, storage.Manifest{Digest: "bb", Created: t0, Signer: "trusted"})
	if err := a.Authorize(squat, w, mesh.Entry{Key: "artifacts/model/m/1", Value: legit}); err != nil {
		t.Errorf("a verified manifest over an unverifiable squatter: %v", err)
	}
	held := held{"artifacts/model/m/1": {Key: "artifacts/model/m/1", Value: legit}}
	forged := value(t, storage.Manifest{Digest: "cc", Created: t0.Add(-time.Hour)})
	if err := a.Authorize(held, w, mesh.Entry{Key: "artifacts/model/m/1", Value: forged}); !errors.Is(err, catalog.ErrImmutable) {
		t.Errorf("an unverifiable, earlier manifest over a verified one: %v", err)
	}
}

// TestPrefer orders two versions of a key the same way whichever arrives
// first: of two manifests of one version, a verified one over one that is
// not, else the one signed first; of placements and job records, the later
// epoch, and of one epoch's job records, the run's outcome.
func TestPrefer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	verify := func(m storage.Manifest) error {
		if m.Signer != "trusted" {
			return errors.New("untrusted")
		}
		return nil
	}
	e := func(d string, at time.Time, signer string) mesh.Entry {
		return mesh.Entry{Key: "artifacts/model/m/1", Value: value(t, storage.Manifest{Digest: d, Created: at, Signer: signer})}
	}
	a := catalog.Authorizer{VerifyManifest: verify}
	// Of two controllers, the one that owns TrainingJob/x while both live.
	first, second := "c1", "c2"
	if placement.Owner("TrainingJob/x", []string{first, second}) != first {
		first, second = second, first
	}
	tests := []struct {
		name string
		x, y mesh.Entry
		want int
	}{
		{"signed first wins", e("bb", t0, "trusted"), e("aa", t0.Add(time.Second), "trusted"), 1},
		{"same time: lower digest", e("aa", t0, "trusted"), e("bb", t0, "trusted"), 1},
		{"verified over earlier unverified", e("bb", t0, "trusted"), e("aa", t0.Add(-time.Hour), ""), 1},
		{"same digest: versions decide", e("aa", t0, "trusted"), e("aa", t0.Add(time.Hour), "trusted"), 0},
		{"another table: versions decide", mesh.Entry{Key: "policies/x"}, mesh.Entry{Key: "policies/x"}, 0},
		{"placement: later epoch", pl(t, 5), pl(t, 4), 1},
		{"placement: same epoch, one owner: versions decide", pl(t, 5), pl(t, 5), 0},
		{"placement: same epoch, the owner that ranks first", plBy(t, 5, first), plBy(t, 5, second), 1},
		{"placement: a later epoch over the first owner's", plBy(t, 6, second), plBy(t, 5, first), 1},
		{"job: later epoch's run", job(t, 6, catalog.JobPending), job(t, 5, catalog.JobSucceeded), 1},
		{"job: one epoch, its outcome over running", job(t, 5, catalog.JobFailed), job(t, 5, catalog.JobRunning), 1},
		{"job: one epoch, both running", job(t, 5, catalog.JobRunning), job(t, 5, catalog.JobPending), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := a.Prefer(tt.x, tt.y); got != tt.want {
				t.Errorf("Prefer(x, y) = %d, want %d", got, tt.want)
			}
			if got := a.Prefer(tt.y, tt.x); got != -tt.want {
				t.Errorf("Prefer(y, x) = %d, want %d", got, -tt.want)
			}
		})
	}
}

func pl(t *testing.T, epoch uint64) mesh.Entry { return plBy(t, epoch, "") }

func plBy(t *testing.T, epoch uint64, owner string) mesh.Entry {
	return mesh.Entry{Key: "placements/TrainingJob/x", Value: value(t, catalog.Placement{Key: "TrainingJob/x", Epoch: epoch, Owner: owner})}
}

func job(t *testing.T, epoch uint64, state string) mesh.Entry {
	return mesh.Entry{Key: "jobs/x", Value: value(t, catalog.Job{Name: "x", Epoch: epoch, State: state})}
}
