package mesh

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

func TestRTTFilter(t *testing.T) {
	f := newRTTFilter(3)
	ms := time.Millisecond
	for i, tc := range []struct {
		peer string
		rtt  time.Duration
		want time.Duration // 0: rejected
	}{
		{"a", 40 * ms, 40 * ms},
		{"a", 2 * ms, 2 * ms},
		{"b", 90 * ms, 90 * ms}, // each peer its own window
		{"a", 30 * ms, 2 * ms},
		{"a", 0, 0},                 // not a round trip
		{"a", -ms, 0},               // a clock step
		{"a", maxRTTSample + ms, 0}, // absurd
		{"a", 50 * ms, 2 * ms},      // 2ms is still among the last 3 kept
		{"a", 60 * ms, 30 * ms},     // ...and now it is not
		{"b", 80 * ms, 80 * ms},
	} {
		got, ok := f.add(tc.peer, tc.rtt)
		if ok != (tc.want != 0) || got != tc.want {
			t.Errorf("%d: add(%s, %v) = %v, %v; want %v", i, tc.peer, tc.rtt, got, ok, tc.want)
		}
	}
}

// TestRTTEstimateUnderSchedulingDelay simulates Vivaldi at 8 agents of one
// site (true RTT 0.5ms) on busy hosts, where most probes come back late by
// a scheduling delay of tens of milliseconds: with the filter the estimate
// between two agents stays within 3ms of the truth; fed every sample, as
// before it, it is several times that.
func TestRTTEstimateUnderSchedulingDelay(t *testing.T) {
	const n, rounds = 8, 400
	const trueRTT = 500 * time.Microsecond
	simulate := func(window int) (medianErr time.Duration) {
		rng := rand.New(rand.NewPCG(7, 11))
		clients := make([]*coordinate.Client, n)
		filters := make([]*rttFilter, n)
		for i := range clients {
			c, err := coordinate.NewClient(coordinate.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			clients[i], filters[i] = c, newRTTFilter(window)
		}
		for range rounds {
			for i := range n {
				j := (i + 1 + rng.IntN(n-1)) % n
				rtt := trueRTT
				if rng.Float64() < 0.7 { // late: both ends waited for a CPU
					rtt += time.Duration(rng.ExpFloat64() * float64(30*time.Millisecond))
				}
				sample, ok := filters[i].add(fmt.Sprint(j), rtt)
				if !ok {
					t.Fatalf("sample %v rejected", rtt)
				}
				if _, err := clients[i].Update(fmt.Sprint(j), clients[j].GetCoordinate(), sample); err != nil {
					t.Fatal(err)
				}
			}
		}
		var errs []time.Duration
		for i := range n {
			for j := range n {
				if i != j {
					errs = append(errs, (clients[i].DistanceTo(clients[j].GetCoordinate()) - trueRTT).Abs())
				}
			}
		}
		slices.Sort(errs)
		return errs[len(errs)/2]
	}
	filtered, raw := simulate(defaultRTTWindow), simulate(1)
	t.Logf("median estimate error: %v filtered, %v fed every sample", filtered, raw)
	if filtered > 3*time.Millisecond {
		t.Errorf("median estimate error %v with the filter, want ≤ 3ms", filtered)
	}
	if raw < 3*filtered {
		t.Errorf("fed every sample the error is %v, not well above the filtered %v: the simulation shows nothing", raw, filtered)
	}
}
