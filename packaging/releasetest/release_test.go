package releasetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api/client"
)

// releaseDir returns the directory holding the artifacts, or skips the test
// when release tests are not asked for and there are none.
func releaseDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STRATA_RELEASE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin", "release")
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "strata_*.deb"))
	if len(debs) == 0 {
		if os.Getenv("STRATA_RELEASE_TESTS") == "1" {
			t.Fatalf("no release artifacts in %s: run make release", dir)
		}
		t.Skipf("no release artifacts in %s (make release; STRATA_RELEASE_TESTS=1 makes this a failure)", dir)
	}
	return dir
}

// artifact returns the one file in dir matching pattern.
func artifact(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) != 1 {
		t.Fatalf("want one %s in %s, found %d: %v", pattern, dir, len(m), m)
	}
	return m[0]
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestDebContents(t *testing.T) {
	dir := releaseDir(t)
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not found (apt-get install dpkg)")
	}
	want := []string{
		"./usr/bin/strata",
		"./usr/lib/strata/libonnxruntime.so.1",
		"./usr/lib/systemd/system/strata.service",
		"./etc/strata/agent.yaml",
		"./usr/share/doc/strata/agent.yaml.example",
		"./usr/share/bash-completion/completions/strata",
		"./usr/share/zsh/vendor-completions/_strata",
		"./usr/share/fish/vendor_completions.d/strata.fish",
		"./usr/share/man/man1/strata.1.gz",
	}
	elf := map[string]string{"amd64": "x86-64", "arm64": "ARM aarch64"}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			deb := artifact(t, dir, "strata_*_"+arch+".deb")
			var paths []string
			for _, line := range strings.Split(run(t, "dpkg-deb", "--contents", deb), "\n") {
				if f := strings.Fields(line); len(f) >= 6 {
					paths = append(paths, f[5])
				}
			}
			for _, p := range want {
				if !slices.Contains(paths, p) {
					t.Errorf("%s lacks %s", filepath.Base(deb), p)
				}
			}
			if got := strings.TrimSpace(run(t, "dpkg-deb", "--field", deb, "Architecture")); got != arch {
				t.Errorf("%s: Architecture %q, want %q", filepath.Base(deb), got, arch)
			}
			info := run(t, "dpkg-deb", "--info", deb)
			for _, s := range []string{"Package: strata", "postinst", "prerm", "postrm", "conffiles"} {
				if !strings.Contains(info, s) {
					t.Errorf("dpkg-deb --info %s lacks %q:\n%s", filepath.Base(deb), s, info)
				}
			}
			// The binary and the library are built for the package's
			// architecture.
			if _, err := exec.LookPath("file"); err == nil {
				x := t.TempDir()
				run(t, "dpkg-deb", "--extract", deb, x)
				for _, p := range []string{"usr/bin/strata", "usr/lib/strata/libonnxruntime.so.1"} {
					if got := run(t, "file", "-b", filepath.Join(x, p)); !strings.Contains(got, elf[arch]) {
						t.Errorf("%s in the %s .deb is %s", p, arch, got)
					}
				}
			}
		})
	}
}

// extract unpacks the tarball's member (a path under its top directory,
// "usr/bin/strata") into a temporary directory and returns its path.
func extract(t *testing.T, tarball, member string) string {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no %s", tarball, member)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, rest, ok := strings.Cut(h.Name, "/"); !ok || rest != member {
			continue
		}
		dst := filepath.Join(t.TempDir(), filepath.Base(member))
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		return dst
	}
}

// arm64 returns the command prefix that runs a linux/arm64 binary here:
// nothing on arm64, qemu-user with the arm64 C library elsewhere. It skips
// the test, saying why, where neither can run.
func arm64(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("uname", "-m").Output(); err == nil && strings.TrimSpace(string(out)) == "aarch64" {
		return nil
	}
	var qemu string
	for _, name := range []string{"qemu-aarch64-static", "qemu-aarch64"} {
		if p, err := exec.LookPath(name); err == nil {
			qemu = p
			break
		}
	}
	if qemu == "" {
		t.Skip("qemu-aarch64-static not found (scripts/install-release-debs.sh installs qemu-user-static)")
	}
	const sysroot = "/usr/aarch64-linux-gnu"
	if _, err := os.Stat(filepath.Join(sysroot, "lib", "ld-linux-aarch64.so.1")); err != nil {
		t.Skipf("the arm64 C library is not in %s (apt-get install libc6-arm64-cross)", sysroot)
	}
	if out, err := exec.Command(qemu, "--version").CombinedOutput(); err != nil {
		t.Skipf("%s cannot run here: %v\n%s", qemu, err, out)
	}
	return []string{qemu, "-L", sysroot}
}

func TestArm64Version(t *testing.T) {
	dir := releaseDir(t)
	bin := extract(t, artifact(t, dir, "strata_*_linux_arm64.tar.gz"), "usr/bin/strata")
	prefix := arm64(t)
	args := append(slices.Clone(prefix), bin, "version")
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("%s", out)
	if !strings.HasPrefix(string(out), "strata ") || !strings.Contains(string(out), "linux/arm64") {
		t.Errorf("strata version under qemu printed %q, want strata VERSION ... linux/arm64", out)
	}
}

// freePort returns a loopback port free for both TCP and UDP (gossip uses
// both on one port).
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port for TCP and UDP")
	return 0
}

type agent struct {
	name, api, gossip string
	cmd               *exec.Cmd
	out               *bytes.Buffer
	exited            chan struct{} // closed when the process has exited
}

// start runs `strata agent` (prefix runs it under qemu) with the ONNX
// Runtime library ort until the test ends.
func start(t *testing.T, prefix []string, bin, ort, name, key string, join ...string) *agent {
	t.Helper()
	gossip := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a := &agent{name: name, gossip: gossip, api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), out: &bytes.Buffer{}}
	args := append(slices.Clone(prefix), bin, "agent",
		"-name", name, "-data-dir", t.TempDir(), "-tier", "onprem", "-site", "release-test",
		"-bind", gossip, "-api", a.api, "-data-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"-gossip-key", key, "-disable-nvml", "-ort-library", ort)
	for _, j := range join {
		args = append(args, "-join", j)
	}
	a.cmd = exec.Command(args[0], args[1:]...)
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	// The agent reads these; the test's own must not leak in.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STRATA_") {
			a.cmd.Env = append(a.cmd.Env, kv)
		}
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.exited = make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(20 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, a.out)
		}
	})
	return a
}

// waitNodes polls a's /v1/nodes until it lists every name, and returns the
// arch each node reports.
func waitNodes(t *testing.T, a *agent, names []string, timeout time.Duration) map[string]string {
	t.Helper()
	c := client.New(a.api)
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		nodes, err := c.Nodes(ctx, client.NodeFilter{})
		cancel()
		if err == nil {
			arch := map[string]string{}
			for _, n := range nodes {
				arch[n.Name] = n.Capabilities.CPU.Arch
			}
			all := true
			for _, n := range names {
				if _, ok := arch[n]; !ok {
					all = false
				}
			}
			if all {
				return arch
			}
			last = fmt.Sprintf("listed %v", arch)
		} else {
			last = err.Error()
		}
		select {
		case <-a.exited:
			t.Fatalf("%s exited: %v", a.name, a.cmd.ProcessState)
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatalf("%s's /v1/nodes did not list %v within %s; last: %s", a.name, names, timeout, last)
	return nil
}

func TestArm64JoinsAmd64Mesh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two agents, one under qemu")
	}
	dir := releaseDir(t)
	amdTar := artifact(t, dir, "strata_*_linux_amd64.tar.gz")
	armTar := artifact(t, dir, "strata_*_linux_arm64.tar.gz")
	amd, amdORT := extract(t, amdTar, "usr/bin/strata"), extract(t, amdTar, "usr/lib/strata/libonnxruntime.so.1")
	arm, armORT := extract(t, armTar, "usr/bin/strata"), extract(t, armTar, "usr/lib/strata/libonnxruntime.so.1")
	prefix := arm64(t)
	key := strings.TrimSpace(run(t, amd, "keygen"))

	x := start(t, nil, amd, amdORT, "amd64-1", key)
	waitNodes(t, x, []string{"amd64-1"}, 30*time.Second)
	y := start(t, prefix, arm, armORT, "arm64-1", key, x.gossip)

	want := map[string]string{"amd64-1": "amd64", "arm64-1": "arm64"}
	for _, a := range []*agent{x, y} {
		got := waitNodes(t, a, []string{"amd64-1", "arm64-1"}, 120*time.Second)
		for n, arch := range want {
			if got[n] != arch {
				t.Errorf("%s lists %s with arch %q, want %q", a.name, n, got[n], arch)
			}
		}
	}

	// Each agent loaded the ONNX Runtime build for its architecture: the
	// inference server is up (without the library /v2 answers 503 with the
	// reason, and the agent logs "inference disabled").
	for _, a := range []*agent{x, y} {
		resp, err := http.Get("http://" + a.api + "/v2/health/ready")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: GET /v2/health/ready: %s %s", a.name, resp.Status, body)
		}
	}
}
