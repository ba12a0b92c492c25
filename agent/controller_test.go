package agent

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// putPolicy stores a policy document (YAML) in the catalog, as an apply
// at a would, without the apply's checks.
func putPolicy(t *testing.T, a *Agent, kind, name, spec string) {
	t.Helper()
	src := fmt.Sprintf("apiVersion: strata/v1\nkind: %s\nmetadata: {name: %s}\nspec:\n%s", kind, name, spec)
	rec := PolicyRecord{Kind: kind, Name: name, Source: src, Generation: 1, Applied: time.Now()}
	if _, err := rec.Document(); err != nil {
		t.Fatalf("policy %s/%s: %v", kind, name, err)
	}
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
	putPolicy(t, agents[0], "InferenceService", "web", "  model: {name: m, version: \"1\"}\n  replicas: 2\n  resources: {cpu: 500m}\n  tiers: [edge]\n")
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

	// Kill a chosen node of edge-a, whose other node still answers: a
	// node failure, so its share moves and the other replica stays.
	byName := map[string]*Agent{}
	for _, a := range agents {
		byName[a.Name()] = a
	}
	var victim *Agent
	var kept string
	for _, n := range placed.Nodes {
		if n.Site == "edge-a" && victim == nil {
			victim = byName[n.Name]
		} else {
			kept = n.Name
		}
	}
	if victim == nil {
		t.Fatalf("no replica in edge-a: %s", placed.NodeNames())
	}
	victim.Close()
	survivor := byName["cloud-1"]
	var again PlacementRecord
	meshtest.WaitFor(t, 30*time.Second, "web placed again without the killed node, the other replica where it was", func() bool {
		rec, ok := placementOf(survivor, key)
		if !ok || rec.State != StatePlaced || len(rec.Nodes) != 2 || rec.Epoch <= placed.Epoch {
			return false
		}
		var names []string
		for _, n := range rec.Nodes {
			names = append(names, n.Name)
		}
		again = rec
		return !slices.Contains(names, victim.Name()) && slices.Contains(names, kept)
	})

	// Kill edge-b's only node: the whole site is unreachable, which is not
	// a node failure: its replica (if it has one) is not moved.
	edgeB := byName["edge-b-1"]
	edgeB.Close()
	meshtest.WaitFor(t, 30*time.Second, "edge-b unreachable", func() bool {
		for _, s := range mesh.Sites(survivor.mesh.Nodes()) {
			if s.Name == "edge-b" {
				return s.Status == mesh.SiteUnreachable
			}
		}
		return false
	})
	// Two controller passes (a second apart) see the site unreachable.
	time.Sleep(2500 * time.Millisecond) // the absence of a re-placement is under test
	rec, _ := placementOf(survivor, key)
	if rec.Epoch != again.Epoch || rec.NodeNames() != again.NodeNames() {
		t.Errorf("placement changed after edge-b became unreachable: epoch %d→%d, nodes %s→%s (%s)", again.Epoch, rec.Epoch, again.NodeNames(), rec.NodeNames(), rec.Message)
	}
}

// TestNoOverCommitWhenOwnersRace applies three 8-GPU gangs at once, from
// different agents, on a mesh with two 8-GPU nodes: however the owners'
// views race, no node admits more GPUs than it has, two gangs run and the
// third fails for capacity.
func TestNoOverCommitWhenOwnersRace(t *testing.T) {
	agents := devMesh(t, 7, func(c *Config) {})
	for _, a := range agents {
		a.jobRunner.SetPaused(true) // placement alone: the jobs are not run
	}
	for i := range 3 {
		putPolicy(t, agents[i*2], "TrainingJob", fmt.Sprintf("train-%d", i), "  command: [\"true\"]\n  resources: {gpus: {count: 8}}\n  tiers: [onprem]\n")
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
	held := func(n mesh.Node) int {
		gpus := 0
		for _, as := range n.Assignments {
			if as.Accepted {
				gpus += len(as.GPUs)
			}
		}
		return gpus
	}
	// The placement records and the nodes' documents (their admissions)
	// replicate apart: agents[0] may see a gang placed before the
	// document of the node that admitted it.
	meshtest.WaitFor(t, 10*time.Second, "each onprem node's document showing its gang", func() bool {
		for _, n := range agents[0].mesh.Nodes() {
			if n.Tier == mesh.TierOnprem && held(n) != 8 {
				return false
			}
		}
		return true
	})
	for _, n := range agents[0].mesh.Nodes() {
		if gpus := held(n); gpus > len(n.Capabilities.GPUs) {
			t.Errorf("%s admitted %d GPUs of %d", n.Name, gpus, len(n.Capabilities.GPUs))
		}
	}
}
