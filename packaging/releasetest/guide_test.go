package releasetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/internal/docrun"
	"github.com/strata-mesh/strata/internal/testbed"
)

// guideAddr is how docs/install.md's several-host guide writes the
// address of its N-th host (from 1): 10.0.0.N.
func guideAddr(n int) string { return fmt.Sprintf("10.0.0.%d", n) }

// guideHost is one host of the guide: its own network (a test bed
// namespace), hostname, and /etc, /usr and /var (overlays on the
// machine's, in memory), so the package, its configuration, its user and
// its state are that host's alone; and a working directory holding the
// release's .deb and install.sh, as downloaded.
type guideHost struct {
	name string
	bed  testbed.Host
	mnt  string // the persistent mount namespace (a bind-mounted file)
	uts  string // the persistent UTS namespace
	work string
}

// command runs script with bash in the host's namespaces, from its
// working directory, as root with a login's environment.
func (h *guideHost) command(script string) *exec.Cmd {
	cmd := exec.Command("nsenter", "--net=/run/netns/"+h.bed.NS, "--mount="+h.mnt, "--uts="+h.uts, "--wd="+h.work,
		"bash", "-c", script)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + h.work, "LANG=C.UTF-8"}
	return cmd
}

// TestInstallGuide runs docs/install.md's several-host guide as written:
// every runnable block on the host its fence names, on hosts that share
// nothing but the machine's kernel and a test bed network, with the
// release's .deb. The guide's 10.0.0.N is the N-th host named.
func TestInstallGuide(t *testing.T) {
	dir := releaseDir(t)
	if os.Geteuid() != 0 {
		t.Skip("the guide installs a package and makes namespaces: run as root")
	}
	for _, c := range []string{"nsenter", "unshare", "mount", "dpkg", "setpriv", "curl"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not found: the guide's hosts need it", c)
		}
	}
	deb := artifact(t, dir, "strata_*_"+runtime.GOARCH+".deb")
	src, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := docrun.Parse("docs/install.md", src)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cmds {
		if c.Host == "" {
			t.Fatalf("%s: docs/install.md's runnable blocks each name their host (host=NAME)", c.Where())
		}
		if !slices.Contains(names, c.Host) {
			names = append(names, c.Host)
		}
	}
	if len(names) < 2 {
		t.Fatalf("docs/install.md's guide names %d hosts; want several", len(names))
	}

	// A directory whose mounts are private, to hold the namespaces' files:
	// a persistent namespace is a bind mount, refused on a shared mount.
	root := t.TempDir()
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("mount --bind %[1]s %[1]s && mount --make-private %[1]s", root)).CombinedOutput(); err != nil {
		t.Skipf("cannot make a private mount for the hosts' namespaces: %v\n%s", err, out)
	}
	bed := testbed.Start(t, testbed.Site{Name: "lan", Hosts: len(names)})
	installSh, err := os.ReadFile("../../scripts/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]*guideHost{}
	var order []*guideHost
	t.Cleanup(func() {
		for _, h := range order {
			if t.Failed() {
				out, _ := h.command("tail -n 40 /var/log/strata/agent.log").CombinedOutput()
				t.Logf("%s (%s): /var/log/strata/agent.log:\n%s", h.name, h.bed.IP, out)
			}
			// The agent and anything else the guide left running there.
			exec.Command("sh", "-c", "ip netns pids "+h.bed.NS+" | xargs -r kill -9").Run()
		}
		for _, h := range order {
			exec.Command("umount", h.mnt).Run()
			exec.Command("umount", h.uts).Run()
		}
		exec.Command("umount", root).Run()
	})
	for i, name := range names {
		h := &guideHost{name: name, bed: bed.Host("lan", i),
			mnt: filepath.Join(root, name+".mnt"), uts: filepath.Join(root, name+".uts"), work: filepath.Join(root, name, "work")}
		hosts[name] = h
		order = append(order, h)
		mem := filepath.Join(root, name, "mem")
		for _, d := range []string{h.work, mem} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{h.mnt, h.uts} {
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := copyFile(deb, filepath.Join(h.work, filepath.Base(deb)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.work, "install.sh"), installSh, 0o755); err != nil {
			t.Fatal(err)
		}
		// The host's own /etc, /usr and /var: overlays whose changes live
		// in memory, in its mount namespace only; its own /run (no
		// systemd there, as in a container); its own hostname.
		setup := fmt.Sprintf(`set -e
hostname %[1]s
mount -t tmpfs tmpfs %[2]s
for d in etc usr var; do
	mkdir -p %[2]s/$d/up %[2]s/$d/work
	mount -t overlay overlay -o lowerdir=/$d,upperdir=%[2]s/$d/up,workdir=%[2]s/$d/work /$d
done
mount -t tmpfs tmpfs /run
`, name, mem)
		cmd := exec.Command("nsenter", "--net=/run/netns/"+h.bed.NS, "unshare", "--mount="+h.mnt, "--uts="+h.uts, "--propagation", "private", "sh", "-c", setup)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("cannot give host %s its own file system (overlay mounts): %v\n%s", name, err, out)
		}
	}

	for _, c := range cmds {
		h := hosts[c.Host]
		for _, f := range c.Files {
			from, ok := hosts[c.FilesFrom]
			if !ok {
				t.Fatalf("%s: files from %q, a host no block names", c.Where(), c.FilesFrom)
			}
			dst := filepath.Join(h.work, f)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := copyFile(filepath.Join(from.work, f), dst, 0o600); err != nil {
				t.Fatalf("%s: %v", c.Where(), err)
			}
		}
		script := c.Cmd
		for i, o := range order {
			script = strings.ReplaceAll(script, guideAddr(i+1), o.bed.IP.String())
		}
		out, err := docrun.Run(c, script, h.command)
		if err != nil {
			t.Fatalf("%s (on %s): %s\n%v\noutput:\n%s", c.Where(), c.Host, c.Cmd, err, out)
		}
		t.Logf("%s on %s: %s\n%s", c.Where(), c.Host, strings.SplitN(c.Cmd, "\n", 2)[0], out)
	}
	t.Logf("ran %d commands of docs/install.md on %d hosts", len(cmds), len(names))
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
