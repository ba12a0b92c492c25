package placement_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/placement"
)

func TestBuildErrors(t *testing.T) {
	ok := box("a", placement.TierEdge, "s", "r", 1, 1, at(0, 0))
	dup := ok
	dup.ID = "other"
	badTier := box("b", "fog", "s", "r", 1, 1, at(0, 0))
	badDims := box("c", placement.TierEdge, "s", "r", 1, 1, &coordinate.Coordinate{Vec: []float64{0, 0, 0}})
	neg := box("d", placement.TierEdge, "s", "r", 1, 1, at(0, 0))
	neg.FreeCPU = -1
	var b placement.Builder
	b.Add(ok, dup, badTier, badDims, neg, placement.Node{})
	_, err := b.Build()
	if !errors.Is(err, placement.ErrInvalidSnapshot) {
		t.Fatalf("error %v, want ErrInvalidSnapshot", err)
	}
	for _, want := range []string{`"a" used twice`, `tier "fog"`, "3 dimensions", "must not be negative", "name and id are required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

func TestClientCoordinateIsMedian(t *testing.T) {
	got := placement.ClientCoordinate([]*coordinate.Coordinate{
		{Vec: []float64{0, 10}, Height: 1},
		{Vec: []float64{1, 20}, Height: 2},
		nil,
		{Vec: []float64{100, 30}, Height: 3}, // an outlier moves the median less than a mean
	})
	want := &coordinate.Coordinate{Vec: []float64{1, 20}, Height: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if placement.ClientCoordinate(nil) != nil {
		t.Error("no coordinates: want nil")
	}
}

func TestSnapshotClients(t *testing.T) {
	s := edgeScenario(t)
	// Sites and regions both get coordinates; site edge-a is the median of
	// a1 (x=0) and a2 (x=1).
	if got := s.Clients(); !cmp.Equal(got, []string{"cloud-east", "dc-1", "east", "edge-a", "edge-b", "west"}) {
		t.Errorf("clients %v", got)
	}
	rtt, err := s.RTT("edge-a", "n1")
	if err != nil || rtt != 9500*time.Microsecond {
		t.Errorf("RTT edge-a → n1 = %v, %v; want 9.5ms", rtt, err)
	}
	if _, err := s.RTT("mars", "n1"); !errors.Is(err, placement.ErrUnknownClient) {
		t.Errorf("unknown client: %v", err)
	}
	if _, err := s.RTT("edge-a", "zz"); !errors.Is(err, placement.ErrUnknownNode) {
		t.Errorf("unknown node: %v", err)
	}
}

func TestCloneAndReserve(t *testing.T) {
	s := gangScenario(t)
	want := placement.Resources{CPU: 1000, Memory: gib, GPUs: 3, GPUModel: "H100"}
	if _, err := s.Reserve("f1a", want); !errors.Is(err, placement.ErrImmutable) {
		t.Fatalf("Reserve on a built snapshot: %v, want ErrImmutable", err)
	}
	c := s.Clone()
	gpus, err := c.Reserve("f1a", want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{0, 1, 2}, gpus); diff != "" {
		t.Errorf("GPUs taken (-want +got):\n%s", diff)
	}
	n, _ := c.Node("f1a")
	if free(n) != 5 || n.FreeCPU != 127000 || n.FreeMemory != 2047*gib {
		t.Errorf("after reserving: %d GPUs, %d CPU, %d memory free", free(n), n.FreeCPU, n.FreeMemory)
	}
	// A clone of the clone sees the reservation; the original does not.
	cc := c.Clone()
	if _, err := cc.Reserve("f1a", placement.Resources{GPUs: 6}); !errors.Is(err, placement.ErrRefused) {
		t.Errorf("over-reserving: %v, want a refusal", err)
	} else {
		var r *placement.Refusal
		if !errors.As(err, &r) || r.Reason != placement.ReasonInsufficientGPU {
			t.Errorf("refusal %v, want %s", err, placement.ReasonInsufficientGPU)
		}
	}
	if orig, _ := s.Node("f1a"); free(orig) != 8 {
		t.Errorf("original snapshot changed: %d GPUs free", free(orig))
	}
	if _, err := c.Reserve("nope", want); !errors.Is(err, placement.ErrUnknownNode) {
		t.Errorf("unknown node: %v", err)
	}
}

// TestRemoteClients: a client site with no node, known only by its RTT
// from one of the nodes' sites (a site of another pool in a federated
// mesh), is that much further than the site's own clients from every
// node, and bounds latency as any client does.
func TestRemoteClients(t *testing.T) {
	t.Parallel()
	var b placement.Builder
	b.Add(box("a1", placement.TierEdge, "edge-a", "east", 4, 8, at(0, 0)),
		box("a2", placement.TierEdge, "edge-a", "east", 4, 8, at(4, 0)),
		box("c1", placement.TierCloud, "cloud", "east", 4, 8, nil))
	b.AddRemoteClient(placement.RemoteClient{Name: "edge-b", Via: "edge-a", RTT: 20 * time.Millisecond})
	b.AddRemoteClient(placement.RemoteClient{Name: "edge-a", Via: "edge-a", RTT: time.Second})     // a site of the nodes: ignored
	b.AddRemoteClient(placement.RemoteClient{Name: "edge-z", Via: "cloud", RTT: time.Millisecond}) // no coordinate in the cloud
	s, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	// edge-a's clients sit at its median, x=2: 2 ms from each node.
	for _, tc := range []struct {
		client, node string
		want         time.Duration
	}{
		{"edge-a", "a1", 2 * time.Millisecond},
		{"edge-b", "a1", 22 * time.Millisecond},
		{"edge-b", "a2", 22 * time.Millisecond},
	} {
		got, err := s.RTT(tc.client, tc.node)
		if err != nil || (got-tc.want).Abs() > time.Microsecond {
			t.Errorf("RTT %s → %s = %v, %v; want %v", tc.client, tc.node, got, err, tc.want)
		}
	}
	if _, err := s.RTT("edge-z", "a1"); !errors.Is(err, placement.ErrUnknownClient) {
		t.Errorf("a remote client through a site without coordinates: %v, want ErrUnknownClient", err)
	}
	for _, tc := range []struct {
		p99      time.Duration
		feasible bool
	}{{15 * time.Millisecond, false}, {25 * time.Millisecond, true}} {
		d := place(t, s, &placement.Request{Kind: placement.Inference, Replicas: 1, Resources: placement.Resources{CPU: 100},
			Latency: placement.Latency{P99: tc.p99, Clients: []string{"edge-b"}}})
		if d.Feasible != tc.feasible {
			t.Errorf("p99 %v from edge-b: feasible %v, want %v", tc.p99, d.Feasible, tc.feasible)
		}
	}
	// A replica per client site: edge-a's own is placed, edge-b's is out
	// of reach, and the decision says it is short.
	d := place(t, s, &placement.Request{Kind: placement.Inference, Replicas: 1, PerClientSite: true, Resources: placement.Resources{CPU: 100},
		Latency: placement.Latency{P99: 5 * time.Millisecond, Clients: []string{"edge-a", "edge-b"}}})
	if d.Feasible || d.Wanted != 2 || len(d.Placements) != 1 || d.Placements[0].Client != "edge-a" {
		t.Errorf("per client site: feasible %v, %d of %d placed (%v); want edge-a's replica only", d.Feasible, len(d.Placements), d.Wanted, d.Placements)
	}
}

// clientReq asks one replica within 50 ms of client's clients.
func clientReq(client string) *placement.Request {
	return &placement.Request{Kind: placement.Inference, Replicas: 1, Resources: placement.Resources{CPU: 100},
		Latency: placement.Latency{P99: 50 * time.Millisecond, Clients: []string{client}}}
}

// TestClientUnreachable: a remote client site that is cut off has no
// distance: a request naming it fails with ErrClientUnreachable, never
// with the RTT it had before the cut, and the site's own name still
// wins over a remote client of the same name.
func TestClientUnreachable(t *testing.T) {
	t.Parallel()
	var b placement.Builder
	b.Add(box("a1", placement.TierEdge, "edge-a", "east", 4, 8, at(0, 0)))
	b.AddRemoteClient(placement.RemoteClient{Name: "edge-b", Via: "edge-a", RTT: 20 * time.Millisecond, Unreachable: true})
	b.AddRemoteClient(placement.RemoteClient{Name: "edge-a", Via: "edge-a", Unreachable: true}) // a site of the nodes: ignored
	s, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := placement.Place(s, clientReq("edge-b")); !errors.Is(err, placement.ErrClientUnreachable) {
		t.Errorf("clients in a cut-off site: %v, want ErrClientUnreachable", err)
	}
	if d, err := placement.Place(s, clientReq("edge-a")); err != nil || !d.Feasible {
		t.Errorf("clients in the nodes' own site: %v, %v; want placed", d, err)
	}
}

// TestClientNotMeasured: a client site whose nodes have published no
// coordinate yet (agents just started) is told apart from a site nobody
// knows: the first can be asked again in a few seconds.
func TestClientNotMeasured(t *testing.T) {
	t.Parallel()
	var b placement.Builder
	b.Add(box("a1", placement.TierEdge, "edge-a", "east", 4, 8, at(0, 0)),
		box("b1", placement.TierEdge, "edge-b", "east", 4, 8, nil))
	s, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := placement.Place(s, clientReq("edge-b")); !errors.Is(err, placement.ErrClientNotMeasured) {
		t.Errorf("a site without coordinates yet: %v, want ErrClientNotMeasured", err)
	}
	if _, err := placement.Place(s, clientReq("mars")); !errors.Is(err, placement.ErrUnknownClient) || errors.Is(err, placement.ErrClientNotMeasured) {
		t.Errorf("an unknown site: %v, want ErrUnknownClient only", err)
	}
}
