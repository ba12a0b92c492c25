package discover

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/mesh"
)

func TestGPUsFromMockDGX(t *testing.T) {
	srv := dgxa100.New()
	gpus, source := GPUs(srv)
	if source != mesh.SourceNVML {
		t.Fatalf("source = %q, want %q", source, mesh.SourceNVML)
	}
	if len(gpus) != 8 {
		t.Fatalf("found %d GPUs, want 8", len(gpus))
	}
	for i, g := range gpus {
		if g.Index != i || g.Model != "Mock NVIDIA A100-SXM4-40GB" || g.Memory != 40<<30 || !g.Healthy || g.UUID == "" || g.Source != mesh.SourceNVML {
			t.Errorf("gpu %d = %+v", i, g)
		}
	}
}

func TestGPUsAbsentLibraryMakesNoFurtherCalls(t *testing.T) {
	calls := 0
	lib := &mock.Interface{
		InitFunc: func() nvml.Return { calls++; return nvml.ERROR_LIBRARY_NOT_FOUND },
		// Any other call would panic (nil func in the mock), as the real
		// library would abort the process.
	}
	gpus, source := GPUs(lib)
	if len(gpus) != 0 || source != NVMLAbsent || calls != 1 {
		t.Errorf("GPUs = %v, %q after %d Init calls; want none, %q, 1", gpus, source, calls, NVMLAbsent)
	}
	gpus, source = GPUs(nil)
	if len(gpus) != 0 || source != NVMLAbsent {
		t.Errorf("GPUs(nil) = %v, %q", gpus, source)
	}
}

func TestGPUsInitFailureAndUnhealthyDevice(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	if gpus, source := GPUs(lib); len(gpus) != 0 || source == NVMLAbsent || source == mesh.SourceNVML {
		t.Errorf("driver not loaded: GPUs = %v, %q; want none with the init failure named", gpus, source)
	}

	dev := &mock.Device{
		GetNameFunc:       func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetUUIDFunc:       func() (string, nvml.Return) { return "GPU-1", nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST },
		GetMigModeFunc:    func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, 0, nvml.SUCCESS },
	}
	lib = &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
	gpus, _ := GPUs(lib)
	want := []mesh.GPU{{Index: 0, UUID: "GPU-1", Model: "NVIDIA H100 80GB HBM3", MIG: true, Healthy: false, Source: mesh.SourceNVML}}
	if diff := cmp.Diff(want, gpus); diff != "" {
		t.Errorf("lost GPU (-want +got):\n%s", diff)
	}
}

func TestRDMAFromSysfs(t *testing.T) {
	got := RDMA("testdata/sys")
	want := []mesh.RDMADevice{
		{Name: "mlx5_0", Port: 1, LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", State: "ACTIVE", Fabric: "ib:fe80000000000000", Source: mesh.SourceSysfs},
		{Name: "mlx5_1", Port: 1, LinkLayer: "Ethernet", Rate: "100 Gb/sec (4X EDR)", State: "DOWN", Fabric: "roce:fe80000000000001", Source: mesh.SourceSysfs},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RDMA (-want +got):\n%s", diff)
	}
	if f := Fabric(got); f != "ib:fe80000000000000" {
		t.Errorf("Fabric = %q, want the active port's", f)
	}
	if got := RDMA("testdata/nonexistent"); got != nil {
		t.Errorf("RDMA on a host without /sys/class/infiniband = %v, want none", got)
	}
}

func TestHostFromProc(t *testing.T) {
	c := Host("testdata/proc")
	if c.Memory.Total != 16384000<<10 || c.CPU.Model != "Test CPU @ 2.00GHz" || c.CPU.Cores < 1 || c.CPU.Millicores != int64(c.CPU.Cores)*1000 {
		t.Errorf("Host = %+v", c)
	}
	total, avail, err := Memory("testdata/proc")
	if err != nil || total != 16384000<<10 || avail != 8192000<<10 {
		t.Errorf("Memory = %d, %d, %v", total, avail, err)
	}
}
