package catalog_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
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
		"placements/TrainingJob/train": {Key: "placements/TrainingJob/train", Value: value(t, catalog.Placement{Key: "TrainingJob/train",
			Nodes: []catalog.PlacedNode{{Name: "edge-a-1", ID: "e1"}}})},
		"artifacts/model/fraud/3": {Key: "artifacts/model/fraud/3", Value: value(t, storage.Manifest{Name: "fraud", Version: "3", Digest: digest('a')})},
		"jobs/train":              {Key: "jobs/train", Value: value(t, catalog.Job{Name: "train", Key: "TrainingJob/train"})},
	}
	job := value(t, catalog.Job{Name: "train", Key: "TrainingJob/train"})
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
		{"a node records a job never placed", edge, mesh.Entry{Key: "jobs/ghost", Value: value(t, catalog.Job{Name: "ghost", Key: "TrainingJob/ghost"})}, catalog.ErrNotAssigned},
		{"the placed node deletes its job record", edge, mesh.Entry{Key: "jobs/train", Deleted: true}, nil},
		{"another node deletes it", other, mesh.Entry{Key: "jobs/train", Deleted: true}, catalog.ErrNotAssigned},
		{"a controller records a job", ctrl, mesh.Entry{Key: "jobs/ghost", Value: job}, nil},
		{"a node's own gang member record", edge, mesh.Entry{Key: "gang-members/train/edge-a-1"}, nil},
		{"another node's gang member record", other, mesh.Entry{Key: "gang-members/train/edge-a-1"}, catalog.ErrNotAssigned},
		{"a node's own drift record", edge, mesh.Entry{Key: "drift/InferenceService/fraud/edge-a-1"}, nil},
		{"another node's drift record", edge, mesh.Entry{Key: "drift/InferenceService/fraud/edge-a-2"}, catalog.ErrNotAssigned},
		{"a new artifact version", edge, mesh.Entry{Key: "artifacts/model/fraud/4", Value: value(t, storage.Manifest{Digest: digest('b')})}, nil},
		{"the same artifact again", edge, mesh.Entry{Key: "artifacts/model/fraud/3", Value: value(t, storage.Manifest{Digest: digest('a')})}, nil},
		{"other bytes for an artifact version", ctrl, mesh.Entry{Key: "artifacts/model/fraud/3", Value: value(t, storage.Manifest{Digest: digest('b')})}, catalog.ErrImmutable},
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
