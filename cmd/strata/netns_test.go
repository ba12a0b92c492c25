package main

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/testbed"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// netns is a network namespace the test made; Close deletes it.
type netns struct{ name string }

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// twoHosts makes two namespaces joined by a veth pair, 10.201.0.1/24 in
// the first and 10.201.0.2/24 in the second, or skips the test saying why
// they cannot be made here. It returns the namespaces and the name of the
// first one's end of the link.
func twoHosts(t *testing.T) (a, b netns, link string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip to make network namespaces")
	}
	var r [3]byte
	_, _ = rand.Read(r[:])
	tag := hex.EncodeToString(r[:])
	a, b = netns{"strata-" + tag + "-a"}, netns{"strata-" + tag + "-b"}
	if err := ipCmd("netns", "add", a.name); err != nil {
		t.Skipf("cannot make network namespaces here: %v", err)
	}
	t.Cleanup(func() { _ = ipCmd("netns", "del", a.name) })
	if err := ipCmd("netns", "add", b.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ipCmd("netns", "del", b.name) })
	link = "sa" + tag
	for _, c := range [][]string{
		{"link", "add", link, "netns", a.name, "type", "veth", "peer", "name", "sb" + tag, "netns", b.name},
		{"-n", a.name, "addr", "add", "10.201.0.1/24", "dev", link},
		{"-n", b.name, "addr", "add", "10.201.0.2/24", "dev", "sb" + tag},
		{"-n", a.name, "link", "set", link, "up"},
		{"-n", b.name, "link", "set", "sb" + tag, "up"},
		{"-n", a.name, "link", "set", "lo", "up"},
		{"-n", b.name, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(c...); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, link
}

// nsAgent is a strata agent in a namespace, bound to every interface. It
// logs at warn, or at $STRATA_NS_LOG (debugging a test: info).
type nsAgent struct {
	ns                netns
	name, site        string
	gossip, api, data int // ports
	join              string
	args              []string // more agent flags
	dataDir           string   // made at the first start, kept across restarts
	cgroup            string   // the host's CPU bound (testbed.Host.CPUGroup), "" for none
	proc              *proc
}

func (n *nsAgent) start(t testing.TB) {
	t.Helper()
	if n.dataDir == "" {
		n.dataDir = t.TempDir()
	}
	args := []string{"netns", "exec", n.ns.name, strataBin, "agent", "-name", n.name, "-site", n.site,
		"-data-dir", n.dataDir, "-api", fmt.Sprintf("127.0.0.1:%d", n.api),
		"-bind", fmt.Sprintf("0.0.0.0:%d", n.gossip), "-data-addr", fmt.Sprintf("0.0.0.0:%d", n.data),
		"-gossip-key", gossipKey(t), "-disable-nvml", "-log-level", cmp.Or(os.Getenv("STRATA_NS_LOG"), "warn"),
		// Bound off loopback: agents without a mesh CA need leave to start.
		"-insecure"}
	if n.join != "" {
		args = append(args, "-join", n.join)
	}
	args = append(args, n.args...)
	p := &proc{name: n.name}
	p.log = &bytes.Buffer{}
	p.cmd = testbed.InGroup(n.cgroup, "ip", args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.proc = p
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
}

// run runs the CLI in the agent's namespace against its API.
func (n *nsAgent) run(args ...string) ([]byte, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.ns.name, strataBin}, args...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("STRATA_ADDR=http://127.0.0.1:%d", n.api))
	return cmd.CombinedOutput()
}

// get runs the CLI in the agent's namespace against its API and decodes
// its -o json output into v.
func (n *nsAgent) get(t testing.TB, v any, args ...string) error {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.ns.name, strataBin}, append(args, "-o", "json")...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("STRATA_ADDR=http://127.0.0.1:%d", n.api))
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 2) {
		return err
	}
	if jerr := json.Unmarshal(out, v); jerr != nil {
		return jerr
	}
	return err // exit 2: ran, but the answer is no (degraded)
}

func (n *nsAgent) members(t testing.TB) map[string]api.Member {
	var ms []api.Member
	if err := n.get(t, &ms, "members"); err != nil {
		return nil
	}
	out := map[string]api.Member{}
	for _, m := range ms {
		out[m.Name] = m
	}
	return out
}

// seesAlive says whether the agent sees exactly n members, every one alive.
func (n *nsAgent) seesAlive(t testing.TB, count int) bool {
	ms := n.members(t)
	if len(ms) != count {
		return false
	}
	for _, m := range ms {
		if m.Status != api.StatusAlive {
			return false
		}
	}
	return true
}

// TestPartitionHealsAcrossNamespaces runs four agents on two hosts
// (network namespaces; two sites), bound to every interface as packaged.
// Each advertises the address of its route to its join peer. The link
// between the hosts goes down for longer than memberlist gossips to the
// dead (30 s): each side sees the other site unreachable and says it is
// cut off. When the link comes back, the reconnect loop merges the two
// halves into one mesh without a restart.
func TestPartitionHealsAcrossNamespaces(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a minute of real time")
	}
	nsA, nsB, link := twoHosts(t)
	agents := []*nsAgent{
		{ns: nsA, name: "a1", site: "site-a", gossip: 7946, api: 7470, data: 7471},
		{ns: nsA, name: "a2", site: "site-a", gossip: 7956, api: 7480, data: 7481, join: "10.201.0.1:7946"},
		{ns: nsB, name: "b1", site: "site-b", gossip: 7946, api: 7470, data: 7471, join: "10.201.0.1:7946"},
		{ns: nsB, name: "b2", site: "site-b", gossip: 7956, api: 7480, data: 7481, join: "10.201.0.2:7946"},
	}
	for _, a := range agents {
		a.start(t)
	}
	a1, b1 := agents[0], agents[2]
	allAlive := func(from *nsAgent) bool { return from.seesAlive(t, len(agents)) }
	dump := func() { logAgents(t, agents) }
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of four across the two hosts", func() bool {
		return allAlive(a1) && allAlive(b1)
	}, dump)
	// Bound to 0.0.0.0, each agent advertises the address of the route to
	// its join peer (or, for a1, the only one it has).
	want := map[string]string{"a1": "10.201.0.1:7946", "a2": "10.201.0.1:7956", "b1": "10.201.0.2:7946", "b2": "10.201.0.2:7956"}
	for name, m := range a1.members(t) {
		if m.Addr != want[name] {
			t.Errorf("%s advertises %s, want %s", name, m.Addr, want[name])
		}
	}

	if err := ipCmd("-n", nsA.name, "link", "set", link, "down"); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "each side to see the other site unreachable", func() bool {
		for _, pair := range [][2]any{{a1, "site-b"}, {b1, "site-a"}} {
			var sites []api.Site
			if err := pair[0].(*nsAgent).get(t, &sites, "sites"); err != nil {
				return false
			}
			ok := false
			for _, s := range sites {
				ok = ok || (s.Name == pair[1] && s.Status == api.SiteUnreachable)
			}
			if !ok {
				return false
			}
		}
		return true
	}, dump)
	var h api.Health
	if err := a1.get(t, &h, "health"); err == nil || h.Status != "degraded" || len(h.Reasons) == 0 || !strings.Contains(h.Reasons[0], "site-a is cut off") {
		t.Errorf("a1's health during the cut: %+v (%v), want degraded, site-a cut off", h, err)
	}
	// Past memberlist's GossipToTheDeadTime (30 s), after which memberlist
	// on its own never merges the halves again: the length of the cut is
	// what is under test.
	time.Sleep(time.Until(cut.Add(40 * time.Second)))
	if err := ipCmd("-n", nsA.name, "link", "set", link, "up"); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of four again after the link came back", func() bool {
		return allAlive(a1) && allAlive(b1)
	}, dump)
	t.Logf("merged %s after the link came back", time.Since(healed).Round(100*time.Millisecond))
	h = api.Health{}
	if err := a1.get(t, &h, "health"); err != nil || h.Status != "ok" {
		t.Errorf("a1's health after the heal: %+v (%v), want ok", h, err)
	}
}
