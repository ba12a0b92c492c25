package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/strata-mesh/strata/placement"
)

// LoadShapes lists the load shapes LoadTrace generates.
var LoadShapes = []string{"diurnal"}

// LoadOptions shapes a generated serving-load trace. Zero fields take the
// defaults.
type LoadOptions struct {
	// Shape is the load shape; only "diurnal" (the default) for now.
	Shape string
	// Duration is the time the trace spans, from 00:00 UTC. Default 24h.
	Duration time.Duration
	// Step is the time step: the load is constant within a step and the
	// autoscaler looks once a step. Default 5m.
	Step time.Duration
	// Services is the number of InferenceServices. Default one per edge
	// site.
	Services int
	// NodeFailures and SiteFailures are spread over the trace. Defaults
	// one node failure per hour and one edge site failure per 8 hours (at
	// most one edge site in 10); negative means none.
	NodeFailures, SiteFailures int
	// Seed drives every choice.
	Seed uint64
}

// LoadService is one InferenceService of a load trace.
type LoadService struct {
	Name string `json:"name"`
	// ModelBytes is the size of the model a replica loads.
	ModelBytes int64 `json:"model_bytes"`
	// Capacity is the requests/s one replica serves at full utilisation.
	Capacity float64 `json:"capacity_rps"`
	// ServiceTime is a replica's p99 service time with no queue.
	ServiceTime time.Duration `json:"service_time_ns"`
	// P99 is the latency SLO: round trip plus service time and queueing.
	P99 time.Duration `json:"p99_ns"`
}

// LoadPair is the load one client site puts on one service.
type LoadPair struct {
	// Service indexes LoadTrace.Services.
	Service int `json:"service"`
	// Site is the client site.
	Site string `json:"site"`
	// UTCOffset is the site's time zone.
	UTCOffset time.Duration `json:"utc_offset_ns"`
	// Peak is the expected daily peak in requests/s: the diurnal curve's
	// top, without noise or spikes.
	Peak float64 `json:"peak_rps"`
	// Rate is the requests/s in each step.
	Rate []float64 `json:"rate_rps"`
}

// LoadFailure is a failure at a point of a load trace.
type LoadFailure struct {
	At   time.Duration `json:"at_ns"`
	Kind EventKind     `json:"kind"`
	// Site is the edge site a site-down takes down (all its nodes).
	Site string `json:"site,omitempty"`
	// Pair, for a node-down, is the (service, client site) pair whose
	// oldest running replica's node fails: each strategy loses a replica
	// of the same pair at the same time, wherever it placed it.
	Pair int `json:"pair,omitempty"`
}

// LoadTrace is a generated serving load: per (service, client site) pair
// a request rate per time step, and failures.
type LoadTrace struct {
	Shape    string        `json:"shape"`
	Step     time.Duration `json:"step_ns"`
	Steps    int           `json:"steps"`
	Services []LoadService `json:"services"`
	Pairs    []LoadPair    `json:"pairs"`
	Failures []LoadFailure `json:"failures"`
}

// Duration is the time the trace spans.
func (lt *LoadTrace) Duration() time.Duration { return time.Duration(lt.Steps) * lt.Step }

// Diurnal load model constants (see the package doc).
const (
	diurnalTrough   = 0.15 // the night's share of the peak
	diurnalPeakHour = 16.0 // local hour of the peak; the trough is 12 h away
	loadNoise       = 0.1  // relative standard deviation per step
	spikesPerDay    = 0.5  // spikes per pair per day
	worldHours      = 12.0 // time zones across the 150 ms wide world
)

// diurnal is the noise-free share of the peak at local hour h.
func diurnal(h float64) float64 {
	d := 0.5 + 0.5*math.Cos(2*math.Pi*(h-diurnalPeakHour)/24)
	return diurnalTrough + (1-diurnalTrough)*d
}

// LoadTrace generates a serving load over t (see the package doc for the
// model): services with 1–3 client sites in one region, and failures.
func (t *Topology) LoadTrace(o LoadOptions) (*LoadTrace, error) {
	if o.Shape == "" {
		o.Shape = "diurnal"
	}
	if !slices.Contains(LoadShapes, o.Shape) {
		return nil, fmt.Errorf("sim: load shape %q: want one of %v", o.Shape, LoadShapes)
	}
	if o.Duration == 0 {
		o.Duration = 24 * time.Hour
	}
	if o.Step == 0 {
		o.Step = 5 * time.Minute
	}
	if o.Duration < 0 || o.Step < 0 || o.Services < 0 {
		return nil, fmt.Errorf("sim: load duration, step and services must not be negative")
	}
	if o.Step > o.Duration {
		return nil, fmt.Errorf("sim: load step %s is longer than the trace (%s)", o.Step, o.Duration)
	}
	ix := newTopoIndex(t)
	var edge []int32
	byRegion := map[string][]int32{}
	for s, site := range t.Sites {
		if site.Tier == placement.TierEdge {
			edge = append(edge, int32(s))
			byRegion[site.Region] = append(byRegion[site.Region], int32(s))
		}
	}
	if len(edge) == 0 {
		return nil, fmt.Errorf("sim: the estate has no edge site to put clients in")
	}
	if o.Services == 0 {
		o.Services = len(edge)
	}
	hours := o.Duration.Hours()
	if o.NodeFailures == 0 {
		o.NodeFailures = max(1, int(hours))
	}
	if o.SiteFailures == 0 {
		o.SiteFailures = min(max(1, int(hours/8)), len(edge)/10)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x10ad))
	lt := &LoadTrace{Shape: o.Shape, Step: o.Step, Steps: int(o.Duration / o.Step)}

	// The world's x axis spans worldHours time zones, centred on UTC.
	minX, maxX := math.Inf(1), math.Inf(-1)
	for _, c := range ix.siteCrd {
		if c != nil {
			minX, maxX = math.Min(minX, c.Vec[0]), math.Max(maxX, c.Vec[0])
		}
	}
	offset := func(s int32) time.Duration {
		c := ix.siteCrd[s]
		if c == nil || maxX <= minX {
			return 0
		}
		h := ((c.Vec[0]-minX)/(maxX-minX) - 0.5) * worldHours
		return time.Duration(math.Round(h*4)) * 15 * time.Minute
	}

	models := []int64{2e9, 4e9, 8e9, 14e9}
	for k := range o.Services {
		svc := LoadService{
			Name:        fmt.Sprintf("svc-%04d", k),
			ModelBytes:  models[rng.IntN(len(models))],
			Capacity:    float64(40 + 10*rng.IntN(9)),
			ServiceTime: time.Duration(8+rng.IntN(8)) * time.Millisecond,
			P99:         []time.Duration{50, 50, 100}[rng.IntN(3)] * time.Millisecond,
		}
		lt.Services = append(lt.Services, svc)
		first := edge[rng.IntN(len(edge))]
		sites := []int32{first}
		near := byRegion[t.Sites[first].Region]
		for range rng.IntN(3) {
			if c := near[rng.IntN(len(near))]; !slices.Contains(sites, c) {
				sites = append(sites, c)
			}
		}
		for _, s := range sites {
			// A peak of 0.5–5 replicas' worth at full utilisation.
			p := LoadPair{Service: k, Site: t.Sites[s].Name, UTCOffset: offset(s),
				Peak: svc.Capacity * (0.5 + 4.5*rng.Float64())}
			spikes := spikeTimes(rng, o.Duration, o.Step)
			for step := range lt.Steps {
				at := time.Duration(step)*o.Step + o.Step/2
				h := math.Mod((at+p.UTCOffset).Hours()+48, 24)
				r := p.Peak * diurnal(h) * math.Max(0, 1+loadNoise*rng.NormFloat64())
				for _, sp := range spikes {
					if at >= sp.from && at < sp.to {
						r *= sp.factor
					}
				}
				p.Rate = append(p.Rate, r)
			}
			lt.Pairs = append(lt.Pairs, p)
		}
	}

	// Failures: uniform over the trace after its first hour (or tenth).
	warm := min(time.Hour, o.Duration/10)
	when := func() time.Duration {
		return warm + time.Duration(rng.Int64N(int64(o.Duration-warm)+1))
	}
	clientSites := map[string]bool{}
	for _, p := range lt.Pairs {
		clientSites[p.Site] = true
	}
	var candidates []string
	for _, s := range edge {
		if clientSites[t.Sites[s].Name] {
			candidates = append(candidates, t.Sites[s].Name)
		}
	}
	for range max(0, o.SiteFailures) {
		if len(candidates) == 0 {
			break
		}
		k := rng.IntN(len(candidates))
		lt.Failures = append(lt.Failures, LoadFailure{At: when(), Kind: EventSiteDown, Site: candidates[k]})
		candidates = slices.Delete(candidates, k, k+1) // a site fails once
	}
	for range max(0, o.NodeFailures) {
		lt.Failures = append(lt.Failures, LoadFailure{At: when(), Kind: EventNodeDown, Pair: rng.IntN(len(lt.Pairs))})
	}
	slices.SortStableFunc(lt.Failures, func(a, b LoadFailure) int { return cmp.Compare(a.At, b.At) })
	return lt, nil
}

type spike struct {
	from, to time.Duration
	factor   float64
}

// spikeTimes draws a pair's spikes: about spikesPerDay a day, each ×2–3
// for 15–45 minutes.
func spikeTimes(rng *rand.Rand, d, step time.Duration) []spike {
	var out []spike
	n := int(spikesPerDay * d.Hours() / 24)
	if rng.Float64() < spikesPerDay*d.Hours()/24-float64(n) {
		n++
	}
	for range n {
		from := time.Duration(rng.Int64N(int64(d)))
		from -= from % step
		long := time.Duration(15+rng.IntN(31)) * time.Minute
		out = append(out, spike{from, from + long, 2 + rng.Float64()})
	}
	return out
}
