package sim_test

import (
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/sim"
)

func loadTrace(tb testing.TB, topo *sim.Topology, o sim.LoadOptions) *sim.LoadTrace {
	tb.Helper()
	lt, err := topo.LoadTrace(o)
	if err != nil {
		tb.Fatal(err)
	}
	return lt
}

func serve(tb testing.TB, topo *sim.Topology, lt *sim.LoadTrace, o sim.ServeOptions) map[string]sim.ServeResult {
	tb.Helper()
	rep, err := sim.Serve(topo, lt, o)
	if err != nil {
		tb.Fatal(err)
	}
	by := map[string]sim.ServeResult{}
	for _, r := range rep.Results {
		by[r.Strategy] = r
	}
	return by
}

// TestLoadTrace: the same seed gives the same load; the load peaks in
// each client site's afternoon and is lowest in its night; failures lie
// within the trace, in order, and no site fails twice.
func TestLoadTrace(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 1500, Sites: 30, Seed: 5})
	o := sim.LoadOptions{Seed: 5, Duration: 24 * time.Hour, Step: 10 * time.Minute}
	a, b := loadTrace(t, topo, o), loadTrace(t, topo, o)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same seed, different load (-a +b):\n%s", diff)
	}
	o.Seed = 6
	if cmp.Equal(a.Pairs, loadTrace(t, topo, o).Pairs) {
		t.Error("different seeds gave the same load")
	}
	if a.Steps != 144 || len(a.Services) != len(topo.EdgeSites()) || len(a.Pairs) < len(a.Services) {
		t.Fatalf("%d steps, %d services, %d pairs", a.Steps, len(a.Services), len(a.Pairs))
	}
	var day, night float64
	offsets := map[time.Duration]bool{}
	for _, p := range a.Pairs {
		offsets[p.UTCOffset] = true
		for k, r := range p.Rate {
			if r < 0 {
				t.Fatalf("pair %s/%d: negative rate %v", p.Site, p.Service, r)
			}
			h := math.Mod((time.Duration(k)*a.Step+p.UTCOffset).Hours()+48, 24)
			switch {
			case h >= 14 && h < 18:
				day += r
			case h >= 2 && h < 6:
				night += r
			}
		}
	}
	if day < 3*night {
		t.Errorf("afternoon load %.0f is not well above the night's %.0f", day, night)
	}
	if len(offsets) < 2 {
		t.Errorf("every client site in one time zone: %v", offsets)
	}
	sites := map[string]bool{}
	for k, f := range a.Failures {
		if f.At <= 0 || f.At > a.Duration() || k > 0 && f.At < a.Failures[k-1].At {
			t.Errorf("failure %d at %s: outside the trace or out of order", k, f.At)
		}
		if f.Kind == sim.EventSiteDown {
			if sites[f.Site] {
				t.Errorf("site %s fails twice", f.Site)
			}
			sites[f.Site] = true
		}
	}
	if len(sites) == 0 || len(a.Failures) == len(sites) {
		t.Errorf("%d failures, %d of sites: want both kinds", len(a.Failures), len(sites))
	}
	for _, bad := range []sim.LoadOptions{{Shape: "tidal"}, {Step: time.Hour, Duration: time.Minute}, {Services: -1}} {
		if _, err := topo.LoadTrace(bad); err == nil {
			t.Errorf("LoadTrace(%+v): no error", bad)
		}
	}
}

// TestServeStrategies replays one load with every serving strategy: the
// replays are reproducible; autoscaling with burst holds fewer
// replica-hours than the fixed peak count at comparable attainment; edge
// sites too small for the peak make autoscaling without burst miss the
// SLO and burst make up for it; only pre-staging pre-stages, and it pulls
// fewer bytes to start replicas.
func TestServeStrategies(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 1500, Sites: 30, Seed: 3})
	lt := loadTrace(t, topo, sim.LoadOptions{Seed: 3, Duration: 24 * time.Hour, Step: 10 * time.Minute})
	rep, err := sim.Serve(topo, lt, sim.ServeOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	again, err := sim.Serve(topo, lt, sim.ServeOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, again, cmpopts.IgnoreFields(sim.ServeResult{}, "Elapsed")); diff != "" {
		t.Fatalf("two replays differ (-a +b):\n%s", diff)
	}
	by := map[string]sim.ServeResult{}
	for k, r := range rep.Results {
		if r.Strategy != sim.ServeStrategies[k] {
			t.Fatalf("result %d is %s, want %s", k, r.Strategy, sim.ServeStrategies[k])
		}
		if len(r.Replicas) != lt.Steps || len(r.Attainment) != lt.Steps || r.ReplicaHours <= 0 || r.Failures == 0 {
			t.Errorf("%s: nothing replayed: %d steps, %.0f replica-hours, %d failures", r.Strategy, len(r.Replicas), r.ReplicaHours, r.Failures)
		}
		by[r.Strategy] = r
	}
	fixed, auto, burst, pre := by[sim.ServeFixed], by[sim.ServeAutoscale], by[sim.ServeBurst], by[sim.ServePrestage]
	if burst.ReplicaHours >= 0.9*fixed.ReplicaHours || burst.SLOAttainment < fixed.SLOAttainment-0.01 {
		t.Errorf("autoscale+burst: %.0f replica-hours at %.3f; fixed %.0f at %.3f", burst.ReplicaHours, burst.SLOAttainment, fixed.ReplicaHours, fixed.SLOAttainment)
	}
	if auto.ShortReplicaHours == 0 || auto.BurstReplicaHours != 0 || burst.BurstReplicaHours == 0 {
		t.Errorf("edge never full, or burst misplaced: autoscale short %.0f, burst %.0f; autoscale+burst burst %.0f",
			auto.ShortReplicaHours, auto.BurstReplicaHours, burst.BurstReplicaHours)
	}
	if burst.SLOAttainment < auto.SLOAttainment+0.1 {
		t.Errorf("burst raises attainment only from %.3f to %.3f", auto.SLOAttainment, burst.SLOAttainment)
	}
	for _, r := range []sim.ServeResult{fixed, auto, burst} {
		if r.PrestagedBytes != 0 || r.StandbyStarts != 0 {
			t.Errorf("%s pre-staged %d bytes, started %d standbys", r.Strategy, r.PrestagedBytes, r.StandbyStarts)
		}
	}
	if pre.PrestagedBytes == 0 || pre.StandbyStarts == 0 || pre.MovedBytes >= burst.MovedBytes {
		t.Errorf("prestage: %d pre-staged, %d standby starts, %d moved (burst %d)", pre.PrestagedBytes, pre.StandbyStarts, pre.MovedBytes, burst.MovedBytes)
	}
	if pre.RestoreP50 > burst.RestoreP50 {
		t.Errorf("prestage restores in %s (median), burst in %s", pre.RestoreP50, burst.RestoreP50)
	}
}

// TestServePrestageSkipsTheWAN: one service's only client site goes
// down. Autoscale with burst starts the replacement where the model is
// not and pulls it over the site link; pre-staging pulled it to the
// standby ahead of time, so the clients are served again after the
// failure is noticed and the model loaded, then plans for the next one.
func TestServePrestageSkipsTheWAN(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 600, Sites: 12, Seed: 2, DeadFraction: -1})
	// The client site: the edge site with most free GPUs.
	site, best := "", -1
	for _, s := range topo.Sites {
		if s.Tier != placement.TierEdge {
			continue
		}
		free := 0
		for _, i := range s.Nodes {
			for _, g := range topo.Nodes[i].GPUs {
				if g.Free && g.Healthy {
					free++
				}
			}
		}
		if free > best {
			site, best = s.Name, free
		}
	}
	const steps = 24
	lt := &sim.LoadTrace{Shape: "flat", Step: 5 * time.Minute, Steps: steps,
		Services: []sim.LoadService{{Name: "svc", ModelBytes: 8e9, Capacity: 100, ServiceTime: 10 * time.Millisecond, P99: 100 * time.Millisecond}},
		Pairs:    []sim.LoadPair{{Service: 0, Site: site, Peak: 50, Rate: slices.Repeat([]float64{50}, steps)}},
		Failures: []sim.LoadFailure{{At: time.Hour, Kind: sim.EventSiteDown, Site: site}},
	}
	o := sim.ServeOptions{Strategies: []string{sim.ServeBurst, sim.ServePrestage}}
	by := serve(t, topo, lt, o)
	burst, pre := by[sim.ServeBurst], by[sim.ServePrestage]
	detect, load := 10*time.Second, 16*time.Second // the defaults; 8 GB at 2 s/GB
	wan := 64 * time.Second                        // 8 GB at 125 MB/s
	if want := []time.Duration{detect + load}; !slices.Equal(pre.Recoveries, want) || pre.StandbyStarts != 1 {
		t.Errorf("prestage: recoveries %v, %d standby starts; want %v, 1", pre.Recoveries, pre.StandbyStarts, want)
	}
	if want := []time.Duration{detect + wan + load}; !slices.Equal(burst.Recoveries, want) {
		t.Errorf("autoscale+burst: recoveries %v, want %v", burst.Recoveries, want)
	}
	// Pre-staging pulls the model twice: for the plan before the failure
	// and for the new one after it.
	if pre.PrestagedBytes != 16e9 || burst.PrestagedBytes != 0 || burst.MovedBytes != 8e9 || pre.MovedBytes != 0 {
		t.Errorf("bytes: prestage %d moved + %d pre-staged, burst %d + %d", pre.MovedBytes, pre.PrestagedBytes, burst.MovedBytes, burst.PrestagedBytes)
	}
}

// TestServeTable: the table has its header, a row per strategy in order
// with as many columns, and the legend.
func TestServeTable(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 400, Sites: 10, Seed: 4})
	lt := loadTrace(t, topo, sim.LoadOptions{Seed: 4, Duration: 4 * time.Hour, Step: 15 * time.Minute})
	rep, err := sim.Serve(topo, lt, sim.ServeOptions{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	cols := regexp.MustCompile(`\S+( \S+)*`)
	header := cols.FindAllString(lines[2], -1)
	want := []string{"STRATEGY", "SLO MET", "REPLICA-H", "BURST-H", "SHORT-H", "PEAK", "MOVED", "PRESTAGED", "DISRUPTED", "RECOVER P50", "P99", "RESTORE P50", "P99", "TIME"}
	if !slices.Equal(header, want) {
		t.Fatalf("header %q, want %q\n%s", header, want, out.String())
	}
	for k, name := range sim.ServeStrategies {
		row := cols.FindAllString(lines[3+k], -1)
		if len(row) != len(want) || row[0] != name || !strings.HasSuffix(row[1], "%") {
			t.Errorf("row %d: %q", k, row)
		}
	}
	for _, legend := range []string{"SLO MET ", "REPLICA-H ", "MOVED ", "DISRUPTED ", "RECOVER ", "RESTORE "} {
		if !strings.Contains(out.String(), "\n"+legend) {
			t.Errorf("no legend for %s", legend)
		}
	}
	var svg strings.Builder
	if err := sim.WriteServeSVG(&svg, rep); err != nil || strings.Count(svg.String(), "<rect") < 5*len(sim.ServeStrategies) {
		t.Errorf("serve plot: %v, %d bars", err, strings.Count(svg.String(), "<rect"))
	}
	svg.Reset()
	if err := sim.WriteReplicasSVG(&svg, rep); err != nil || strings.Count(svg.String(), "<polyline") != 1+2*len(sim.ServeStrategies) {
		t.Errorf("replicas plot: %v, %d lines", err, strings.Count(svg.String(), "<polyline"))
	}
}

func TestServeRejectsBadInput(t *testing.T) {
	t.Parallel()
	topo := generate(t, sim.Options{Nodes: 200, Seed: 2})
	lt := loadTrace(t, topo, sim.LoadOptions{Seed: 2, Duration: time.Hour})
	for _, c := range []struct {
		lt   *sim.LoadTrace
		o    sim.ServeOptions
		want string
	}{
		{lt, sim.ServeOptions{Strategies: []string{"magic"}}, `serving strategy "magic"`},
		{lt, sim.ServeOptions{TargetUtilization: 1.5}, "target utilisation"},
		{&sim.LoadTrace{Steps: 1, Step: time.Minute, Services: lt.Services, Pairs: []sim.LoadPair{{Site: "atlantis", Rate: []float64{1}}}}, sim.ServeOptions{}, `no site "atlantis"`},
		{&sim.LoadTrace{Steps: 1, Step: time.Minute, Failures: []sim.LoadFailure{{Kind: sim.EventNodeDown, Pair: 3}}}, sim.ServeOptions{}, "no pair 3"},
	} {
		if _, err := sim.Serve(topo, c.lt, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Serve: %v, want an error with %q", err, c.want)
		}
	}
}
