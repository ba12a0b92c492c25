package mesh_test

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

// TestMemberlistQueueLosesBroadcast pins the memberlist bug that makes the
// mesh leave a node's memberlist meta alone after start (see Mesh.Update):
// a broadcast that replaces the only one queued takes an ID the queue then
// hands out again, and the next broadcast of the same length silently
// replaces it. Every UpdateNode queues an alive message that replaces the
// node's previous one, and alive messages of nodes with names of one
// length are of one length; a node whose latest alive was lost this way
// holds a newer incarnation than its peers and ignores their suspicions
// instead of refuting them. When this test fails, memberlist fixed the bug.
func TestMemberlistQueueLosesBroadcast(t *testing.T) {
	t.Parallel()
	q := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 10 }, RetransmitMult: 4}
	q.QueueBroadcast(namedBroadcast{"n1", "alive n1 inc 2"})
	q.QueueBroadcast(namedBroadcast{"n1", "alive n1 inc 3"}) // replaces the only one queued
	q.QueueBroadcast(namedBroadcast{"n2", "alive n2 inc 7"})
	q.QueueBroadcast(namedBroadcast{"n3", "alive n3 inc 5"}) // same length, and the ID of n1's
	got := map[string]bool{}
	for _, b := range q.GetBroadcasts(0, 1400) {
		got[string(b)] = true
	}
	if got["alive n1 inc 3"] || len(got) != 2 || q.NumQueued() != 2 {
		t.Errorf("memberlist's queue kept every broadcast (sent %v, %d queued): the bug is fixed, and Mesh.Update may update the node's meta again", got, q.NumQueued())
	}
}
