package placement_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

// TestLiveMatchesBuilt feeds Live the nodes of an estate as placements
// load them (and, every fifth step, as one node's work ends), and checks
// that every decision on its snapshot is the decision on a snapshot built
// afresh from the same nodes, while the index is built only once.
func TestLiveMatchesBuilt(t *testing.T) {
	t.Parallel()
	topo, err := sim.Generate(sim.Options{Nodes: 3000, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	initial := topo.Snapshot.Nodes()
	nodes := topo.Snapshot.Nodes()
	var live placement.Live
	for k := range 40 {
		got, err := live.Update(nodes)
		if err != nil {
			t.Fatal(err)
		}
		var b placement.Builder
		b.Add(nodes...)
		fresh, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		req := topo.TrainingRequest(uint64(k), 1+k%3, 1+k%8)
		if k%4 == 3 {
			req = topo.InferenceRequest(uint64(k))
		}
		gd, err := placement.Place(got, req)
		if err != nil {
			t.Fatal(err)
		}
		wd, err := placement.Place(fresh, req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wd.Placements, gd.Placements); diff != "" {
			t.Fatalf("step %d: live and built snapshots disagree (-built +live):\n%s", k, diff)
		}
		if wd.Domain != nil && gd.Domain != nil && wd.Domain.Total != gd.Domain.Total {
			t.Fatalf("step %d: domain score %v live, %v built", k, gd.Domain.Total, wd.Domain.Total)
		}
		// The mesh reports the new load: reserve the decision on a clone
		// of the fresh snapshot and read its nodes back.
		load := fresh.Clone()
		for _, p := range gd.Placements {
			if _, err := load.Reserve(p.Node, p.Resources); err != nil {
				t.Fatal(err)
			}
		}
		nodes = load.Nodes()
		if k%5 == 4 && len(gd.Placements) > 0 {
			// Work ends on one node: it is as free as it was at first.
			name := gd.Placements[0].Node
			for i := range nodes {
				if nodes[i].Name == name {
					nodes[i] = initial[i]
				}
			}
		}
	}
	if st := live.Stats(); st.Builds != 1 || st.Updates != 39 || st.Overlaid == 0 {
		t.Fatalf("stats %+v: want one build, 39 updates and an overlay", st)
	}
}

// TestLiveRebuilds checks what makes Live build its index again, and what
// does not.
func TestLiveRebuilds(t *testing.T) {
	t.Parallel()
	topo, err := sim.Generate(sim.Options{Nodes: 200, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	base := topo.Snapshot.Nodes()
	live := placement.Live{CoordSlack: time.Millisecond}
	if _, err := live.Update(base); err != nil {
		t.Fatal(err)
	}
	moved := func(n placement.Node, d float64) placement.Node {
		n.Coord = n.Coord.Clone()
		n.Coord.Vec[0] += d
		return n
	}
	for _, tc := range []struct {
		name   string
		change func(ns []placement.Node) []placement.Node
		reason string // "" for no build
	}{
		{"free CPU", func(ns []placement.Node) []placement.Node { ns[5].FreeCPU -= 1000; return ns }, ""},
		{"coordinate within slack", func(ns []placement.Node) []placement.Node { ns[5] = moved(ns[5], 0.0004); return ns }, ""},
		{"coordinate past slack", func(ns []placement.Node) []placement.Node { ns[5] = moved(ns[5], 0.002); return ns }, "coordinate"},
		{"label", func(ns []placement.Node) []placement.Node { ns[7].Labels = map[string]string{"zone": "b"}; return ns }, "labels"},
		{"alive", func(ns []placement.Node) []placement.Node { ns[9].Alive = !ns[9].Alive; return ns }, "alive"},
		{"artifact", func(ns []placement.Node) []placement.Node {
			ns[9].Artifacts = append(ns[9].Artifacts, "m@2")
			return ns
		}, "locality"},
		{"node left", func(ns []placement.Node) []placement.Node { return ns[1:] }, "joined or left"},
	} {
		ns := tc.change(topo.Snapshot.Nodes())
		// Start each case from the base index.
		if _, err := live.Update(base); err != nil {
			t.Fatal(err)
		}
		before := live.Stats().Builds
		if _, err := live.Update(ns); err != nil {
			t.Fatal(err)
		}
		st := live.Stats()
		switch {
		case tc.reason == "" && st.Builds != before:
			t.Errorf("%s: built the index again (%s)", tc.name, st.Reason)
		case tc.reason != "" && (st.Builds != before+1 || !strings.Contains(st.Reason, tc.reason)):
			t.Errorf("%s: builds %d→%d, reason %q; want one build for %q", tc.name, before, st.Builds, st.Reason, tc.reason)
		}
	}
	// Remote client sites: a change past the slack builds again.
	if _, err := live.Update(base); err != nil {
		t.Fatal(err)
	}
	site := base[0].Site
	for _, tc := range []struct {
		name   string
		rtt    time.Duration
		reason string
	}{
		{"remote client added", 20 * time.Millisecond, "remote client"},
		{"remote client within slack", 20*time.Millisecond + 500*time.Microsecond, ""},
		{"remote client past slack", 25 * time.Millisecond, "remote client"},
	} {
		live.SetRemoteClients([]placement.RemoteClient{{Name: "far", Via: site, RTT: tc.rtt}})
		before := live.Stats().Builds
		s, err := live.Update(base)
		if err != nil {
			t.Fatal(err)
		}
		if st := live.Stats(); (tc.reason == "") != (st.Builds == before) || !strings.Contains(st.Reason, tc.reason) {
			t.Errorf("%s: builds %d→%d, reason %q; want a build: %v", tc.name, before, st.Builds, st.Reason, tc.reason != "")
		}
		if _, ok := s.Client("far"); !ok {
			t.Errorf("%s: no client far", tc.name)
		}
	}
	live.SetRemoteClients(nil)

	// Load changes on most nodes: building beats a large overlay.
	ns := topo.Snapshot.Nodes()
	for i := range ns {
		ns[i].FreeCPU /= 2
	}
	if _, err := live.Update(base); err != nil {
		t.Fatal(err)
	}
	before := live.Stats().Builds
	if _, err := live.Update(ns); err != nil {
		t.Fatal(err)
	}
	if st := live.Stats(); st.Builds != before+1 || st.Reason != "load changed on many nodes" {
		t.Errorf("load on every node: %+v", st)
	}
	if st := live.Stats(); st.Overlaid != 0 {
		t.Errorf("a fresh index has no overlay: %+v", st)
	}
}

// TestReleaseUndoesReserve checks that Release gives back exactly what
// Reserve took: the clone's nodes are the built snapshot's again, and so
// is a gang decision on it.
func TestReleaseUndoesReserve(t *testing.T) {
	t.Parallel()
	topo, err := sim.Generate(sim.Options{Nodes: 1000, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	req := topo.TrainingRequest(1, 2, 4)
	want, err := placement.Place(topo.Snapshot, req)
	if err != nil {
		t.Fatal(err)
	}
	if !want.Feasible {
		t.Fatalf("gang not feasible:\n%s", want)
	}
	c := topo.Snapshot.Clone()
	type held struct {
		node string
		res  placement.Resources
		gpus []int
	}
	var hs []held
	for _, p := range want.Placements {
		gpus, err := c.Reserve(p.Node, p.Resources)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, held{p.Node, p.Resources, gpus})
	}
	for _, h := range hs {
		if err := c.Release(h.node, h.res.CPU, h.res.Memory, h.gpus); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(topo.Snapshot.Nodes(), c.Nodes()); diff != "" {
		t.Fatalf("nodes after reserve and release (-built +clone):\n%s", diff)
	}
	got, err := placement.Place(c, req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Placements, got.Placements); diff != "" {
		t.Fatalf("decision after reserve and release (-built +clone):\n%s", diff)
	}
	if want.Domain.Total != got.Domain.Total {
		t.Fatalf("domain score %v after release, %v built", got.Domain.Total, want.Domain.Total)
	}
	if err := topo.Snapshot.Release(hs[0].node, 1, 1, nil); err == nil {
		t.Fatal("Release on a built snapshot: want ErrImmutable")
	}
}
