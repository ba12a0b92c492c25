package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// The adversaries of the battery (make battery), as docs/security.md
// names them: an insider that holds the gossip key and nothing else, and
// a compromised edge node that also holds a certificate and key of its
// own. Each is a bare memberlist member in this process that joins the
// battery's agents and gossips crafted records, by broadcast and in
// push/pull, for the length of its row. An attack is refused when no
// agent believes it (the record is not there, or not as forged).

// adversary is one attacker's row: what it sends, and how to tell whether
// any agent believed each attack.
type adversary struct {
	name string
	// records are the crafted messages (type byte first), docs the
	// documents also offered in push/pull.
	records [][]byte
	docs    []json.RawMessage
	entries []json.RawMessage
	// believed reports, after the row, which attacks some agent took.
	believed func() []string
	tried    int
}

// msg types as the mesh gossips them (mesh/mesh.go, mesh/catalog.go).
const (
	msgState byte = 1
	msgEntry byte = 3
)

// signer signs records as a certified node does: the record's JSON with
// ,"sig":…,"cert":… appended (mesh/trust.go).
type signer struct {
	key  ed25519.PrivateKey
	cert []byte // DER
}

func (s *signer) sign(v any) json.RawMessage {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if s == nil {
		return body
	}
	sig := ed25519.Sign(s.key, body)
	out := append(body[:len(body)-1:len(body)-1], `,"sig":"`...)
	out = base64.StdEncoding.AppendEncode(out, sig)
	out = append(out, `","cert":"`...)
	out = base64.StdEncoding.AppendEncode(out, s.cert)
	return append(out, `"}`...)
}

// adversaries builds the insider and the compromised edge node against
// the battery's agents; victim is an agent whose node the attackers
// impersonate.
func adversaries(t *testing.T, ps []*proc, victim *proc, keysDir string) []*adversary {
	t.Helper()
	var victimID string
	for _, m := range membersOf(t, victim.api) {
		if m.Name == victim.name {
			victimID = m.ID
		}
	}
	if victimID == "" {
		t.Fatalf("no ID for %s", victim.name)
	}
	now := func() uint64 { return uint64(time.Now().UnixMicro()) }
	pwn := map[string]any{"kind": "TrainingJob", "name": "pwn", "generation": 1, "applied_at": "x",
		"source": "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: pwn}\nspec:\n  launcher: exec\n  command: [sh, -c, 'touch /tmp/pwned']\n  resources: {cpu: 10m, memory: 16Mi}\n"}
	entry := func(key string, value any, version uint64, origin string) map[string]any {
		v, _ := json.Marshal(value)
		return map[string]any{"key": key, "value": json.RawMessage(v), "version": version, "origin": origin,
			"written": time.Now().UTC(), "scope": "global", "schema": mesh.CurrentSchema.String()}
	}
	doc := func(id, name, site, tier string, version uint64, api string, coord []float64, controller bool) map[string]any {
		d := map[string]any{"id": id, "name": name, "version": version, "tier": tier, "site": site, "region": "r",
			"addrs": map[string]any{"gossip": "127.0.0.1:1", "api": api},
			"capabilities": map[string]any{"cpu": map[string]any{"cores": 64, "millicores": 64000}, "memory": map[string]any{"total": 1 << 40},
				"gpus": []map[string]any{{"index": 0, "model": "NVIDIA H100", "memory": 80 << 30, "healthy": true}}},
			"load":     map[string]any{"free_cpu": 64000, "free_memory": 1 << 40, "free_gpus": 8},
			"locality": map[string]any{"artifacts": []string{strings.Repeat("ab", 32)}},
			"models":   []string{"fraud@3"}, "controller": controller, "started": time.Now().UTC(), "updated": time.Now().UTC(),
			"schema": mesh.CurrentSchema.String()}
		if coord != nil {
			d["coord"] = map[string]any{"Vec": coord, "Error": 0.1, "Adjustment": 0, "Height": 0.001}
		}
		return d
	}
	attackerAPI := "127.0.0.1:9" // where an impersonated node's traffic would go

	// What no agent may believe.
	policyTaken := func() bool {
		for _, p := range ps {
			if out, err := cli(t, p.api, "placements", "-o", "json"); err == nil && strings.Contains(out, "TrainingJob/pwn") {
				return true
			}
			if resp, err := http.Get("http://" + p.api + "/v1/policies"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), `"pwn"`) {
					return true
				}
			}
		}
		return false
	}
	victimMoved := func() bool {
		for _, p := range ps {
			resp, err := http.Get("http://" + p.api + "/v1/nodes/" + victim.name)
			if err != nil {
				continue
			}
			var n mesh.Node
			json.NewDecoder(resp.Body).Decode(&n)
			resp.Body.Close()
			if n.Addrs.API == attackerAPI {
				return true
			}
		}
		return false
	}
	listed := func(name string) bool {
		for _, p := range ps {
			if resp, err := http.Get("http://" + p.api + "/v1/nodes/" + name); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return true
				}
			}
		}
		return false
	}

	// The insider: no certificate.
	insider := &adversary{name: "insider (gossip key only): exec policy, impersonation, fake node, bad coordinate, future versions"}
	var is *signer
	insider.entries = []json.RawMessage{
		is.sign(entry("policies/TrainingJob/pwn", pwn, math.MaxUint64, "made-up")),
		is.sign(entry("policies/TrainingJob/pwn", pwn, now(), victimID)),
		is.sign(entry("placements/TrainingJob/pwn", map[string]any{"key": "TrainingJob/pwn", "state": "placed"}, now(), victimID)),
	}
	insider.docs = []json.RawMessage{
		is.sign(doc(victimID, victim.name, "default", "onprem", math.MaxUint64, attackerAPI, nil, true)),
		is.sign(doc(victimID, victim.name, "default", "onprem", now(), attackerAPI, nil, true)),
		is.sign(doc("fakenode00000000", "fake-h100", "made-up", "cloud", now(), attackerAPI, nil, true)),
		is.sign(doc("fakenode00000001", "fake-coord", "default", "edge", now(), attackerAPI, []float64{1, 2}, false)),
	}
	insider.believed = func() []string {
		var out []string
		if policyTaken() {
			out = append(out, "exec policy")
		}
		if victimMoved() {
			out = append(out, "impersonation")
		}
		if listed("fake-h100") || listed("fake-coord") {
			out = append(out, "fake node")
		}
		return out
	}

	// The compromised edge node: its own certificate (as bootstrap would
	// have issued it) and key.
	edgeID, err := mesh.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := os.ReadFile(filepath.Join(keysDir, "ca.crt"))
	caKey, _ := os.ReadFile(filepath.Join(keysDir, "ca.key"))
	certPEM, err := pki.IssueNodeCertClaims(caCert, caKey, edgeID.Public(), "rogue-edge", nil,
		pki.Claims{ID: edgeID.ID(), Site: "default", Tier: mesh.TierEdge})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := pki.DecodeCert(certPEM)
	es := &signer{key: edgeID.Key, cert: cert.Raw}
	edge := &adversary{name: "compromised edge node (own certificate): policy, placement, impersonation, controller claim, bad coordinate"}
	edge.entries = []json.RawMessage{
		es.sign(entry("policies/TrainingJob/pwn", pwn, now(), edgeID.ID())),
		es.sign(entry("placements/TrainingJob/pwn", map[string]any{"key": "TrainingJob/pwn", "state": "placed"}, now(), edgeID.ID())),
		es.sign(entry("policies/TrainingJob/pwn", pwn, now(), victimID)),
	}
	edge.docs = []json.RawMessage{
		es.sign(doc(victimID, victim.name, "default", "onprem", now(), attackerAPI, nil, true)),
		es.sign(doc(edgeID.ID(), "rogue-edge", "default", "edge", now(), attackerAPI, nil, true)),
		es.sign(doc(edgeID.ID(), "rogue-edge", "default", "edge", now()+1, attackerAPI, []float64{1, 2}, false)),
		es.sign(doc(edgeID.ID(), "rogue-edge", "default", "edge", uint64(time.Now().Add(time.Hour).UnixMicro()), attackerAPI, nil, false)),
	}
	edge.believed = func() []string {
		var out []string
		if policyTaken() {
			out = append(out, "policy")
		}
		if victimMoved() {
			out = append(out, "impersonation")
		}
		for _, p := range ps {
			if resp, err := http.Get("http://" + p.api + "/v1/nodes/rogue-edge"); err == nil {
				var n mesh.Node
				json.NewDecoder(resp.Body).Decode(&n)
				resp.Body.Close()
				if n.Controller || n.Coord != nil && len(n.Coord.Vec) != 8 {
					out = append(out, "controller claim or bad coordinate")
					break
				}
			}
		}
		return out
	}
	for _, a := range []*adversary{insider, edge} {
		for _, d := range a.docs {
			a.records = append(a.records, append([]byte{msgState}, d...))
		}
		for _, e := range a.entries {
			a.records = append(a.records, append([]byte{msgEntry}, e...))
		}
		a.tried = len(a.records)
	}
	return []*adversary{insider, edge}
}

// run joins the mesh at seed as a bare memberlist member named name and
// gossips the adversary's records until stop; it returns the messages
// sent.
func (a *adversary) run(t *testing.T, name, seed string, key []byte, stop <-chan struct{}) int64 {
	d := &craftDelegate{a: a}
	c := memberlist.DefaultLANConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = name, "127.0.0.1", 0, 0
	c.SecretKey, c.Delegate = key, d
	c.Logger = log.New(io.Discard, "", 0)
	c.PushPullInterval = time.Second
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer ml.Shutdown()
	if _, err := ml.Join([]string{seed}); err != nil {
		t.Errorf("%s joins: %v", name, err)
		return 0
	}
	var sent int64
	for {
		select {
		case <-stop:
			return sent + d.pushed()
		case <-time.After(200 * time.Millisecond): // a bounded flood: 5 rounds a second
		}
		// Straight to every member too, over TCP, as an answer to an ask.
		for _, m := range ml.Members() {
			if m.Name == name {
				continue
			}
			for _, r := range a.records {
				if ml.SendReliable(m, r) == nil {
					sent++
				}
			}
		}
	}
}

// craftDelegate hands memberlist the adversary's records as broadcasts
// and as its push/pull state.
type craftDelegate struct {
	a  *adversary
	mu sync.Mutex
	i  int
	n  int64
}

func (d *craftDelegate) NodeMeta(int) []byte           { return nil }
func (d *craftDelegate) NotifyMsg([]byte)              {}
func (d *craftDelegate) MergeRemoteState([]byte, bool) {}

func (d *craftDelegate) GetBroadcasts(overhead, limit int) [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.a.records[d.i%len(d.a.records)]
	d.i++
	if len(r)+overhead > limit {
		return nil
	}
	d.n++
	return [][]byte{r}
}

func (d *craftDelegate) LocalState(bool) []byte {
	b, _ := json.Marshal(map[string]any{"nodes": d.a.docs, "entries": d.a.entries})
	d.mu.Lock()
	d.n++
	d.mu.Unlock()
	return b
}

func (d *craftDelegate) pushed() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// refusedRecords sums strata_gossip_records_refused_total at p.
func refusedRecords(t *testing.T, p *proc) float64 {
	return metricSum(t, p, "strata_gossip_records_refused_total")
}

// crossOriginApply posts an exec policy as a web page of another origin
// would (text/plain, a foreign Origin and Host): the agent must refuse it.
func crossOriginApply(api string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+api+"/v1/policies",
		strings.NewReader("apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: csrf}\nspec:\n  launcher: exec\n  command: [true]\n"))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Origin", "http://attacker.example")
	req.Host = "attacker.example:" + api[strings.LastIndexByte(api, ':')+1:]
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// idleFlood opens n idle keep-alive connections to /v1/health and then
// asks for the members as the CLI would; it reports whether the CLI got
// its answer.
func idleFlood(t *testing.T, api string, n int) (bool, error) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", api, time.Second)
		if err != nil {
			continue
		}
		fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: %s\r\n\r\n", api)
		conns = append(conns, c)
	}
	out, err := cli(t, api, "members")
	return err == nil && strings.Contains(out, "alive"), err
}

// replaceArtifact pushes a model version through one agent and other bytes
// under the same version through another: the second must be refused.
func replaceArtifact(t *testing.T, a, b *proc) (refused bool, err error) {
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.onnx"), filepath.Join(dir, "two.onnx")
	for i, f := range []string{one, two} {
		b, _, err := onnx.RandomMLP(int64(100+i), 4, 8, 1)
		if err != nil {
			return false, err
		}
		os.WriteFile(f, b, 0o600)
	}
	name := "irisr" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	if out, err := cli(t, a.api, "push", one, "--name", name, "--version", "1"); err != nil {
		return false, fmt.Errorf("first push: %v %s", err, out)
	}
	var out string
	poll(20*time.Second, func() bool {
		o, _ := cli(t, b.api, "models", "-o", "json")
		return strings.Contains(o, name)
	})
	out, err = cli(t, b.api, "push", two, "--name", name, "--version", "1")
	return err != nil && strings.Contains(out+err.Error(), "409"), nil
}
