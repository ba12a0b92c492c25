package federation

import "time"

// SetNewPublisher sets how long a new publisher sends its summary every
// interval, and returns a function that restores it. Only for tests that
// do not run in parallel.
func SetNewPublisher(d time.Duration) (restore func()) {
	old := newPublisher
	newPublisher = d
	return func() { newPublisher = old }
}

// TrafficByProtocol returns f's libp2p bytes since start, in plus out, per
// protocol ("" for what libp2p counts under none; default hosts only).
func TrafficByProtocol(f *Federation) map[string]int64 {
	out := map[string]int64{}
	for p, s := range f.bw.GetBandwidthByProtocol() {
		out[string(p)] += s.TotalIn + s.TotalOut
	}
	return out
}
