package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuPeriod is the period of a CPU quota, in microseconds: 10 ms, not the
// kernel's default 100 ms, so that a host over its quota waits at most a
// few milliseconds for the next period, as a small box's busy cores
// would make it, rather than stalling a tenth of a second.
const cpuPeriod = 10000

// makeCPUGroup makes the control group name whose processes together get
// at most cores CPUs (a CFS quota), with cgroup v1's cpu controller or
// cgroup v2's, and returns its directory. Where neither can be written it
// returns an error wrapping ErrUnsupported.
func makeCPUGroup(name string, cores float64) (string, error) {
	quota := int64(cores * cpuPeriod)
	if quota < 1000 {
		return "", fmt.Errorf("testbed: %g CPUs is under the 0.1 a quota can give", cores)
	}
	if v1 := "/sys/fs/cgroup/cpu"; exists(filepath.Join(v1, "cpu.cfs_quota_us")) {
		dir := filepath.Join(v1, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("%w: cannot bound CPU: %v", ErrUnsupported, err)
		}
		err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), fmt.Sprint(cpuPeriod))
		if err == nil {
			err = writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), fmt.Sprint(quota))
		}
		if err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("%w: cannot bound CPU: %v", ErrUnsupported, err)
		}
		return dir, nil
	}
	v2 := "/sys/fs/cgroup"
	ctl, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
	if err != nil || !strings.Contains(" "+string(ctl)+" ", " cpu ") {
		return "", fmt.Errorf("%w: cannot bound CPU: no cgroup cpu controller", ErrUnsupported)
	}
	if err := writeFile(filepath.Join(v2, "cgroup.subtree_control"), "+cpu"); err != nil {
		return "", fmt.Errorf("%w: cannot bound CPU: %v", ErrUnsupported, err)
	}
	dir := filepath.Join(v2, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: cannot bound CPU: %v", ErrUnsupported, err)
	}
	if err := writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, cpuPeriod)); err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("%w: cannot bound CPU: %v", ErrUnsupported, err)
	}
	return dir, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

// InGroup returns a command that runs name with args inside the control
// group dir (a Host's CPUGroup), or as exec.Command does where dir is "".
func InGroup(dir, name string, args ...string) *exec.Cmd {
	if dir == "" {
		return exec.Command(name, args...)
	}
	// The shell moves itself into the group, then becomes name.
	return exec.Command("sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, dir, name}, args...)...)
}

// Throttled reads, for a host with a CPU bound, how many quota periods
// have passed since its group was made and in how many of them its
// processes were throttled (cpu.stat's nr_periods and nr_throttled).
func (h Host) Throttled() (periods, throttled int, err error) {
	if h.CPUGroup == "" {
		return 0, 0, fmt.Errorf("testbed: %s has no CPU bound", h.Name)
	}
	stat, err := os.ReadFile(filepath.Join(h.CPUGroup, "cpu.stat"))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(stat), "\n") {
		switch f := strings.Fields(l); {
		case len(f) != 2:
		case f[0] == "nr_periods":
			periods, _ = strconv.Atoi(f[1])
		case f[0] == "nr_throttled":
			throttled, _ = strconv.Atoi(f[1])
		}
	}
	return periods, throttled, nil
}
