// Package discover reads what a host can do: CPU, memory and OS from the Go
// runtime and /proc, GPUs through NVIDIA's management library (go-nvml) when
// it is installed, and RDMA ports from /sys/class/infiniband. Every finding
// records its source, and nothing here fails when hardware or libraries are
// absent: it reports none, and why.
package discover

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/strata-mesh/strata/mesh"
)

// Host returns CPU, memory and OS. procRoot is normally "/proc".
func Host(procRoot string) mesh.Capabilities {
	c := mesh.Capabilities{
		CPU: mesh.CPU{
			Cores:      runtime.NumCPU(),
			Millicores: int64(runtime.NumCPU()) * 1000,
			Arch:       runtime.GOARCH,
			Source:     mesh.SourceRuntime,
		},
		OS: runtime.GOOS,
	}
	if b, err := os.ReadFile(filepath.Join(procRoot, "cpuinfo")); err == nil {
		c.CPU.Model = cpuModel(b)
	}
	if total, _, err := Memory(procRoot); err == nil {
		c.Memory = mesh.Memory{Total: total, Source: mesh.SourceSysfs}
	}
	return c
}

func cpuModel(cpuinfo []byte) string {
	s := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Memory returns total and available memory in bytes from meminfo.
func Memory(procRoot string) (total, available int64, err error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0, 0, fmt.Errorf("discover: %w", err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = kb << 10
		case "MemAvailable:":
			available = kb << 10
		}
	}
	if total == 0 {
		return 0, 0, errors.New("discover: no MemTotal in meminfo")
	}
	return total, available, nil
}

// NVMLAbsent is the GPU source reported when NVIDIA's library is not
// installed: the normal case on hosts without NVIDIA GPUs.
const NVMLAbsent = "none: NVML absent"

// GPUs lists the GPUs NVML sees. lib is nvml.New() in production and a mock
// in tests. When the library is absent or fails to initialise it returns no
// GPUs and a source string that says why — never an error to log at every
// start, and never a further NVML call: go-nvml aborts the process on any
// call after a failed Init.
func GPUs(lib nvml.Interface) (gpus []mesh.GPU, source string) {
	if lib == nil {
		return nil, NVMLAbsent
	}
	ret := safeInit(lib)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, NVMLAbsent
	default:
		return nil, "none: NVML init failed: " + errString(ret)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, "none: NVML device count failed: " + errString(ret)
	}
	for i := range n {
		g := mesh.GPU{Index: i, Source: mesh.SourceNVML, Healthy: true}
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			g.Healthy = false
			gpus = append(gpus, g)
			continue
		}
		if name, ret := dev.GetName(); ret == nvml.SUCCESS {
			g.Model = name
		} else {
			g.Healthy = false
		}
		if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			g.UUID = uuid
		}
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.Memory = int64(mem.Total)
		} else {
			g.Healthy = false
		}
		if cur, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS {
			g.MIG = cur == nvml.DEVICE_MIG_ENABLE
		}
		gpus = append(gpus, g)
	}
	return gpus, mesh.SourceNVML
}

// safeInit calls Init, turning a panic from a broken library into an error
// return so discovery never takes the agent down.
func safeInit(lib nvml.Interface) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_UNKNOWN
		}
	}()
	return lib.Init()
}

func errString(r nvml.Return) string {
	return fmt.Sprintf("code %d", int(r))
}

// RDMA lists RDMA ports under sysRoot/class/infiniband (sysRoot is normally
// "/sys"). The fabric ID of an InfiniBand port is its subnet prefix (the
// first 64 bits of GID 0); of a RoCE port, "roce:" and its GID 0 prefix.
func RDMA(sysRoot string) []mesh.RDMADevice {
	base := filepath.Join(sysRoot, "class", "infiniband")
	devs, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var out []mesh.RDMADevice
	for _, d := range devs {
		ports, err := os.ReadDir(filepath.Join(base, d.Name(), "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			num, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			dir := filepath.Join(base, d.Name(), "ports", p.Name())
			r := mesh.RDMADevice{
				Name:      d.Name(),
				Port:      num,
				LinkLayer: readTrim(filepath.Join(dir, "link_layer")),
				Rate:      readTrim(filepath.Join(dir, "rate")),
				State:     portState(readTrim(filepath.Join(dir, "state"))),
				Source:    mesh.SourceSysfs,
			}
			if prefix := gidPrefix(readTrim(filepath.Join(dir, "gids", "0"))); prefix != "" {
				if r.LinkLayer == "Ethernet" {
					r.Fabric = "roce:" + prefix
				} else {
					r.Fabric = "ib:" + prefix
				}
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Port < out[j].Port
	})
	return out
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// portState turns "4: ACTIVE" into "ACTIVE".
func portState(s string) string {
	if _, v, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(v)
	}
	return s
}

// gidPrefix returns the subnet prefix of a GID ("fe80:0000:0000:0000:..."),
// as 16 hex digits, or "" for an unset GID.
func gidPrefix(gid string) string {
	h := strings.ReplaceAll(gid, ":", "")
	if len(h) != 32 {
		return ""
	}
	if _, err := hex.DecodeString(h); err != nil {
		return ""
	}
	if strings.Trim(h, "0") == "" {
		return ""
	}
	return h[:16]
}

// Fabric picks the host's fabric ID from its RDMA ports: the first active
// port's fabric, else the first port's.
func Fabric(ports []mesh.RDMADevice) string {
	for _, p := range ports {
		if p.State == "ACTIVE" && p.Fabric != "" {
			return p.Fabric
		}
	}
	for _, p := range ports {
		if p.Fabric != "" {
			return p.Fabric
		}
	}
	return ""
}
