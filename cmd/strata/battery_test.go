package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// TestBattery runs hostile input against three real agent processes on
// loopback and prints a table: gossip packets that crashed memberlist
// before (and junk from a source with no key), and the API saturated with
// oversized and streaming inference bodies beside a flood of reads. Each
// row says what was sent, whether the agent panicked, how many log lines a
// second it wrote, its RSS before and after, how many healthy peers were
// marked failed, and the 413 and 429 answers. It takes about half a
// minute and runs only with STRATA_BATTERY=1 (make battery).
func TestBattery(t *testing.T) {
	if os.Getenv("STRATA_BATTERY") == "" {
		t.Skip("set STRATA_BATTERY=1 to run the hostile-input battery (about 30 s)")
	}
	var ps []*proc
	for i := range 3 {
		p := &proc{name: fmt.Sprintf("b%d", i), dir: t.TempDir(),
			api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
		if i > 0 {
			p.args = []string{"-join", ps[0].gossip}
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
	}
	// watch runs load for d while watching the others' view of the target
	// and the target's log, and fills a row.
	watch := func(name string, d time.Duration, load func(stop <-chan struct{}) (sent, s413, s429 int64)) row {
		r := row{name: name, rssBefore: rss(t, target)}
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

	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tsent\tpanics\tlog lines/s\tRSS before MB\tRSS after MB\tpeers marked failed\t413\t429\tfds before → peak → after\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.0f\t%.0f\t%d\t%d\t%d\t%s\t\n", r.name, r.sent, r.panics, r.linesPerSec,
			float64(r.rssBefore)/(1<<20), float64(r.rssAfter)/(1<<20), r.peersFailed, r.status413, r.status429, r.fds)
	}
	tw.Flush()
	fmt.Print("\n" + out.String())
	for _, r := range rows {
		if r.panics > 0 || r.peersFailed > 0 || r.linesPerSec > 2 || r.rssAfter-r.rssBefore > 64<<20 {
			t.Errorf("%s: fails the battery (0 panics, ≤ 1 log line/s per source, RSS growth ≤ 64 MB, 0 healthy peers marked failed)", r.name)
		}
	}
	if t.Failed() {
		t.Logf("target log:\n%s", target.log)
	}
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
