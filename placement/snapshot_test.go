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
