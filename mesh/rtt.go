package mesh

import (
	"slices"
	"sync"
	"time"
)

// defaultRTTWindow is how many of a peer's latest RTT samples the filter
// keeps by default (about half a minute of one peer's probes in a site of
// 8, each agent probing one peer every 800ms); see rttFilter.
const defaultRTTWindow = 5

// maxRTTSample bounds an RTT sample fed to Vivaldi: no round trip within a
// site, nor across the Earth, is near it, and memberlist waits at most
// ProbeInterval times its awareness multiplier for an ack.
const maxRTTSample = 5 * time.Second

// rttFilter turns a peer's probe RTTs into the sample Vivaldi learns from:
// the least of its last few. A probe's RTT is the network's plus the time
// both ends took to get scheduled, read and answer; on a busy host the
// second dwarfs the first (two agents of one site less than 1ms apart were
// estimated 87ms apart). Scheduling only ever adds delay, so the least
// recent sample is the one nearest the network's RTT; serf's median of 3
// (which the coordinate client still applies after this) is pulled up as
// soon as most samples are late. memberlist gives the delegate no time of
// when the responder read the ping, and most of the delay on a loaded host
// comes before that read anyway (the ping waits in the socket), so it is
// not taken out of the ack; the minimum discards it instead. A real rise
// in RTT is learned once the window has moved past the older, lower
// samples. It is safe for concurrent use.
type rttFilter struct {
	window int

	mu      sync.Mutex
	samples map[string][]time.Duration // newest last, at most window
}

func newRTTFilter(window int) *rttFilter {
	return &rttFilter{window: max(window, 1), samples: map[string][]time.Duration{}}
}

// add records a sample for peer and returns the least of its last window
// samples, or false if the sample is absurd (not positive, or over
// maxRTTSample) and was not recorded.
func (f *rttFilter) add(peer string, rtt time.Duration) (time.Duration, bool) {
	if rtt <= 0 || rtt > maxRTTSample {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := append(f.samples[peer], rtt)
	if len(s) > f.window {
		s = slices.Delete(s, 0, len(s)-f.window)
	}
	f.samples[peer] = s
	return slices.Min(s), true
}
