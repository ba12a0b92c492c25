package serving

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/mesh"
)

// TrafficEvery is how often a TrafficReporter reads the inference
// server's counters. It publishes only what changed materially (see
// trafficChanged), and what changed at all at most every trafficRefresh.
const TrafficEvery = 2 * time.Second

// trafficRefresh is how old a published report may grow while its
// figures drift by less than trafficChanged notices.
const trafficRefresh = 30 * time.Second

// TrafficMesh is what a TrafficReporter reads and writes of the mesh.
type TrafficMesh interface {
	Local() mesh.NodeState
	Update(fn func(*mesh.NodeState)) error
}

// TrafficReporter publishes in the node's document how busy each model
// served here is (requests/s, in flight, p50 and p99 handling time), so
// that agents forwarding requests spread them by load. A model that
// answered nothing in the last infer.TrafficWindow and has nothing in
// flight is left out: an idle node's document does not change.
type TrafficReporter struct {
	mesh    TrafficMesh
	traffic func(name, version string) infer.Traffic
	log     *slog.Logger
	last    map[string]served // by "name@version": the counter at the last reading
	sent    time.Time         // when the report in the document was written
}

type served struct {
	n     uint64
	sites map[string]uint64
	at    time.Time
}

// NewTrafficReporter returns a reporter that reads traffic (an
// infer.Server's Traffic) for the models m's document lists, and logs to
// log (nil: nowhere) a report it could not publish.
func NewTrafficReporter(m TrafficMesh, traffic func(name, version string) infer.Traffic, log *slog.Logger) *TrafficReporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &TrafficReporter{mesh: m, traffic: traffic, log: log, last: map[string]served{}}
}

// Run reports every TrafficEvery until ctx ends.
func (r *TrafficReporter) Run(ctx context.Context) {
	t := time.NewTicker(TrafficEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if err := r.Report(now); err != nil {
				r.log.Warn("publishing traffic", "err", err)
			}
		}
	}
}

// Report reads the counters as at now and publishes them if they changed
// enough since the report in the document.
func (r *TrafficReporter) Report(now time.Time) error {
	local := r.mesh.Local()
	report := r.read(local.Models, now)
	if !trafficChanged(local.Traffic, report) && (now.Sub(r.sent) < trafficRefresh || slices.EqualFunc(local.Traffic, report, mesh.ModelTraffic.Equal)) {
		return nil
	}
	r.sent = now
	return r.mesh.Update(func(s *mesh.NodeState) {
		s.Traffic = report
		s.Load.QPS = 0
		for _, t := range report {
			s.Load.QPS += t.RPS
		}
	})
}

// read turns the counters of models into a report; requests/s are over
// the time since the last reading.
func (r *TrafficReporter) read(models []string, now time.Time) []mesh.ModelTraffic {
	var out []mesh.ModelTraffic
	seen := make(map[string]bool, len(models))
	for _, m := range models {
		name, ver, _ := strings.Cut(m, "@")
		t := r.traffic(name, ver)
		seen[m] = true
		prev, ok := r.last[m]
		r.last[m] = served{t.Served, t.Sites, now}
		rps := 0.0
		var sites map[string]float64
		if ok && now.After(prev.at) && t.Served >= prev.n {
			secs := now.Sub(prev.at).Seconds()
			rps = float64(t.Served-prev.n) / secs
			sites = siteRates(prev.sites, t.Sites, secs)
		}
		if rps == 0 && t.Inflight == 0 && t.Recent == 0 {
			continue
		}
		out = append(out, mesh.ModelTraffic{Model: m, RPS: round2(rps), Inflight: max(0, t.Inflight),
			P50: round2(ms(t.P50)), P99: round2(ms(t.P99)), Sites: sites})
	}
	for m := range r.last {
		if !seen[m] {
			delete(r.last, m)
		}
	}
	return out
}

// siteRates is requests/s by client site between two readings of the
// counts, secs apart: the busiest mesh.MaxTrafficSites sites, rounded,
// without those that answered none; nil for none.
func siteRates(prev, now map[string]uint64, secs float64) map[string]float64 {
	type rate struct {
		site string
		rps  float64
	}
	var rs []rate
	for site, n := range now {
		if n > prev[site] {
			if v := round2(float64(n-prev[site]) / secs); v > 0 {
				rs = append(rs, rate{site, v})
			}
		}
	}
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b rate) int {
		if a.rps != b.rps {
			return cmp.Compare(b.rps, a.rps)
		}
		return strings.Compare(a.site, b.site)
	})
	out := make(map[string]float64, min(len(rs), mesh.MaxTrafficSites))
	for _, r := range rs[:min(len(rs), mesh.MaxTrafficSites)] {
		out[r.site] = r.rps
	}
	return out
}

// trafficChanged says whether a report differs from the published one
// enough to gossip: another set of models, requests/s (in all or from a
// client site) or a handling time off by a quarter (and by more than
// noise: 1 request/s, 1 ms), or in flight off by half (and by more than
// 2).
func trafficChanged(old, report []mesh.ModelTraffic) bool {
	if len(old) != len(report) {
		return true
	}
	for i, a := range old {
		b := report[i]
		if a.Model != b.Model || apart(a.RPS, b.RPS, 0.25, 1) || apart(a.P50, b.P50, 0.25, 1) || apart(a.P99, b.P99, 0.25, 1) ||
			apart(float64(a.Inflight), float64(b.Inflight), 0.5, 2) {
			return true
		}
		for site, v := range a.Sites {
			if apart(v, b.Sites[site], 0.25, 1) {
				return true
			}
		}
		for site, v := range b.Sites {
			if apart(v, a.Sites[site], 0.25, 1) {
				return true
			}
		}
	}
	return false
}

// apart says whether a and b differ by more than abs and by more than the
// share rel of the larger.
func apart(a, b, rel, abs float64) bool {
	d := math.Abs(a - b)
	return d > abs && d > rel*max(a, b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// round2 keeps two decimals: the document carries figures, not noise.
func round2(v float64) float64 { return math.Round(v*100) / 100 }
