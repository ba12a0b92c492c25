package catalog

import (
	"encoding/json"
	"testing"

	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
)

// FuzzDecodeRecord stores arbitrary bytes as a record of every table: a
// reader gets the good records and a DecodeError for the bad one, never a
// panic.
func FuzzDecodeRecord(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"InferenceService","name":"s","source":"x","generation":1}`,
		`{"key":"InferenceService/s","nodes":[{"name":"a","rank":0}],"rejected":{"latency_slo":3}}`,
		`{"name":"j","members":[{"rank":0}],"created":"2026-01-01T00:00:00Z"}`,
		`{"policy":"p","steps":[{"stage":"canary"}],"trigger":{"drifted":["f"]}}`,
		`{"policy":"p","node":"n","scores":[{"name":"f","statistic":1e309}]}`,
		`{"kind":"model","name":"m","version":"1","chunks":["a"],"size":-1}`,
		`null`, `[]`, `"x"`, `{"nodes":7}`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st := catalogtest.NewStore()
		c := New(st, nil)
		for _, table := range []string{"policies", "placements", "jobs", "rollouts", "drift", "artifacts"} {
			if _, err := st.Put(table+"/k", json.RawMessage(b)); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = c.Policies.List()
		_, _ = c.Placements.Ready()
		_, _ = c.Jobs.Values()
		_, _ = c.Rollouts.Get("k")
		_, _ = c.Drift.List()
		_, _ = c.Manifests.Values()
		if p, err := c.Policies.Value("k"); err == nil {
			_, _ = p.Document()
		}
	})
}
