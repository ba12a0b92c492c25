package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// TestBattery runs hostile input against three real agent processes on
// loopback and prints a table: gossip packets that crashed memberlist
// before (and junk from a source with no key), and the API saturated with
// oversized and streaming inference bodies beside a flood of reads. Each
// row says what was sent, whether the agent panicked, how many log lines a
// second it wrote, its RSS before and after, how many healthy peers were
// marked failed, and the 413 and 429 answers. A last row flips a byte of
// a held model's blob on disk before the model is served, three times: each
// load must refuse it and the agent serve the true model, pulled again.
// It takes about a minute and runs only with STRATA_BATTERY=1 (make
// battery).
func TestBattery(t *testing.T) {
	if os.Getenv("STRATA_BATTERY") == "" {
		t.Skip("set STRATA_BATTERY=1 to run the hostile-input battery (about 30 s)")
	}
	// Keyed agents with a mesh CA, a signing key and a data plane, as in
	// production: the tampered-model row pushes, pulls and serves models.
	keys := filepath.Join(t.TempDir(), "pki")
	if _, err := cli(t, "unused", "keygen", "-pki", keys); err != nil {
		t.Fatal(err)
	}
	var ps []*proc
	for i := range 3 {
		p := &proc{name: fmt.Sprintf("b%d", i), dir: t.TempDir(),
			api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			// onprem: controllers, which alone write policies with a CA.
			args: append(caHolderArgs(t, keys), "-tier", "onprem")}
		if i > 0 {
			p.args = append(p.args, "-join", ps[0].gossip)
		}
		startAgent(t, p)
		ps = append(ps, p)
	}
	meshtest.WaitFor(t, 30*time.Second, "three agents alive", func() bool {
		for _, p := range ps {
			n := 0
			for _, m := range membersOf(t, p.api) {
				if m.Status == mesh.StatusAlive {
					n++
				}
			}
			if n != 3 {
				return false
			}
		}
		return true
	})
	target := ps[0]
	key, _ := base64.StdEncoding.DecodeString(gossipKey(t))

	type row struct {
		name                 string
		sent                 int64
		panics               int
		linesPerSec          float64
		rssBefore, rssAfter  int64
		peersFailed          int
		status413, status429 int64
		fds                  string // open descriptors: before → peak → after
		tampered             string // tampered loads refused, of those tried
		attacks              string // attacks refused, of those tried
	}
	// watch runs load for d (or until load returns, if later) while
	// watching the others' view of the target and the target's log, and
	// fills a row.
	watch := func(name string, d time.Duration, load func(stop <-chan struct{}) (sent, s413, s429 int64)) row {
		r := row{name: name, rssBefore: rss(t, target), tampered: "–", attacks: "–"}
		fds0, peak := fds(target), 0
		lines0 := strings.Count(target.log.String(), "\n")
		stop := make(chan struct{})
		var failed sync.Map
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				for _, p := range ps[1:] {
					if m, ok := membersOf(t, p.api)[target.name]; ok && m.Status != mesh.StatusAlive && m.Status != mesh.StatusSuspect {
						failed.Store(p.name, true)
					}
				}
				peak = max(peak, fds(target))
			}
		}()
		done := make(chan [3]int64, 1)
		go func() {
			sent, a, b := load(stop)
			done <- [3]int64{sent, a, b}
		}()
		time.Sleep(d) // the load's length is what the row measures
		close(stop)
		res := <-done
		wg.Wait()
		r.sent, r.status413, r.status429 = res[0], res[1], res[2]
		r.linesPerSec = float64(strings.Count(target.log.String(), "\n")-lines0) / d.Seconds()
		r.rssAfter = rss(t, target)
		r.fds = fmt.Sprintf("%d → %d → %d", fds0, peak, fds(target))
		failed.Range(func(any, any) bool { r.peersFailed++; return true })
		if target.cmd.ProcessState != nil || strings.Contains(target.log.String(), "panic:") {
			r.panics = 1
		}
		return r
	}

	var rows []row
	rows = append(rows, watch("gossip: junk, keyless, version-0 and tampered packets", 10*time.Second, func(stop <-chan struct{}) (int64, int64, int64) {
		c, err := net.Dial("udp", target.gossip)
		if err != nil {
			t.Error(err)
			return 0, 0, 0
		}
		defer c.Close()
		var sent int64
		junk := make([]byte, 1400)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return sent, 0, 0
			default:
			}
			var b []byte
			switch i % 5 {
			case 0: // random bytes
				n := 1 + i%1400
				_, _ = rand.Read(junk[:n])
				b = junk[:n]
			case 1: // empty
				b = nil
			case 2: // the packet that crashed memberlist v0.7.0
				b = sealed(key, 0, append(bytes.Repeat([]byte{0}, 19), 0xff))
			case 3: // valid under the key, then a bit flipped
				b = sealed(key, 1, []byte("hello"))
				b[len(b)-1] ^= 1
			case 4: // truncated
				b = sealed(key, 1, []byte("hello"))[:8]
			}
			if _, err := c.Write(b); err == nil {
				sent++
			}
			if i%64 == 0 {
				time.Sleep(time.Millisecond) // about 60k packets a second, bounded
			}
		}
	}))
	rows = append(rows, watch("API: 8×100 MiB declared + 8×100 MiB streamed inference bodies, reads", 10*time.Second, func(stop <-chan struct{}) (int64, int64, int64) {
		var sent, s413, s429 atomic.Int64
		var wg sync.WaitGroup
		body := func(n int64) io.Reader { return io.LimitReader(zeros{}, n) }
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest(http.MethodPost, "http://"+target.api+"/v2/models/m/infer", body(100<<20))
					if i%2 == 0 {
						req.ContentLength = 100 << 20
					} else {
						req.ContentLength = -1 // chunked: the limit applies while it streams
					}
					resp, err := http.DefaultClient.Do(req)
					sent.Add(1)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusRequestEntityTooLarge:
						s413.Add(1)
					case http.StatusTooManyRequests:
						s429.Add(1)
					}
				}
			}()
		}
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if resp, err := http.Get("http://" + target.api + "/v1/nodes"); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					sent.Add(1)
				}
			}()
		}
		wg.Wait()
		return sent.Load(), s413.Load(), s429.Load()
	}))

	// Slow bodies: headers, then nothing. The API cuts a body idle for 30 s
	// and takes at most 1024 connections; the row runs past the timeout.
	rows = append(rows, watch("API: 1,500 connections that send headers, then no body", 36*time.Second, func(stop <-chan struct{}) (int64, int64, int64) {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 1500 {
			c, err := net.DialTimeout("tcp", target.api, time.Second)
			if err != nil {
				continue
			}
			conns = append(conns, c)
			fmt.Fprintf(c, "POST /v1/policies HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\nContent-Length: 1000\r\n\r\nkind")
		}
		<-stop
		return int64(len(conns)), 0, 0
	}))

	// Models tampered with on disk: the target holds a signed model whose
	// blob has a byte flipped before anything loads it; then a service
	// pinned to the target asks it to serve that model. The blob must be
	// refused (quarantined, counted) and pulled again from the verified
	// origin, and every answer the target gives must be the true model's.
	var refused, tries int
	var apiRefused string
	tamperRow := watch("models: a held blob's byte flipped on disk, then served", 10*time.Second, func(stop <-chan struct{}) (int64, int64, int64) {
		if os.Getenv("STRATA_ORT_LIB") == "" {
			t.Log("STRATA_ORT_LIB is not set: the tampered-model row needs ONNX Runtime (make setup-ort)")
			return 0, 0, 0
		}
		for k := 1; k <= 3; k++ {
			tries++
			ok, err := tamperedLoadRefused(t, ps[1], target, k)
			if err != nil {
				t.Error(err)
				break
			}
			if ok {
				refused++
			}
		}
		return int64(tries), 0, 0
	})
	tamperRow.tampered = fmt.Sprintf("%d of %d", refused, tries)
	rows = append(rows, tamperRow)

	// The adversaries (docs/security.md): each gossips its forgeries for
	// the row, then every agent is asked whether it believed any.
	var attacksOK = true
	for i, a := range adversaries(t, ps, ps[2], keys) {
		refused0 := refusedRecords(t, target)
		r := watch(a.name, 10*time.Second, func(stop <-chan struct{}) (int64, int64, int64) {
			return a.run(t, fmt.Sprintf("attacker-%d", i), target.gossip, key, stop), 0, 0
		})
		believed := a.believed()
		r.attacks = fmt.Sprintf("%d of %d kinds (%.0f records refused)", a.tried-len(believed), a.tried, refusedRecords(t, target)-refused0)
		if len(believed) > 0 {
			attacksOK = false
			t.Errorf("%s: believed %v", a.name, believed)
		}
		rows = append(rows, r)
	}
	apiAttacks := watch("API: a cross-origin exec apply, 1,100 idle connections, another digest for name@version", 5*time.Second, func(stop <-chan struct{}) (int64, int64, int64) {
		refused, tried := 0, 0
		tried++
		if code, err := crossOriginApply(target.api); err == nil && code >= 400 && code < 500 {
			refused++
		} else {
			t.Errorf("cross-origin apply: %d %v", code, err)
		}
		tried++
		if ok, err := idleFlood(t, target.api, 1100); ok {
			refused++
		} else {
			t.Errorf("the CLI after 1,100 idle connections: %v", err)
		}
		tried++
		if ok, err := replaceArtifact(t, ps[0], ps[2]); ok {
			refused++
		} else {
			t.Errorf("another digest for a model version was taken: %v", err)
		}
		apiRefused = fmt.Sprintf("%d of %d", refused, tried)
		return 1100 + 2, 0, 0
	})
	apiAttacks.attacks = apiRefused
	rows = append(rows, apiAttacks)

	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tsent\tpanics\tlog lines/s\tRSS before MB\tRSS after MB\tpeers marked failed\t413\t429\tfds before → peak → after\ttampered loads refused\tattacks refused\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.0f\t%.0f\t%d\t%d\t%d\t%s\t%s\t%s\t\n", r.name, r.sent, r.panics, r.linesPerSec,
			float64(r.rssBefore)/(1<<20), float64(r.rssAfter)/(1<<20), r.peersFailed, r.status413, r.status429, r.fds, r.tampered, r.attacks)
	}
	tw.Flush()
	fmt.Print("\n" + out.String())
	for _, r := range rows {
		if r.panics > 0 || r.peersFailed > 0 || r.linesPerSec > 2 || r.rssAfter-r.rssBefore > 64<<20 {
			t.Errorf("%s: fails the battery (0 panics, ≤ 1 log line/s per source, RSS growth ≤ 64 MB, 0 healthy peers marked failed)", r.name)
		}
	}
	if !attacksOK {
		t.Error("an adversary's forgery was believed (see above)")
	}
	if refused != tries {
		t.Errorf("tampered models: %d of %d loads refused, want all", refused, tries)
	}
	if t.Failed() {
		t.Logf("target log:\n%s", target.log)
	}
}

// tamperedLoadRefused runs one round of the tampered-model row: origin
// publishes model k, target pulls it, a byte of target's copy is flipped
// on disk, and a service pinned to target asks it to serve the model. It
// reports whether the target refused the tampered blob (its corrupt-blob
// count went up) and then served the true model. An answer that differs
// from the true model's is an error. It runs beside the row's watcher, so
// it returns errors rather than ending the test.
func tamperedLoadRefused(t *testing.T, origin, target *proc, k int) (bool, error) {
	name := fmt.Sprintf("tampered-%d", k)
	model, layers, err := onnx.RandomMLP(int64(k), 4, 16, 1)
	if err != nil {
		return false, err
	}
	file := filepath.Join(t.TempDir(), name+".onnx")
	os.WriteFile(file, model, 0o600)
	if out, err := cli(t, origin.api, "push", file, "--name", name, "--version", "1"); err != nil {
		return false, fmt.Errorf("push %s: %v\n%s", name, err, out)
	}
	// The pull can start once the target has the manifest.
	var out string
	if !poll(20*time.Second, func() bool {
		out, err = cli(t, target.api, "pull", name+":1")
		return err == nil
	}) {
		return false, fmt.Errorf("pull %s to %s: %v\n%s", name, target.name, err, out)
	}
	sum := sha256.Sum256(model)
	digest := hex.EncodeToString(sum[:])
	var blob string
	filepath.WalkDir(target.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == digest {
			blob = p
		}
		return nil
	})
	b, err := os.ReadFile(blob)
	if err != nil || !bytes.Equal(b, model) {
		return false, fmt.Errorf("%s's copy of %s (%q): %v", target.name, name, blob, err)
	}
	b[len(b)-20] ^= 0xff // in the last layer's weights
	if err := os.WriteFile(blob, b, 0o600); err != nil {
		return false, err
	}
	before := metricSum(t, target, "strata_artifacts_corrupt_total")

	svc := filepath.Join(t.TempDir(), name+".yaml")
	os.WriteFile(svc, []byte(fmt.Sprintf("apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: %s}\nspec:\n  model: {name: %s, version: \"1\"}\n  resources: {cpu: 10m, memory: 16Mi}\n  constraints: ['node.name == %q']\n", name, name, target.name)), 0o600)
	if out, err := cli(t, origin.api, "apply", "-f", svc); err != nil {
		return false, fmt.Errorf("apply %s: %v\n%s", name, err, out)
	}
	defer cli(t, origin.api, "delete", "InferenceService", name)
	x := []float32{0.5, -1, 2, 0.25, 1, 1, -0.5, 0}
	want := onnx.Predict(layers, x, 2)
	req, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{2, 4}, "datatype": "FP32", "data": x}}})
	var got []float64
	var code int
	var body []byte
	if !poll(time.Minute, func() bool {
		code, body = httpPost(t, "http://"+target.api+"/v2/models/"+name+"/infer", req)
		var resp struct {
			Outputs []struct {
				Data []float64 `json:"data"`
			} `json:"outputs"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &resp) != nil || len(resp.Outputs) != 1 {
			return false
		}
		got = resp.Outputs[0].Data
		return true
	}) {
		return false, fmt.Errorf("%s not served by %s within a minute: last answer %d %s", name, target.name, code, body)
	}
	for i := range want {
		if i >= len(got) || math.Abs(got[i]-float64(want[i])) > 1e-4 {
			return false, fmt.Errorf("%s served %v, the true model gives %v: a tampered model answered", name, got, want)
		}
	}
	return metricSum(t, target, "strata_artifacts_corrupt_total") > before, nil
}

// poll calls f every 200 ms until it returns true (true) or d has passed
// (false).
func poll(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) { // polling interval
		if f() {
			return true
		}
	}
	return false
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// sealed is a gossip packet as memberlist encrypts it: a version byte,
// a 12-byte nonce, and the AES-GCM sealed plaintext (no label).
func sealed(key []byte, version byte, plain []byte) []byte {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	nonce := make([]byte, gcm.NonceSize())
	_, _ = rand.Read(nonce)
	return gcm.Seal(append([]byte{version}, nonce...), nonce, plain, nil)
}

// fds counts a process's open file descriptors.
func fds(p *proc) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	return len(es)
}

// rss is a process's resident set size in bytes, from /proc.
func rss(t *testing.T, p *proc) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
