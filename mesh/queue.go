package mesh

import (
	"reflect"
	"unsafe"

	"github.com/hashicorp/memberlist"
)

// memberlist's TransmitLimitedQueue (v0.7.0, and memberlist's own queue of
// alive, suspect and dead messages is one) numbers its broadcasts and
// restarts the numbering when it runs empty; a later broadcast can then take
// the number of one still queued, and when both are of one length (the
// alive messages of nodes whose names are of one length are) the later one
// silently replaces the other in the queue. A node whose own alive message
// (a meta update's, or a refutation's) was lost this way held a newer
// incarnation than its peers did, ignored their suspicions of it instead
// of refuting them, and was failed: in BenchmarkFailureDetection, 2–3 of
// 9 agents stalled for 2s were (TestMemberlistQueueLosesBroadcast pins the
// bug).
//
// An anchor keeps a queue from ever running empty: a broadcast too large
// for any packet, which GetBroadcasts never hands out.
type anchor struct{}

func (anchor) Invalidates(memberlist.Broadcast) bool { return false }
func (anchor) Message() []byte                       { return anchorMsg }
func (anchor) Finished()                             {}

// UniqueBroadcast marks the anchor as invalidating nothing and being
// invalidated by nothing.
func (anchor) UniqueBroadcast() {}

// anchorMsg is larger than any packet (memberlist's are at most 64 KiB).
var anchorMsg = make([]byte, 1<<17)

// mlQueueOffset is where memberlist keeps its own broadcast queue in a
// Memberlist, found by reflection with its type checked; mlQueueFound is
// false when memberlist's layout differs (a new version), and its queue is
// then left unanchored.
var mlQueueOffset, mlQueueFound = func() (uintptr, bool) {
	f, found := reflect.TypeOf(memberlist.Memberlist{}).FieldByName("broadcasts")
	if !found || f.Type != reflect.TypeOf((*memberlist.TransmitLimitedQueue)(nil)) {
		return 0, false
	}
	return f.Offset, true
}()

// anchorQueue anchors memberlist's own broadcast queue; it reports whether
// it could.
func anchorQueue(ml *memberlist.Memberlist) bool {
	if !mlQueueFound {
		return false
	}
	q := *(**memberlist.TransmitLimitedQueue)(unsafePointerAt(ml, mlQueueOffset))
	if q == nil {
		return false
	}
	q.QueueBroadcast(anchor{})
	return true
}

// unsafePointerAt is the address off bytes into ml.
func unsafePointerAt(ml *memberlist.Memberlist, off uintptr) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(ml), off)
}
