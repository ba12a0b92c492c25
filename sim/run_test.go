package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/sim"
)

// TestRunComparesStrategies replays one trace with every strategy: the
// replays are reproducible, strata meets the SLO for at least as many
// clients as any baseline and more than random, moves less data than the
// latency-blind baselines, and what ran on failed nodes is placed again.
func TestRunComparesStrategies(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 3000, Seed: 11})
	evs := topo.Trace(sim.TraceOptions{Policies: 400, Seed: 11, SiteFailures: 3, NodeFailures: 20})
	run := func() *sim.Report {
		rep, err := sim.Run(topo, evs, sim.RunOptions{Seed: 11})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	a, b := run(), run()
	by := map[string]sim.Result{}
	for k, r := range a.Results {
		if r.Strategy != sim.Strategies[k] {
			t.Fatalf("result %d is %s, want %s", k, r.Strategy, sim.Strategies[k])
		}
		s := b.Results[k]
		if r.SLOAttainment != s.SLOAttainment || r.EgressBytes != s.EgressBytes || r.Replaced != s.Replaced || r.ServicesPlaced != s.ServicesPlaced {
			t.Errorf("%s: two replays differ: %+v vs %+v", r.Strategy, r, s)
		}
		if r.Services == 0 || r.Decisions == 0 || r.ClientPairs == 0 {
			t.Errorf("%s: nothing replayed: %+v", r.Strategy, r)
		}
		by[r.Strategy] = r
	}
	st := by[sim.StrategyStrata]
	for name, r := range by {
		if r.SLOAttainment > st.SLOAttainment+1e-9 {
			t.Errorf("%s meets the SLO for %.3f of client pairs, strata only %.3f", name, r.SLOAttainment, st.SLOAttainment)
		}
	}
	if st.SLOAttainment <= by[sim.StrategyRandom].SLOAttainment {
		t.Errorf("strata (%.3f) is no better than random (%.3f) at the SLO", st.SLOAttainment, by[sim.StrategyRandom].SLOAttainment)
	}
	for _, name := range []string{sim.StrategyRandom, sim.StrategyLeastLoaded} {
		if st.EgressBytes >= by[name].EgressBytes {
			t.Errorf("strata moves %d bytes across sites, %s only %d", st.EgressBytes, name, by[name].EgressBytes)
		}
	}
	if st.Replaced == 0 {
		t.Errorf("strata placed nothing again after %d failures", 23)
	}
	if st.JobsPlaced == 0 || st.RetrainsPlaced == 0 {
		t.Errorf("strata placed no training: %+v", st)
	}
	var out strings.Builder
	if err := a.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, name := range sim.Strategies {
		if !strings.Contains(out.String(), name) {
			t.Errorf("the table has no row for %s:\n%s", name, out.String())
		}
	}
	var svg strings.Builder
	if err := sim.WriteStrategiesSVG(&svg, a); err != nil || !strings.HasPrefix(svg.String(), "<svg") {
		t.Errorf("strategies plot: %v", err)
	}
	svg.Reset()
	if err := sim.WriteMapSVG(&svg, topo, st); err != nil || strings.Count(svg.String(), "<circle") < len(topo.Sites) {
		t.Errorf("map: %v, %d circles for %d sites", err, strings.Count(svg.String(), "<circle"), len(topo.Sites))
	}
}

// TestRunSiteDown: a service whose only replica is at a site that goes
// down is placed again elsewhere.
func TestRunSiteDown(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 1000, Seed: 2, DeadFraction: -1})
	edge := topo.EdgeSites()
	svc := sim.Event{Kind: sim.EventService, Name: "a", Clients: []string{edge[0]}, P99: 50 * time.Millisecond, CPU: 500, Memory: 1 << 30}
	for _, strategy := range []string{sim.StrategyStrata, sim.StrategyNearestSite, sim.StrategyRandom} {
		opts := sim.RunOptions{Strategies: []string{strategy}}
		rep, err := sim.Run(topo, []sim.Event{svc}, opts)
		if err != nil {
			t.Fatal(err)
		}
		var site string
		for s := range rep.Results[0].SiteReplicas {
			site = s
		}
		rep, err = sim.Run(topo, []sim.Event{svc, {At: time.Second, Kind: sim.EventSiteDown, Target: site}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.Results[0]; r.Replaced != 1 || r.Lost != 0 || r.ServicesPlaced != 1 || r.SiteReplicas[site] != 0 {
			t.Errorf("%s: after %s went down: %+v", strategy, site, r)
		}
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 200, Seed: 2})
	for _, c := range []struct {
		evs  []sim.Event
		opts sim.RunOptions
		want string
	}{
		{nil, sim.RunOptions{Strategies: []string{"fastest"}}, `strategy "fastest"`},
		{[]sim.Event{{Kind: sim.EventSiteDown, Target: "atlantis"}}, sim.RunOptions{}, `target: no site "atlantis"`},
		{[]sim.Event{{Kind: sim.EventService, Name: "a", Clients: []string{"nowhere"}}}, sim.RunOptions{}, `clients: no site "nowhere"`},
		{[]sim.Event{{Kind: "explode"}}, sim.RunOptions{}, `kind: "explode"`},
	} {
		_, err := sim.Run(topo, c.evs, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v) = %v, want an error with %q", c.evs, err, c.want)
		}
	}
}
