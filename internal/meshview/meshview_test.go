package meshview

import (
	"slices"
	"testing"

	"github.com/strata-mesh/strata/mesh"
)

// TestSnapshotFreesWhatThePolicyHolds: placing a policy again, what it
// holds counts as free for it, and what others hold does not, even a GPU
// both claim.
func TestSnapshotFreesWhatThePolicyHolds(t *testing.T) {
	t.Parallel()
	n := gpuNode("g", 16000, "A100", "A100", "A100")
	n.Assignments = []mesh.Assignment{
		{Key: "a", Accepted: true, CPU: 2000, Memory: 1 << 30, GPUs: []int{0, 2}},
		{Key: "b", Accepted: true, CPU: 3000, GPUs: []int{1, 2}},
		{Key: "c", Accepted: false, CPU: 5000, GPUs: []int{0}},
	}
	n.Load.FreeCPU, n.Load.FreeMemory = 11000, 63<<30
	for _, tc := range []struct {
		key  string
		cpu  int64
		free []bool
	}{
		{"", 11000, []bool{false, false, false}},
		{"a", 13000, []bool{true, false, false}},
		{"b", 14000, []bool{false, true, false}},
		{"c", 11000, []bool{false, false, false}},
	} {
		s, err := Snapshot([]mesh.Node{n}, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := s.Node("g")
		var free []bool
		for _, g := range got.GPUs {
			free = append(free, g.Free)
		}
		if got.FreeCPU != tc.cpu || !slices.Equal(free, tc.free) {
			t.Errorf("for %q: free CPU %d, GPUs free %v; want %d, %v", tc.key, got.FreeCPU, free, tc.cpu, tc.free)
		}
	}
}

// gpuNode is an alive onprem node of site dc with cpu millicores, 64 GiB
// and one 80 GiB GPU per model given.
func gpuNode(name string, cpu int64, models ...string) mesh.Node {
	n := mesh.Node{NodeState: mesh.NodeState{Name: name, ID: "id-" + name, Tier: "onprem", Site: "dc", Region: "dc"}, Status: mesh.StatusAlive}
	n.Capabilities.CPU.Millicores, n.Load.FreeCPU = cpu, cpu
	n.Capabilities.Memory.Total, n.Load.FreeMemory = 64<<30, 64<<30
	for i, m := range models {
		n.Capabilities.GPUs = append(n.Capabilities.GPUs, mesh.GPU{Index: i, Model: m, Memory: 80 << 30, Healthy: true})
	}
	return n
}
