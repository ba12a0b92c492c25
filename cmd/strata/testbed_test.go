package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/testbed"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// TestSitesThroughRouter runs four agents on four hosts in three sites of
// the testbed, the sites joined by the userspace router with a one-way
// delay per pair. Every cross-site RTT the agents estimate (Vivaldi, fed by
// their probes) comes within 20% of the router's, twice the one-way delay,
// and the two hosts of one site are estimated close. When edge-b is cut
// off from both other sites, each side sees the other unreachable; when the
// links heal, the four are one mesh again.
func TestSitesThroughRouter(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a minute or two of real time")
	}
	bed := testbed.Start(t, testbed.Site{Name: "edge-a", Hosts: 2}, testbed.Site{Name: "edge-b", Hosts: 1}, testbed.Site{Name: "cloud", Hosts: 1})
	oneWay := map[[2]string]time.Duration{
		{"edge-a", "edge-b"}: 10 * time.Millisecond,
		{"edge-a", "cloud"}:  20 * time.Millisecond,
		{"edge-b", "cloud"}:  30 * time.Millisecond,
	}
	for l, d := range oneWay {
		bed.SetLink(l[0], l[1], d, 0)
	}
	agents := startPool(t, bed, []string{"edge-a", "edge-b", "cloud"}, func(site string) []string {
		tier := "edge"
		if site == "cloud" {
			tier = "cloud"
		}
		return []string{"-tier", tier, "-insecure"}
	})
	dump := func() { logAgents(t, agents) }
	allAlive := func(from *nsAgent) bool { return from.seesAlive(t, len(agents)) }
	ea, eb := agents[0], agents[2]
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of four across three sites", func() bool {
		return allAlive(ea) && allAlive(eb)
	}, dump)

	type pair struct {
		a, b string
		want time.Duration // 0: the same site
	}
	pairs := []pair{
		{"edge-a-1", "edge-a-2", 0},
		{"edge-a-1", "edge-b-1", 2 * oneWay[[2]string{"edge-a", "edge-b"}]},
		{"edge-a-2", "edge-b-1", 2 * oneWay[[2]string{"edge-a", "edge-b"}]},
		{"edge-a-1", "cloud-1", 2 * oneWay[[2]string{"edge-a", "cloud"}]},
		{"edge-b-1", "cloud-1", 2 * oneWay[[2]string{"edge-b", "cloud"}]},
	}
	var last []string
	start := time.Now()
	meshtest.Poll(t, 2*time.Minute, time.Second, "RTT estimates within 20% of the router's delays", func() bool {
		last = last[:0]
		ok := true
		for _, p := range pairs {
			var r api.RTT
			if err := ea.get(t, &r, "rtt", p.a, p.b); err != nil {
				return false
			}
			got := r.Duration()
			// The same site: well under the nearest other site (the
			// estimate adds both nodes' Vivaldi heights, a few ms).
			good := got < 10*time.Millisecond
			if p.want > 0 {
				good = math.Abs(float64(got-p.want)) <= 0.2*float64(p.want)
			}
			ok = ok && good
			last = append(last, fmt.Sprintf("%s↔%s %.1fms (router %s)", p.a, p.b, r.Millis, p.want))
		}
		return ok
	}, func() { t.Logf("last estimates: %s", strings.Join(last, "; ")) })
	t.Logf("estimates within 20%% after %s: %s", time.Since(start).Round(time.Second), strings.Join(last, "; "))

	bed.Cut("edge-b", "edge-a")
	bed.Cut("edge-b", "cloud")
	unreachable := func(from *nsAgent, site string) bool {
		var sites []api.Site
		if err := from.get(t, &sites, "sites"); err != nil {
			return false
		}
		for _, s := range sites {
			if s.Name == site {
				return s.Status == api.SiteUnreachable
			}
		}
		return false
	}
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "edge-b cut off: unreachable from edge-a, and edge-a from edge-b", func() bool {
		return unreachable(ea, "edge-b") && unreachable(eb, "edge-a") && unreachable(eb, "cloud")
	}, dump)
	bed.Heal("edge-b", "edge-a")
	bed.Heal("edge-b", "cloud")
	healed := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of four again after the heal", func() bool {
		return allAlive(ea) && allAlive(eb)
	}, dump)
	t.Logf("one mesh again %s after the heal", time.Since(healed).Round(100*time.Millisecond))
}

// inHost returns an HTTP client whose connections are made in a testbed
// host's namespace (its loopback is the agent's API).
func inHost(h testbed.Host) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := h.Do(func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

// TestCutSiteKeepsServing: a site cut off from the rest of the mesh for 2
// minutes (STRATA_CUT_FOR) keeps serving the model placed on it, also
// after its agent restarts while cut off (offline autonomy), and places
// within itself what is applied to it meanwhile, as the rest of the mesh
// does. Seen from the other side, the site is unreachable with no RTT,
// plan refuses an SLO for its clients that only its nodes met, and its
// replica stays where it is (no constraint holds it). After the heal the
// mesh is whole again, every agent sees the same placements, each
// serving, and a request at any site's agent is answered.
func TestCutSiteKeepsServing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("three minutes of real time")
	}
	if os.Getenv("STRATA_ORT_LIB") == "" {
		t.Skip("STRATA_ORT_LIB is not set: run `make setup-ort`")
	}
	bed := testbed.Start(t, testbed.Site{Name: "edge-a", Hosts: 1}, testbed.Site{Name: "edge-b", Hosts: 1}, testbed.Site{Name: "cloud", Hosts: 1})
	bed.SetLink("edge-a", "edge-b", 5*time.Millisecond, 0)
	bed.SetLink("edge-a", "cloud", 10*time.Millisecond, 0)
	bed.SetLink("edge-b", "cloud", 10*time.Millisecond, 0)
	pki := bedPKI(t)
	agents := startPool(t, bed, []string{"cloud", "edge-a", "edge-b"}, func(site string) []string {
		tier := "edge"
		if site == "cloud" {
			tier = "cloud"
		}
		// Every agent may own policies: a site cut off places on its own,
		// and with a mesh CA only controllers write placements.
		return append([]string{"-tier", tier, "-controller", "true"}, pki...)
	})
	cloud, eb := agents[0], agents[2]
	dump := func() { logAgents(t, agents) }
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of three sites", func() bool {
		return len(cloud.members(t)) == 3 && len(eb.members(t)) == 3
	}, dump)

	b, layers, err := onnx.RandomMLP(5, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, svc := filepath.Join(dir, "model.onnx"), filepath.Join(dir, "svc.yaml")
	os.WriteFile(model, b, 0o600)
	os.WriteFile(svc, []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: local}\nspec:\n  model: {name: local, version: \"1\"}\n  replicas: 1\n  resources: {cpu: 10m, memory: 16Mi}\n  constraints: ['node.site == \"edge-b\"']\n"), 0o600)
	for _, args := range [][]string{{"push", model, "--name", "local", "--version", "1"}, {"apply", "-f", svc}} {
		if out, err := cloud.run(args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	x := []float32{0.5, -1, 2, 0.25}
	want := onnx.Predict(layers, x, 1)[0]
	req, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 4}, "datatype": "FP32", "data": x}}})
	servedAt := func(h testbed.Host) bool {
		resp, err := inHost(h).Post("http://127.0.0.1:7470/v2/models/local/infer", "application/json", bytes.NewReader(req))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var out struct {
			Outputs []struct {
				Data []float64 `json:"data"`
			} `json:"outputs"`
		}
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&out) == nil &&
			len(out.Outputs) == 1 && len(out.Outputs[0].Data) == 1 && math.Abs(out.Outputs[0].Data[0]-float64(want)) < 1e-4
	}
	served := func() bool { return servedAt(bed.Host("edge-b", 0)) }
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "the model served at edge-b", served, dump)

	placements := func(a *nsAgent) map[string]string { return placementStates(t, a) }
	serving := func(a *nsAgent, name string) bool {
		p := placements(a)[name]
		return strings.HasPrefix(p, "placed ") && strings.Contains(p, ":serving") && !strings.Contains(p, ":loading") && !strings.Contains(p, ":failed")
	}
	where := func(a *nsAgent, name string) string { return placedWhere(t, a, name) }
	// Only edge-b's node is within 3 ms of edge-b's clients; nothing else
	// holds the replica there.
	nearB := "  latency: {p99: 3ms, clients: [edge-b]}\n"
	applyService(t, cloud, "svc-near-b", "local", nearB)
	var before string
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "svc-near-b serving in edge-b", func() bool {
		before = where(cloud, "svc-near-b")
		return serving(cloud, "svc-near-b") && strings.HasSuffix(before, "["+eb.name+"]")
	}, func() {
		out, _ := cloud.run("placements", "-o", "wide")
		t.Logf("svc-near-b: %s; placements:\n%s", before, out)
		dump()
	})

	bed.Cut("edge-b", "edge-a")
	bed.Cut("edge-b", "cloud")
	cutAt := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "edge-b to see the other sites unreachable", func() bool {
		var sites []api.Site
		if eb.get(t, &sites, "sites") != nil {
			return false
		}
		n := 0
		for _, s := range sites {
			if s.Status == api.SiteUnreachable {
				n++
			}
		}
		return n == 2
	}, dump)
	if !served() {
		t.Error("edge-b stopped serving when it was cut off")
	}
	// The other side tells the cut as it is: edge-b unreachable, no
	// distance, and an SLO only its nodes met cannot be met (plan exits 2).
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "the cloud to see edge-b unreachable, with no RTT", func() bool {
		var sites []api.Site
		if cloud.get(t, &sites, "sites") != nil {
			return false
		}
		for _, s := range sites {
			if s.Name == "edge-b" {
				return s.Status == api.SiteUnreachable && s.RTTMillis == nil
			}
		}
		return false
	}, dump)
	out, err := cloud.run("plan", "-f", serviceFile(t, "plan-near-b", "local", nearB))
	if code := exitCode(err); code != 2 {
		t.Errorf("plan at the cloud for edge-b's clients during the cut: exit %d (%v), want 2\n%s", code, err, out)
	}
	t.Logf("plan at the cloud for edge-b's clients during the cut:\n%s", out)
	// Restarted while cut off: it serves from what it holds.
	eb.proc.cmd.Process.Signal(syscall.SIGTERM)
	eb.proc.cmd.Wait()
	eb.join = "" // nothing to join while cut off; its store knows the mesh
	eb.start(t)
	restarted := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "the model served at edge-b after its restart while cut off", served, dump)
	t.Logf("edge-b served %s after its restart while cut off", time.Since(restarted).Round(100*time.Millisecond))

	// Each side places what is applied to it while the cut lasts: edge-b a
	// service pinned to edge-b, the rest a service that may run anywhere.
	applyService(t, eb, "svc-island", "local", "  constraints: ['node.site == \"edge-b\"']\n")
	applyService(t, cloud, "svc-main", "local", "  constraints: ['node.site != \"edge-b\"']\n")
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "svc-island serving in edge-b and svc-main on the other side, during the cut", func() bool {
		return serving(eb, "svc-island") && serving(cloud, "svc-main")
	}, dump)
	if _, ok := placements(eb)["svc-main"]; ok {
		t.Error("edge-b saw svc-main across the cut")
	}
	// Hold the cut for 2 minutes: well past memberlist's 30s of gossip to
	// the dead, so only the reconnect loop can merge the two sides again.
	// Every 5 s, svc-near-b is where it was on both sides. The sleep is
	// the cut's length, which is what is under test.
	for hold := cutFor(2 * time.Minute); time.Since(cutAt) < hold; time.Sleep(min(5*time.Second, time.Until(cutAt.Add(hold)))) {
		if got, gotB := where(cloud, "svc-near-b"), where(eb, "svc-near-b"); got != before || gotB != before {
			t.Fatalf("%s into the cut, svc-near-b is at %q seen from the cloud and %q from edge-b; before the cut %q", time.Since(cutAt).Round(time.Second), got, gotB, before)
		}
	}

	bed.Heal("edge-b", "edge-a")
	bed.Heal("edge-b", "cloud")
	healed := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh again after the heal", func() bool {
		return cloud.seesAlive(t, 3) && eb.seesAlive(t, 3) && served()
	}, dump)
	merged := time.Since(healed)
	// Reconciled: every agent sees the same placements, each serving.
	var last []map[string]string
	meshtest.Poll(t, 60*time.Second, 500*time.Millisecond, "the placements reconciled after the heal", func() bool {
		last = nil
		for _, a := range agents {
			last = append(last, placements(a))
		}
		for _, p := range last[1:] {
			if !maps.Equal(p, last[0]) {
				return false
			}
		}
		return len(last[0]) == 4 && serving(eb, "local") && serving(eb, "svc-island") && serving(eb, "svc-main") && serving(eb, "svc-near-b")
	}, func() { t.Logf("placements per agent: %v", last); dump() })
	if got := where(cloud, "svc-near-b"); got != before {
		t.Errorf("svc-near-b moved to %q after the heal, from %q", got, before)
	}
	for _, site := range []string{"cloud", "edge-a", "edge-b"} {
		if !servedAt(bed.Host(site, 0)) {
			t.Errorf("a request at %s's agent after the heal was not answered", site)
		}
	}
	t.Logf("after a %s cut: one mesh %s after the heal, placements reconciled %s after it: %v", healed.Sub(cutAt).Round(time.Second),
		merged.Round(100*time.Millisecond), time.Since(healed).Round(100*time.Millisecond), last[0])
}

// TestFederatedSites runs five sites of the testbed as five pools joined
// by federation over libp2p: edge-a and edge-b of two hosts each, a cloud
// host, and edge-c and edge-d each behind its own NAT (no inbound port),
// with 10–30 ms between sites. Each agent joins only its own site and
// names the cloud agent as its federation peer. Every agent sees its own
// site's members and the other sites through their summaries; a policy
// applied in edge-a is placed by edge-a and its records reach every site;
// one no node of edge-a can take is handed to the cloud; blobs are pulled
// across sites, NATs included, between the two NATs over a hole their
// gateways punched (again, after their first punches failed); the
// gateways' pings measure the router's round trips, over direct paths
// only; a site cut off is unreachable to the others (and
// its agents say they are degraded) with no RTT, plan refuses what only
// it could serve, its replica stays where it is through a 60 s cut
// (STRATA_CUT_FOR), a policy applied meanwhile reaches it after the heal,
// every agent then shows the same placement states, and a request at any
// site's agent is answered.
func TestFederatedSites(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a minute or two of real time")
	}
	bed := testbed.Start(t, testbed.Site{Name: "edge-a", Hosts: 2}, testbed.Site{Name: "edge-b", Hosts: 2}, testbed.Site{Name: "cloud", Hosts: 1},
		testbed.Site{Name: "edge-c", Hosts: 1, NAT: true}, testbed.Site{Name: "edge-d", Hosts: 1, NAT: true})
	bed.SetLink("edge-a", "edge-b", 10*time.Millisecond, 0)
	bed.SetLink("edge-a", "cloud", 20*time.Millisecond, 0)
	bed.SetLink("edge-b", "cloud", 30*time.Millisecond, 0)
	for _, s := range []string{"edge-a", "edge-b", "cloud", "edge-d"} {
		bed.SetLink("edge-c", s, 15*time.Millisecond, 0)
		bed.SetLink("edge-d", s, 15*time.Millisecond, 0)
	}
	// edge-c and edge-d, both behind NATs, meet first through the cloud's
	// relay while their own link is down: the hole punches libp2p tries
	// then fail, and their gateways punch again (see below).
	bed.Cut("edge-c", "edge-d")
	var agents []*nsAgent
	dump := func() { logAgents(t, agents) }
	fed := append([]string{"-federation-listen", "/ip4/0.0.0.0/tcp/7950"}, bedPKI(t)...)
	ch := bed.Host("cloud", 0)
	// Every address here is in 10/8, where AutoNAT cannot tell a public
	// host from a private one: the cloud agent is told it is public (a
	// relay for the sites behind NATs), and agents behind NATs that they
	// are.
	cloud := &nsAgent{ns: netns{ch.NS}, name: ch.Name, site: "cloud", gossip: 7946, api: 7470, data: 7471,
		args: append([]string{"-tier", "cloud", "-federation-reachability", "public"}, fed...)}
	cloud.start(t)
	agents = append(agents, cloud)
	var peerAddr string
	meshtest.Poll(t, 30*time.Second, 250*time.Millisecond, "the cloud agent to run a federation gateway", func() bool {
		var n api.Node
		if cloud.get(t, &n, "node", ch.Name) != nil {
			return false
		}
		for _, a := range n.Addrs.Federation {
			if strings.HasPrefix(a, "/ip4/"+ch.IP.String()+"/tcp/7950/") {
				peerAddr = a
			}
		}
		return peerAddr != ""
	}, dump)
	for _, site := range []string{"edge-a", "edge-b", "edge-c", "edge-d"} {
		seed := bed.Host(site, 0)
		for _, h := range bed.Hosts(site) {
			a := &nsAgent{ns: netns{h.NS}, name: h.Name, site: site, gossip: 7946, api: 7470, data: 7471,
				// A site places within itself: with a mesh CA it needs a
				// controller-capable agent.
				args: append([]string{"-tier", "edge", "-controller", "true", "-federation-peer", peerAddr}, fed...)}
			if bed.PublicIP(site) != nil {
				a.args = append(a.args, "-federation-reachability", "private")
			}
			if h.Name != seed.Name {
				a.join = seed.IP.String() + ":7946"
			}
			a.start(t)
			agents = append(agents, a)
		}
	}
	ea, eb2 := agents[1], agents[4]
	sitesOf := func(from *nsAgent) map[string]api.Site {
		var sites []api.Site
		if from.get(t, &sites, "sites") != nil {
			return nil
		}
		out := map[string]api.Site{}
		for _, s := range sites {
			out[s.Name] = s
		}
		return out
	}
	start := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "each agent to see its own site's members and the other four sites", func() bool {
		for _, a := range agents {
			if !a.seesAlive(t, len(bed.Hosts(a.site))) {
				return false
			}
			sites := sitesOf(a)
			if len(sites) != 5 {
				return false
			}
			for name, s := range sites {
				via := api.ViaFederation
				if name == a.site {
					via = api.ViaPool
				}
				if s.Status != api.SiteReachable || s.Via != via {
					return false
				}
			}
		}
		return true
	}, dump)
	t.Logf("five federated sites after %s", time.Since(start).Round(100*time.Millisecond))
	// Still only relayed to each other 15 s after their relayed connection
	// opened, the gateway of the two with the lower peer ID opens it again
	// (its direct dial fails: the other is behind a NAT), for the other to
	// punch alone; the link heals after that, and a punch gets through.
	repunched := func() float64 {
		var n float64
		for _, site := range []string{"edge-c", "edge-d"} {
			n += sumMetric(hostMetrics(t, bed.Host(site, 0)), `strata_federation_relayed_upgrades_total{how="repunched"}`)
		}
		return n
	}
	meshtest.Poll(t, 60*time.Second, 500*time.Millisecond, "edge-c's or edge-d's gateway to open their relayed connection again", func() bool {
		return repunched() > 0
	}, dump)
	bed.Heal("edge-c", "edge-d")
	healedCD := time.Now()

	dir := t.TempDir()
	placedBy := func(from *nsAgent, name string) string {
		var ps []api.PlacementStatus
		if from.get(t, &ps, "placements") != nil {
			return ""
		}
		for _, p := range ps {
			if p.Name == name {
				return p.Owner
			}
		}
		return ""
	}
	applyService(t, ea, "svc-a", "m", "")
	applyService(t, agents[5], "svc-c", "m", "") // behind the NAT
	meshtest.Poll(t, 30*time.Second, 250*time.Millisecond, "svc-a placed by edge-a and svc-c by edge-c, both seen in every site", func() bool {
		for _, a := range agents {
			if !strings.HasPrefix(placedBy(a, "svc-a"), "edge-a-") || placedBy(a, "svc-c") != "edge-c-1" {
				return false
			}
		}
		return true
	}, dump)
	// A policy no node of edge-a can take goes to the site whose summary
	// shows room for it, and that site places it.
	handed := time.Now()
	applyService(t, ea, "svc-cloud", "m", "  constraints: ['node.site == \"cloud\"']\n")
	meshtest.Poll(t, 30*time.Second, 250*time.Millisecond, "svc-cloud, applied in edge-a, handed to the cloud and placed there, seen in edge-a", func() bool {
		var pols []api.Policy
		resp, err := inHost(bed.Host("edge-a", 0)).Get("http://127.0.0.1:7470/v1/policies")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&pols) != nil {
			return false
		}
		for _, p := range pols {
			if p.Name == "svc-cloud" && (p.Site != "cloud" || p.HandedFrom != "edge-a") {
				return false
			}
		}
		return placedBy(ea, "svc-cloud") == ch.Name
	}, dump)
	t.Logf("svc-cloud handed from edge-a to the cloud and placed there %s after the apply", time.Since(handed).Round(100*time.Millisecond))

	// Blobs cross sites: a dataset pushed in the cloud is pulled in edge-a
	// straight over QUIC; one pushed behind the NAT is pulled in the cloud
	// over libp2p (the cloud cannot dial edge-c's data address), through
	// the connection edge-c's gateway opened to the cloud.
	pullAcross := func(from, to *nsAgent, toHost testbed.Host, name string, wantRelayed bool) {
		t.Helper()
		data := make([]byte, 3<<20+5)
		var seed [32]byte // one blob per name: equal bytes would be one digest, held wherever either was pulled
		copy(seed[:], name)
		rand.NewChaCha8(seed).Read(data)
		f := filepath.Join(dir, name+".bin")
		os.WriteFile(f, data, 0o600)
		if out, err := from.run("push", f, "--kind", "dataset", "--name", name, "--version", "1"); err != nil {
			t.Fatalf("push %s at %s: %v\n%s", name, from.name, err, out)
		}
		relayed := func() float64 {
			return sumMetric(hostMetrics(t, toHost), "strata_dataplane_relayed_requests_total")
		}
		before, start := relayed(), time.Now()
		var out []byte
		var took time.Duration
		// The manifest and the holder's site summary (within 5s) cross
		// separately: a pull before both arrived finds no holder.
		meshtest.Poll(t, 60*time.Second, time.Second, name+" pulled at "+to.name, func() bool {
			var err error
			t0 := time.Now()
			out, err = to.run("pull", "--kind", "dataset", name+":1", "--output", filepath.Join(dir, name+".pulled"))
			took = time.Since(t0)
			return err == nil
		}, func() { t.Logf("last pull: %s", out); dump() })
		got, _ := os.ReadFile(filepath.Join(dir, name+".pulled"))
		if !bytes.Equal(got, data) {
			t.Fatalf("%s pulled at %s differs from the pushed bytes", name, to.name)
		}
		n := relayed() - before
		t.Logf("%s: pushed at %s, pulled at %s %s after the push (the pull that got it took %s), %v requests over libp2p",
			name, from.name, to.name, time.Since(start).Round(100*time.Millisecond), took.Round(100*time.Millisecond), n)
		if wantRelayed != (n > 0) {
			t.Errorf("%s: %v data-plane requests went over libp2p, want relayed=%v", name, n, wantRelayed)
		}
	}
	pullAcross(cloud, ea, bed.Host("edge-a", 0), "from-cloud", false)
	pullAcross(agents[5], cloud, ch, "from-behind-nat", true)
	// Between two sites behind NATs neither can dial the other: their
	// gateways first reach each other through the circuit relays they
	// reserved on the cloud agent, and libp2p punches a direct hole
	// through both NATs from there (DCUtR); it failed while their link was
	// cut, and succeeds after the heal (libp2p's retries, or the gateways'
	// next look). Once edge-d's pings to edge-c go direct, a blob's bytes
	// do not cross the cloud agent.
	meshtest.Poll(t, 90*time.Second, 250*time.Millisecond, "edge-d to reach edge-c directly, through both NATs", func() bool {
		return sitesOf(agents[6])["edge-c"].Path == api.PathDirect
	}, dump)
	t.Logf("edge-d reaches edge-c directly %s after their link healed", time.Since(healedCD).Round(100*time.Millisecond))
	pullAcross(agents[5], agents[6], bed.Host("edge-d", 0), "nat-to-nat", true)
	streams := hostMetrics(t, bed.Host("edge-d", 0))
	direct, relayed := sumMetric(streams, `strata_federation_data_streams_total{path="direct"}`), sumMetric(streams, `strata_federation_data_streams_total{path="relayed"}`)
	t.Logf("edge-d's data streams to edge-c: %v direct (punched), %v through the relay", direct, relayed)
	for _, site := range []string{"edge-c", "edge-d"} {
		out, in, refused := bed.NATStats(site)
		t.Logf("%s's NAT: %d packets out, %d answers in, %d refused", site, out, in, refused)
	}
	if direct == 0 {
		t.Errorf("edge-d pulled from edge-c only through the relay (%v streams): no hole punched between the NATs", relayed)
	}

	// From edge-a, the round trips to the other sites are the router's
	// (twice its one-way delays: 20, 40, 30 and 30 ms) within 20%: the
	// medians of edge-a's publisher's pings, or the sites' WAN coordinates
	// where it has not pinged a site lately. edge-c and edge-d, behind
	// their NATs, may first be reached through the cloud's relay (70 ms):
	// they then dial edge-a's gateways directly.
	rtts := func() map[string]float64 {
		out := map[string]float64{}
		for name, s := range sitesOf(ea) {
			if s.RTTMillis != nil {
				out[name] = *s.RTTMillis
			}
		}
		return out
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= want/5 }
	meshtest.Poll(t, 60*time.Second, time.Second, "edge-a's RTTs to edge-b (20 ms), the cloud (40 ms), edge-c and edge-d (30 ms) within 20%, none relayed", func() bool {
		r := rtts()
		for _, s := range sitesOf(ea) {
			if s.Path == api.PathRelayed {
				return false
			}
		}
		return near(r["edge-b"], 20) && near(r["cloud"], 40) && near(r["edge-c"], 30) && near(r["edge-d"], 30)
	}, func() { t.Logf("edge-a's estimates: %v, sites %+v", rtts(), sitesOf(ea)); dump() })
	upgrades := func(site string) string {
		m := hostMetrics(t, bed.Host(site, 0))
		return fmt.Sprintf("%v dialed, %v repunched", sumMetric(m, `strata_federation_relayed_upgrades_total{how="dialed"}`), sumMetric(m, `strata_federation_relayed_upgrades_total{how="repunched"}`))
	}
	t.Logf("edge-a's RTTs to the other sites (ms): %v; relayed connections replaced: edge-c %s, edge-d %s", rtts(), upgrades("edge-c"), upgrades("edge-d"))

	// Latency across sites, from the WAN coordinates: a service for
	// edge-b's clients within 50 ms is placed in edge-a, 20 ms from them,
	// where it was applied; one within 15 ms, applied in the cloud (60 ms
	// from edge-b), is handed to edge-b itself.
	placement := func(from *nsAgent, name string) (owner string, nodes []string, msg string) {
		var ps []api.PlacementStatus
		if from.get(t, &ps, "placements") != nil {
			return "", nil, ""
		}
		for _, p := range ps {
			if p.Name == name {
				for _, n := range p.Nodes {
					nodes = append(nodes, n.Name)
				}
				return p.Owner, nodes, p.Message
			}
		}
		return "", nil, ""
	}
	inSite := func(site string, nodes []string) bool {
		return len(nodes) == 1 && strings.HasPrefix(nodes[0], site+"-")
	}
	// plan says where an apply would send it.
	closeSpec := "  latency: {p99: 15ms, clients: [edge-b]}\n"
	if out, err := cloud.run("plan", "-f", serviceFile(t, "svc-for-b-close", "m", closeSpec)); err != nil || !strings.Contains(string(out), "it would be handed to site edge-b") {
		t.Errorf("plan svc-for-b-close at the cloud: %v\n%s", err, out)
	}
	latency := time.Now()
	applyService(t, ea, "svc-for-b-near", "m", "  latency: {p99: 50ms, clients: [edge-b]}\n")
	applyService(t, cloud, "svc-for-b-close", "m", closeSpec)
	var last [2]string
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "svc-for-b-near placed in edge-a, svc-for-b-close handed to edge-b and placed there", func() bool {
		owner, nodes, msg := placement(ea, "svc-for-b-near")
		last[0] = fmt.Sprintf("svc-for-b-near: %s %v %s", owner, nodes, msg)
		near := strings.HasPrefix(owner, "edge-a-") && inSite("edge-a", nodes)
		owner, nodes, msg = placement(ea, "svc-for-b-close")
		last[1] = fmt.Sprintf("svc-for-b-close: %s %v %s", owner, nodes, msg)
		return near && strings.HasPrefix(owner, "edge-b-") && inSite("edge-b", nodes)
	}, func() { t.Logf("last seen in edge-a: %q", last); dump() })
	t.Logf("latency-bound services placed across sites %s after the applies: %q", time.Since(latency).Round(100*time.Millisecond), last)

	var ask func(testbed.Host) (bool, string)
	if os.Getenv("STRATA_ORT_LIB") != "" {
		ask = serveAcrossSites(t, ea, eb2, bed.Host("edge-b", 1), dump)
	}
	where := func(a *nsAgent, name string) string { return placedWhere(t, a, name) }
	before := where(ea, "svc-for-b-close")

	for _, s := range []string{"edge-a", "cloud", "edge-c", "edge-d"} {
		bed.Cut("edge-b", s)
	}
	cutAt := time.Now()
	meshtest.Poll(t, 90*time.Second, 250*time.Millisecond, "edge-b unreachable with no RTT from edge-a, and the others from edge-b", func() bool {
		var h api.Health
		_ = eb2.get(t, &h, "health") // exit 2 when degraded
		b := sitesOf(ea)["edge-b"]
		return b.Status == api.SiteUnreachable && b.RTTMillis == nil && sitesOf(eb2)["edge-a"].Status == api.SiteUnreachable &&
			sitesOf(eb2)["cloud"].Status == api.SiteUnreachable && h.Status == "degraded"
	}, dump)
	t.Logf("edge-b unreachable %s after the cut", time.Since(cutAt).Round(100*time.Millisecond))
	// The SLO for edge-b's clients that was handed to edge-b cannot be
	// met now: plan says so (exit 2) rather than hand it over the cut.
	if out, err := cloud.run("plan", "-f", serviceFile(t, "svc-for-b-close-2", "m", closeSpec)); exitCode(err) != 2 || !strings.Contains(string(out), "unreachable") {
		t.Errorf("plan at the cloud for edge-b's clients during the cut: exit %d, want 2 naming edge-b unreachable\n%s", exitCode(err), out)
	}
	applyService(t, cloud, "svc-cut", "m", "")
	meshtest.Poll(t, 30*time.Second, 250*time.Millisecond, "svc-cut placed by cloud, seen in edge-a", func() bool {
		return placedBy(ea, "svc-cut") == ch.Name
	}, dump)
	if placedBy(eb2, "svc-cut") != "" {
		t.Fatal("edge-b got a record across the cut")
	}
	// Hold the cut for 60 s (STRATA_CUT_FOR): every 5 s, edge-b's
	// replica is where it was, seen from both sides. The sleep is the
	// cut's length, which is what is under test.
	for hold := cutFor(time.Minute); time.Since(cutAt) < hold; time.Sleep(min(5*time.Second, time.Until(cutAt.Add(hold)))) {
		if got, gotB := where(ea, "svc-for-b-close"), where(eb2, "svc-for-b-close"); got != before || gotB != before {
			t.Fatalf("%s into the cut, svc-for-b-close is at %q seen from edge-a and %q from edge-b; before the cut %q", time.Since(cutAt).Round(time.Second), got, gotB, before)
		}
	}
	for _, s := range []string{"edge-a", "cloud", "edge-c", "edge-d"} {
		bed.Heal("edge-b", s)
	}
	healed := time.Now()
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "svc-cut's placement in edge-b after the heal, every site reachable", func() bool {
		s := sitesOf(eb2)
		return placedBy(eb2, "svc-cut") == ch.Name && s["edge-a"].Status == api.SiteReachable && s["cloud"].Status == api.SiteReachable
	}, dump)
	t.Logf("edge-b caught up %s after the heal", time.Since(healed).Round(100*time.Millisecond))
	if got := where(ea, "svc-for-b-close"); got != before {
		t.Errorf("svc-for-b-close moved to %q after the heal, from %q", got, before)
	}
	// Every agent of every site shows the same placement states, and a
	// request at any site's agent is answered by the site that serves.
	states := func(a *nsAgent) map[string]string { return placementStates(t, a) }
	var seen []map[string]string
	meshtest.Poll(t, 60*time.Second, 500*time.Millisecond, "the same placement states at every agent of every site", func() bool {
		seen = seen[:0]
		for _, a := range agents {
			seen = append(seen, states(a))
		}
		for _, p := range seen[1:] {
			if !maps.Equal(p, seen[0]) {
				return false
			}
		}
		return len(seen[0]) > 0
	}, func() {
		for i, a := range agents {
			t.Logf("%s sees %v", a.name, seen[i])
		}
	})
	t.Logf("every agent shows the same placement states %s after the heal: %v", time.Since(healed).Round(100*time.Millisecond), seen[0])
	if ask != nil {
		for _, site := range []string{"edge-a", "edge-b", "cloud", "edge-c", "edge-d"} {
			var last string
			meshtest.Poll(t, 30*time.Second, 500*time.Millisecond, "a request at "+site+"'s agent answered by edge-a's replica", func() bool {
				ok, got := ask(bed.Host(site, 0))
				last = got
				return ok
			}, func() { t.Logf("last answer at %s: %s", site, last) })
		}
	}
}

// serveAcrossSites serves a model in site edge-a only (pushed and applied
// at agent ea) and checks, at agent eb of edge-b (in host hb): an
// inference request there is answered by edge-a's replica, forwarded
// across the sites; and eb shows the service placed with its replica
// serving, as edge-a does, though it sees none of edge-a's nodes. It
// returns ask, which sends the request to the agent of host h and says
// whether edge-a's replica answered it right, and what came back.
func serveAcrossSites(t *testing.T, ea, eb *nsAgent, hb testbed.Host, dump func()) (ask func(h testbed.Host) (bool, string)) {
	t.Helper()
	b, layers, err := onnx.RandomMLP(7, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "xs.onnx")
	os.WriteFile(model, b, 0o600)
	if out, err := ea.run("push", model, "--name", "xs", "--version", "1"); err != nil {
		t.Fatalf("push at %s: %v\n%s", ea.name, err, out)
	}
	applyService(t, ea, "svc-xs", "xs", "  constraints: ['node.site == \"edge-a\"']\n")
	x := []float32{1, -0.5, 0.25, 2}
	want := onnx.Predict(layers, x, 1)[0]
	req, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 4}, "datatype": "FP32", "data": x}}})
	ask = func(h testbed.Host) (bool, string) {
		resp, err := inHost(h).Post("http://127.0.0.1:7470/v2/models/xs/infer", "application/json", bytes.NewReader(req))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var out struct {
			Outputs []struct {
				Data []float64 `json:"data"`
			} `json:"outputs"`
		}
		return resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get(infer.HeaderServedBy), "edge-a-") &&
				json.Unmarshal(body, &out) == nil && len(out.Outputs) == 1 && len(out.Outputs[0].Data) == 1 && math.Abs(out.Outputs[0].Data[0]-float64(want)) < 1e-4,
			fmt.Sprintf("%d by %q: %s", resp.StatusCode, resp.Header.Get(infer.HeaderServedBy), body)
	}
	var last string
	start := time.Now()
	meshtest.Poll(t, 90*time.Second, 500*time.Millisecond, "an inference request at edge-b answered by edge-a's replica", func() bool {
		ok, got := ask(hb)
		last = got
		return ok
	}, func() { t.Logf("last answer at edge-b: %s", last); dump() })
	t.Logf("edge-b's agent forwards to edge-a's replica %s after the apply: %s", time.Since(start).Round(100*time.Millisecond), last)
	meshtest.Poll(t, 60*time.Second, 500*time.Millisecond, "edge-b to show svc-xs placed, its replica serving", func() bool {
		var ps []api.PlacementStatus
		if eb.get(t, &ps, "placements") != nil {
			return false
		}
		for _, p := range ps {
			if p.Name == "svc-xs" {
				last = fmt.Sprintf("%s %+v: %s", p.State, p.Nodes, p.Message)
				return p.State == "placed" && len(p.Nodes) == 1 && p.Nodes[0].Replica == "serving"
			}
		}
		return false
	}, func() { t.Logf("last seen at edge-b: %s", last); dump() })
	return ask
}

// hostMetrics returns the /metrics page of the agent in host h.
func hostMetrics(t testing.TB, h testbed.Host) []byte {
	t.Helper()
	resp, err := inHost(h).Get("http://127.0.0.1:7470/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", h.Name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// placementStates is each placement as agent a sees it, by policy name:
// its state, owner, epoch, and each node with its replica's state; nil
// when a does not answer.
func placementStates(t testing.TB, a *nsAgent) map[string]string {
	t.Helper()
	var ps []api.PlacementStatus
	if a.get(t, &ps, "placements") != nil {
		return nil
	}
	out := map[string]string{}
	for _, p := range ps {
		var nodes []string
		for _, n := range p.Nodes {
			nodes = append(nodes, n.Name+":"+n.Replica)
		}
		out[p.Name] = fmt.Sprintf("%s %s e%d %v", p.State, p.Owner, p.Epoch, nodes)
	}
	return out
}

// placedWhere says where agent a sees policy name placed: its owner,
// epoch and nodes.
func placedWhere(t testing.TB, a *nsAgent, name string) string {
	t.Helper()
	var ps []api.PlacementStatus
	if a.get(t, &ps, "placements") != nil {
		return "(no answer)"
	}
	for _, p := range ps {
		if p.Name == name {
			var nodes []string
			for _, n := range p.Nodes {
				nodes = append(nodes, n.Name)
			}
			return fmt.Sprintf("%s e%d %v", p.Owner, p.Epoch, nodes)
		}
	}
	return "(none)"
}

// cutFor is how long the testbed tests hold a site's cut: def, or
// STRATA_CUT_FOR (a duration) where set.
func cutFor(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("STRATA_CUT_FOR")); err == nil && d > 0 {
		return d
	}
	return def
}

// applyService applies, through agent a, a one-replica InferenceService
// of model version 1 with more (YAML lines) added to its spec.
func applyService(t testing.TB, a *nsAgent, name, model, more string) {
	t.Helper()
	if out, err := a.run("apply", "-f", serviceFile(t, name, model, more)); err != nil {
		t.Fatalf("apply %s at %s: %v\n%s", name, a.name, err, out)
	}
}

// serviceFile writes the policy applyService applies, and returns its
// path.
func serviceFile(t testing.TB, name, model, more string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name+".yaml")
	os.WriteFile(f, []byte("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: "+name+"}\nspec:\n  model: {name: "+model+", version: \"1\"}\n  replicas: 1\n  resources: {cpu: 10m, memory: 16Mi}\n"+more), 0o600)
	return f
}

// bedPKI makes a mesh CA and a signing key for a test bed's agents, and
// returns the flags that make an agent hold both: it issues its own
// certificate, signs its gossip and can push.
func bedPKI(tb testing.TB) []string {
	tb.Helper()
	keys := filepath.Join(tb.TempDir(), "pki")
	if _, err := cli(tb, "unused", "keygen", "-pki", keys); err != nil {
		tb.Fatal(err)
	}
	return []string{"-ca-cert", filepath.Join(keys, "ca.crt"), "-ca-key", filepath.Join(keys, "ca.key"),
		"-signing-key", filepath.Join(keys, "signing.key"), "-trusted-keys", filepath.Join(keys, "signing.pub")}
}

// startPool starts an agent on every host of sites, in that order, on
// the default ports, with args(site) as its flags: the first one starts
// the pool and the others join it.
func startPool(tb testing.TB, bed *testbed.Bed, sites []string, args func(site string) []string) []*nsAgent {
	tb.Helper()
	seed := bed.Host(sites[0], 0)
	var agents []*nsAgent
	for _, site := range sites {
		for _, h := range bed.Hosts(site) {
			a := &nsAgent{ns: netns{h.NS}, name: h.Name, site: site, gossip: 7946, api: 7470, data: 7471, args: args(site), cgroup: h.CPUGroup}
			if h.Name != seed.Name {
				a.join = seed.IP.String() + ":7946"
			}
			a.start(tb)
			agents = append(agents, a)
		}
	}
	return agents
}

// logAgents logs what each agent logged, to explain a failure.
func logAgents(tb testing.TB, agents []*nsAgent) {
	tb.Helper()
	for _, a := range agents {
		tb.Logf("%s log:\n%s", a.name, a.proc.log)
	}
}
