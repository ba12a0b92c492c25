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
