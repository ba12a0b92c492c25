package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/storage"
)

// TestOutOfOrderDelivery: for every record kind derived from another, a
// reader that receives the dependent record first sees it pending (not
// failed), and ready once the dependency arrives.
func TestOutOfOrderDelivery(t *testing.T) {
	t.Parallel()
	type step struct {
		name string
		// write writes the dependency then the dependent at the writer
		// and returns both full keys.
		write func(c *Catalog) (dep, dependent string)
		// pending reports whether the dependent is pending at the reader.
		pending func(c *Catalog) (bool, error)
	}
	cases := []step{
		{
			name: "placement before its policy",
			write: func(c *Catalog) (string, string) {
				p, _ := c.Policies.Put(Policy{Kind: "TrainingJob", Name: "retrain-1", Generation: 1})
				c.Placements.Put(Placement{Key: p.Key, State: StatePending}, p.Ref())
				return "policies/TrainingJob/retrain-1", "placements/TrainingJob/retrain-1"
			},
			pending: func(c *Catalog) (bool, error) {
				r, err := c.Placements.Get("TrainingJob/retrain-1")
				return len(c.Placements.Pending(r)) > 0, err
			},
		},
		{
			name: "job record before its placement",
			write: func(c *Catalog) (string, string) {
				p, _ := c.Placements.Put(Placement{Key: "TrainingJob/j", Epoch: 3})
				c.Jobs.Put(Job{Name: "j", Key: "TrainingJob/j", Epoch: 3}, p.Ref())
				return "placements/TrainingJob/j", "jobs/j"
			},
			pending: func(c *Catalog) (bool, error) {
				r, err := c.Jobs.Get("j")
				return len(c.Jobs.Pending(r)) > 0, err
			},
		},
		{
			name: "rollout before its policy's new generation",
			write: func(c *Catalog) (string, string) {
				p, _ := c.Policies.Put(Policy{Kind: "InferenceService", Name: "s", Generation: 2})
				c.Rollouts.Put(Rollout{Policy: "InferenceService/s", Generation: 2}, p.Ref())
				return "policies/InferenceService/s", "rollouts/InferenceService/s"
			},
			pending: func(c *Catalog) (bool, error) {
				r, err := c.Rollouts.Get("InferenceService/s")
				return len(c.Rollouts.Pending(r)) > 0, err
			},
		},
		{
			name: "drift state before the manifest it watches",
			write: func(c *Catalog) (string, string) {
				m, _ := c.Manifests.Put(storage.Manifest{Kind: storage.KindModel, Name: "m", Version: "2"})
				c.Drift.Put(Drift{Policy: "InferenceService/s", Node: "edge-1", Model: "m", Version: "2"}, m.Ref())
				return "artifacts/model/m/2", "drift/InferenceService/s/edge-1"
			},
			pending: func(c *Catalog) (bool, error) {
				r, err := c.Drift.Get("InferenceService/s/edge-1")
				return len(c.Drift.Pending(r)) > 0, err
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws, rs := catalogtest.NewStore(), catalogtest.NewStore()
			writer, reader := New(ws, nil), New(rs, nil)
			dep, dependent := tc.write(writer)
			ws.Deliver(rs, dependent)
			if p, err := tc.pending(reader); err != nil || !p {
				t.Fatalf("dependent first: pending = %v, err = %v; want pending, no error", p, err)
			}
			done := make(chan error, 1)
			go func() {
				done <- reader.WaitFor(context.Background(), dependent, mustDeps(t, rs, dependent), time.Minute)
			}()
			ws.Deliver(rs, dep)
			if err := <-done; err != nil {
				t.Fatalf("WaitFor after the dependency arrived: %v", err)
			}
			if p, err := tc.pending(reader); err != nil || p {
				t.Fatalf("after the dependency: pending = %v, err = %v; want ready", p, err)
			}
		})
	}
}

func mustDeps(t *testing.T, s *catalogtest.Store, key string) []mesh.Dep {
	e, ok := s.Lookup(key)
	if !ok {
		t.Fatalf("no %s", key)
	}
	return e.Deps
}

func TestWaitForGivesUpWithPendingError(t *testing.T) {
	t.Parallel()
	c := New(catalogtest.NewStore(), nil)
	err := c.WaitFor(context.Background(), "placements/x", []mesh.Dep{{Key: "policies/x", Version: 9}}, 10*time.Millisecond)
	var pe *PendingError
	if !errors.As(err, &pe) || len(pe.Missing) != 1 || pe.Missing[0].Key != "policies/x" {
		t.Fatalf("WaitFor = %v, want a PendingError naming policies/x", err)
	}
	if want := "catalog: placements/x is pending: waiting for policies/x to replicate"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestDecodeErrorsReturnedAndCountedOnce(t *testing.T) {
	t.Parallel()
	s := catalogtest.NewStore()
	reg := prometheus.NewRegistry()
	c := New(s, reg)
	c.Policies.Put(Policy{Kind: "InferenceService", Name: "good"})
	s.Put("policies/InferenceService/bad", json.RawMessage(`{"kind": 7}`))
	for range 3 {
		got, err := c.Policies.Values()
		if len(got) != 1 || got[0].Name != "good" {
			t.Fatalf("Values = %+v, want the good one", got)
		}
		var de *DecodeError
		if !errors.As(err, &de) || de.Table != "policies" || de.Key != "InferenceService/bad" {
			t.Fatalf("err = %v, want a DecodeError for policies InferenceService/bad", err)
		}
	}
	if _, err := c.Policies.Get("InferenceService/bad"); err == nil {
		t.Error("Get of an undecodable record: no error")
	}
	var m dto.Metric
	if err := c.decodes.WithLabelValues("policies").Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 1 {
		t.Errorf("decode errors counted %v times, want once per record version", n)
	}
}

// TestSchemas: a record written at an older or newer minor of this
// agent's schema decodes, fields it does not know ignored; one of another
// major is refused with a SchemaError, counted, and listed as such.
func TestSchemas(t *testing.T) {
	t.Parallel()
	s := catalogtest.NewStore()
	c := New(s, prometheus.NewRegistry())
	newer := fmt.Sprintf("%d.%d", mesh.CurrentSchema.Major, mesh.CurrentSchema.Minor+1)
	other := fmt.Sprintf("%d.0", mesh.CurrentSchema.Major+1)
	s.PutAt("jobs/old", json.RawMessage(`{"name": "old", "state": "running"}`), "")
	s.PutAt("jobs/newer", json.RawMessage(`{"name": "newer", "state": "running", "priority_class": "high"}`), newer)
	s.PutAt("jobs/major", json.RawMessage(`{"name": "major"}`), other)
	s.PutAt("jobs/garbled", json.RawMessage(`{"name": "garbled"}`), "one")
	for _, k := range []string{"old", "newer"} {
		if j, err := c.Jobs.Value(k); err != nil || j.Name != k || j.State != "running" {
			t.Errorf("Get(%s) = %+v, %v; want it read", k, j, err)
		}
	}
	for _, k := range []string{"major", "garbled"} {
		_, err := c.Jobs.Get(k)
		var se *mesh.SchemaError
		if !errors.As(err, &se) {
			t.Errorf("Get(%s) = %v, want a SchemaError", k, err)
		}
	}
	_, err := c.Jobs.Get("major")
	want := fmt.Sprintf("catalog: jobs \"major\" (version 3) does not decode: jobs/major was written at schema %s, and this agent (schema %s) reads only %d.x: upgrade it", other, mesh.CurrentSchema, mesh.CurrentSchema.Major)
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	if recs, err := c.Jobs.List(); len(recs) != 2 || err == nil {
		t.Errorf("List = %d records, %v; want 2 and the two refused", len(recs), err)
	}
	var m dto.Metric
	c.decodes.WithLabelValues("jobs").Write(&m)
	if n := m.GetCounter().GetValue(); n != 2 {
		t.Errorf("refused records counted %v, want 2", n)
	}
}

func TestGetDeletedIsNotFound(t *testing.T) {
	t.Parallel()
	c := New(catalogtest.NewStore(), nil)
	c.Jobs.Put(Job{Name: "j"})
	if err := c.Jobs.Delete("j"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Jobs.Get("j")
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, mesh.ErrNotFound) {
		t.Errorf("Get(deleted) = %v, want ErrNotFound (and mesh.ErrNotFound)", err)
	}
	if _, ok := c.Jobs.Ref("j"); ok {
		t.Error("Ref of a deleted record")
	}
}

func TestScopes(t *testing.T) {
	t.Parallel()
	s := catalogtest.NewStore()
	c := New(s, nil)
	c.Drift.Put(Drift{Policy: "InferenceService/s", Node: "n"})
	c.Policies.Put(Policy{Kind: "InferenceService", Name: "s"})
	if e, _ := s.Lookup("drift/InferenceService/s/n"); e.Scope != mesh.ScopeSite {
		t.Errorf("drift scope %q, want site", e.Scope)
	}
	if e, _ := s.Lookup("policies/InferenceService/s"); e.Scope != mesh.ScopeGlobal {
		t.Errorf("policy scope %q, want global", e.Scope)
	}
}
