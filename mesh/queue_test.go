package mesh

import (
	"testing"

	"github.com/hashicorp/memberlist"
)

// namedBroadcast is a broadcast that replaces a queued one of the same
// name, as memberlist's own alive, suspect and dead messages do.
type namedBroadcast struct{ name, msg string }

func (b namedBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(namedBroadcast)
	return ok && ob.name == b.name
}
func (b namedBroadcast) Name() string    { return b.name }
func (b namedBroadcast) Message() []byte { return []byte(b.msg) }
func (b namedBroadcast) Finished()       {}

// queueAndSend queues what memberlist queues when a node updates its meta
// twice (its second alive replaces its first, the only one queued) and
// then relays two other nodes' alive messages of the same length, and
// returns what the queue sends.
func queueAndSend(q *memberlist.TransmitLimitedQueue) map[string]bool {
	q.QueueBroadcast(namedBroadcast{"n1", "alive n1 inc 2"})
	q.QueueBroadcast(namedBroadcast{"n1", "alive n1 inc 3"})
	q.QueueBroadcast(namedBroadcast{"n2", "alive n2 inc 7"})
	q.QueueBroadcast(namedBroadcast{"n3", "alive n3 inc 5"}) // takes the number of n1's
	got := map[string]bool{}
	for _, b := range q.GetBroadcasts(0, 1400) {
		got[string(b)] = true
	}
	return got
}

// TestMemberlistQueueLosesBroadcast pins the memberlist bug the anchor works
// around (see anchor). When this test fails, memberlist fixed it, and the
// anchor can go.
func TestMemberlistQueueLosesBroadcast(t *testing.T) {
	t.Parallel()
	got := queueAndSend(&memberlist.TransmitLimitedQueue{NumNodes: func() int { return 10 }, RetransmitMult: 4})
	if got["alive n1 inc 3"] || len(got) != 2 {
		t.Errorf("memberlist's queue sent %v: it no longer loses n1's alive, and the anchor can go", got)
	}
}

// TestAnchoredQueueKeepsEveryBroadcast: with the anchor queued, the same
// broadcasts all go out, and the anchor never does.
func TestAnchoredQueueKeepsEveryBroadcast(t *testing.T) {
	t.Parallel()
	q := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 10 }, RetransmitMult: 4}
	q.QueueBroadcast(anchor{})
	got := queueAndSend(q)
	if !got["alive n1 inc 3"] || len(got) != 3 {
		t.Errorf("anchored queue sent %v, want the three alive messages", got)
	}
	if q.NumQueued() != 4 { // the anchor, and each message to send again
		t.Errorf("%d queued, want 4", q.NumQueued())
	}
}

// TestMemberlistQueueIsAnchored: memberlist's own queue is found (its
// layout is the one expected) and anchored.
func TestMemberlistQueueIsAnchored(t *testing.T) {
	t.Parallel()
	c := memberlist.DefaultLANConfig()
	c.Name, c.BindAddr, c.BindPort = "anchor-test", "127.0.0.1", 0
	c.LogOutput = discard{}
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if !mlQueueFound {
		t.Fatal("memberlist's broadcast queue not found: its layout changed, and its queue is not anchored")
	}
	q := *(**memberlist.TransmitLimitedQueue)(unsafePointerAt(ml, mlQueueOffset))
	before := q.NumQueued() // the node's own alive message
	if !anchorQueue(ml) || q.NumQueued() != before+1 {
		t.Errorf("memberlist's queue holds %d broadcasts after anchoring, want %d", q.NumQueued(), before+1)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
