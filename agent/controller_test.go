package agent

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/placement"
)

// stubPolicy is the stand-in policy source these tests put in the catalog,
// so the controller is tested apart from the policy language.
type stubPolicy struct {
	Training bool     `json:"training"`
	Replicas int      `json:"replicas"`
	CPU      int64    `json:"cpu"`
	GPUs     int      `json:"gpus"`
	Tiers    []string `json:"tiers"`
}

func stubCompile(p PolicyRecord) (*placement.Request, error) {
	var s stubPolicy
	if err := json.Unmarshal([]byte(p.Source), &s); err != nil {
		return nil, err
	}
	req := &placement.Request{Kind: placement.Inference, Key: p.Key(), Replicas: s.Replicas, Tiers: s.Tiers,
		Resources: placement.Resources{CPU: s.CPU}}
	if s.Training {
		req.Kind = placement.Training
		req.Resources.GPUs = s.GPUs
		req.Gang = placement.Gang{Nodes: s.Replicas, GPUsPerNode: s.GPUs, SameFabric: true}
	}
	return req, nil
}

func putPolicy(t *testing.T, a *Agent, kind, name string, s stubPolicy) {
	t.Helper()
	src, _ := json.Marshal(s)
	rec := PolicyRecord{Kind: kind, Name: name, Source: string(src), Generation: 1, Applied: time.Now()}
	if _, err := a.cat.Policies.Put(rec); err != nil {
		t.Fatal(err)
	}
}

func placementOf(a *Agent, key string) (PlacementRecord, bool) {
	rec, ok := a.placements()[key]
	return rec, ok
}

func TestControllerPlacesAndReplacesAfterFailure(t *testing.T) {
	agents := devMesh(t, 7, func(c *Config) {})
	for _, a := range agents {
		a.compile = stubCompile
	}
	putPolicy(t, agents[0], "InferenceService", "web", stubPolicy{Replicas: 2, CPU: 500, Tiers: []string{"edge"}})
	key := "InferenceService/web"
	var placed PlacementRecord
	meshtest.WaitFor(t, 20*time.Second, "web placed on two edge nodes, the same on every agent", func() bool {
		for _, a := range agents {
			rec, ok := placementOf(a, key)
			if !ok || rec.State != StatePlaced || len(rec.Nodes) != 2 {
				return false
			}
			if rec.Epoch != placed.Epoch && a != agents[0] {
				return false
			}
			placed = rec
		}
		return true
	})
	for _, n := range placed.Nodes {
		if n.Tier != "edge" {
			t.Errorf("placed on %s (tier %s), want edge", n.Name, n.Tier)
		}
	}
	if owner := placed.Owner; owner == "" || agents[0].mesh.Local().Name == "" {
		t.Errorf("no owner recorded")
	}

	// Kill a chosen node that is not the owner: its share moves.
	var victim *Agent
	for _, a := range agents {
		if a.Name() == placed.Nodes[0].Name && a.Name() != placed.Owner {
			victim = a
		}
	}
	if victim == nil {
		for _, a := range agents {
			if a.Name() == placed.Nodes[1].Name && a.Name() != placed.Owner {
				victim = a
			}
		}
	}
	if victim == nil {
		t.Fatalf("both placed nodes are the owner?")
	}
	victim.Close()
	var survivor *Agent
	for _, a := range agents {
		if a != victim {
			survivor = a
			break
		}
	}
	meshtest.WaitFor(t, 30*time.Second, "web placed again without the killed node", func() bool {
		rec, ok := placementOf(survivor, key)
		if !ok || rec.State != StatePlaced || len(rec.Nodes) != 2 || rec.Epoch <= placed.Epoch {
			return false
		}
		for _, n := range rec.Nodes {
			if n.Name == victim.Name() {
				return false
			}
		}
		return true
	})
}

// TestNoOverCommitWhenOwnersRace applies three 8-GPU gangs at once, from
// different agents, on a mesh with two 8-GPU nodes: however the owners'
// views race, no node admits more GPUs than it has, two gangs run and the
// third fails for capacity.
func TestNoOverCommitWhenOwnersRace(t *testing.T) {
	agents := devMesh(t, 7, func(c *Config) {})
	for _, a := range agents {
		a.compile = stubCompile
		a.jobRunner.SetPaused(true) // placement alone: the stub jobs are not runnable
	}
	for i := range 3 {
		putPolicy(t, agents[i*2], "TrainingJob", fmt.Sprintf("train-%d", i), stubPolicy{Training: true, Replicas: 1, GPUs: 8, Tiers: []string{"onprem"}})
	}
	meshtest.WaitFor(t, 30*time.Second, "two gangs placed and one failed", func() bool {
		placedN, failedN := 0, 0
		for i := range 3 {
			rec, ok := placementOf(agents[0], fmt.Sprintf("TrainingJob/train-%d", i))
			if !ok {
				return false
			}
			switch rec.State {
			case StatePlaced:
				placedN++
			case StateFailed:
				failedN++
			}
		}
		return placedN == 2 && failedN == 1
	})
	for _, n := range agents[0].mesh.Nodes() {
		gpus := 0
		for _, as := range n.Assignments {
			if as.Accepted {
				gpus += len(as.GPUs)
			}
		}
		if gpus > len(n.Capabilities.GPUs) {
			t.Errorf("%s admitted %d GPUs of %d", n.Name, gpus, len(n.Capabilities.GPUs))
		}
		if n.Tier == mesh.TierOnprem && gpus != 8 {
			t.Errorf("%s holds %d GPUs, want 8 (one gang each)", n.Name, gpus)
		}
	}
}
