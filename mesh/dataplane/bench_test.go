package dataplane

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/storage"
)

// Benchmarks of the data plane. Sizes are environment variables so that a
// slow machine can run them smaller:
//
//	STRATA_BENCH_TRANSFER_BYTES  one transfer, default 1 GiB
//	STRATA_BENCH_FANOUT_BYTES    fan-out model, default 256 MiB
//	STRATA_BENCH_FANOUT_AGENTS   fan-out pullers, default 16
//	STRATA_BENCH_FANOUT_CAP      per-agent caps in bytes/s each way, one
//	                             fan-out per cap, comma-separated; default
//	                             "12.5e6,5e6" (100 and 40 Mbit/s WAN links)

func envInt(tb testing.TB, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, v, err)
	}
	return int64(n)
}

// blobReader yields n pseudo-random bytes, fast enough not to limit
// publishing a large blob.
type blobReader struct {
	left int64
	rng  *mrand.ChaCha8
}

func newBlobReader(n int64, seed byte) *blobReader {
	var s [32]byte
	s[0] = seed
	return &blobReader{left: n, rng: mrand.NewChaCha8(s)}
}

func (r *blobReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	r.rng.Read(p)
	r.left -= int64(len(p))
	return len(p), nil
}

func publishBlob(tb testing.TB, tn *testNode, name string, size, chunk int64) storage.Manifest {
	tb.Helper()
	m, err := tn.store.Publish(context.Background(), newBlobReader(size, 1), storage.PublishSpec{
		Kind: storage.KindModel, Name: name, Version: "v1", ChunkSize: chunk,
	}, signer)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// forget removes the blob from tn so it can be pulled again.
func forget(tb testing.TB, tn *testNode, m storage.Manifest) {
	tb.Helper()
	if err := tn.store.RemoveManifest(m.Kind, m.Name, m.Version); err != nil {
		tb.Fatal(err)
	}
	if _, err := tn.store.GC(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}

func reportTransfer(b *testing.B, size int64, d time.Duration) {
	b.ReportMetric(float64(size)/1e6/d.Seconds(), "MB/s")
	b.ReportMetric(d.Seconds(), "s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkTransfer moves one blob over loopback with strata's data plane
// and, in the same run, with raw quic-go (one connection, one stream, the
// same quic and TLS settings), TLS 1.3 over TCP and plain TCP. The strata
// variants show what chunk size, streams, connections and holders give.
//
// A shared machine is noisy, so the implementations run interleaved, in
// STRATA_BENCH_ROUNDS rounds (default 3, each in a rotated order), after one
// untimed warm-up round, and each reports its median. STRATA_BENCH_IMPLS (a
// comma-separated list of impl names) runs only those.
func BenchmarkTransfer(b *testing.B) {
	size := envInt(b, "STRATA_BENCH_TRANSFER_BYTES", 1<<30)
	rounds := int(envInt(b, "STRATA_BENCH_ROUNDS", 3))
	group := "size=" + sizeName(size)
	ca := newTestCA(b)

	holder0 := startNode(b, ca, "holder0", "", nodeOpts{})
	holder1 := startNode(b, ca, "holder1", "", nodeOpts{})
	manifests := map[int64]storage.Manifest{}
	for _, chunk := range []int64{1 << 20, 4 << 20, 16 << 20} {
		m, err := holder0.store.Publish(context.Background(), newBlobReader(size, 1), storage.PublishSpec{
			Kind: storage.KindModel, Name: fmt.Sprintf("bench-chunk%d", chunk>>20), Version: "v1", ChunkSize: chunk,
		}, signer)
		if err != nil {
			b.Fatal(err)
		}
		manifests[chunk] = m
	}
	publishBlob(b, holder1, "bench-chunk4", size, 4<<20)
	pullers := map[[2]int]*testNode{}
	puller := func(conns, streams int) *testNode {
		k := [2]int{conns, streams}
		if p, ok := pullers[k]; ok {
			return p
		}
		p := startNode(b, ca, fmt.Sprintf("puller-c%d-s%d", conns, streams), "", nodeOpts{mutate: func(c *Config) {
			c.ConnsPerHolder, c.StreamsPerHolder = conns, streams
		}})
		pullers[k] = p
		return p
	}
	strata := func(chunk int64, conns, streams int, holders ...*testNode) func() time.Duration {
		p := puller(conns, streams)
		var hs []Holder
		for _, h := range holders {
			hs = append(hs, h.holder())
		}
		m := manifests[chunk]
		return func() time.Duration {
			start := time.Now()
			if _, err := p.Pull(context.Background(), PullRequest{Manifest: m, Holders: hs}); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			forget(b, p, m)
			return d
		}
	}
	srvTLS, cliTLS := benchTLS(b, ca)
	impls := []struct {
		name string
		run  func() time.Duration
	}{
		{"strata", strata(4<<20, 1, 4, holder0)}, // the defaults
		{"strata-chunk1MiB", strata(1<<20, 1, 4, holder0)},
		{"strata-chunk16MiB", strata(16<<20, 1, 4, holder0)},
		{"strata-streams2", strata(4<<20, 1, 2, holder0)},
		{"strata-streams8", strata(4<<20, 1, 8, holder0)},
		{"strata-conns2", strata(4<<20, 2, 4, holder0)},
		{"strata-conns4", strata(4<<20, 4, 4, holder0)},
		{"strata-holders2", strata(4<<20, 1, 4, holder0, holder1)},
		{"quic-raw", rawQUIC(b, srvTLS, cliTLS, size, "")},
		{"quic-raw-disk", rawQUIC(b, srvTLS, cliTLS, size, b.TempDir())},
		{"tls-tcp", rawTCP(b, srvTLS, cliTLS, size, true)},
		{"tcp", rawTCP(b, srvTLS, cliTLS, size, false)},
	}
	if only := os.Getenv("STRATA_BENCH_IMPLS"); only != "" {
		keep := impls[:0]
		for _, impl := range impls {
			if slices.Contains(strings.Split(only, ","), impl.name) {
				keep = append(keep, impl)
			}
		}
		impls = keep
	}
	times := make([][]time.Duration, len(impls))
	cpus := make([][]time.Duration, len(impls))
	for r := -1; r < rounds; r++ {
		// Each round starts one implementation later: whichever runs first
		// after the others ran measurably slower, so no one keeps that spot.
		for k := range impls {
			i := (k + max(r, 0)) % len(impls)
			impl := impls[i]
			c0 := cpuTime()
			d := impl.run()
			if r >= 0 {
				times[i] = append(times[i], d)
				cpus[i] = append(cpus[i], cpuTime()-c0)
			}
		}
	}
	for i, impl := range impls {
		b.Run(group+"/impl="+impl.name, func(b *testing.B) {
			reportTransfer(b, size, median(times[i]))
			// CPU seconds of the whole process (both ends) per transfer:
			// on a machine with few cores, throughput follows it.
			b.ReportMetric(median(cpus[i]).Seconds(), "cpu-s")
		})
	}
}

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// benchTLS returns mutual-auth TLS configurations from the mesh CA for the
// raw baselines, the same kind strata's data plane uses.
func benchTLS(b *testing.B, ca testCA) (srv, cli *tls.Config) {
	b.Helper()
	tn := &testNode{name: "raw", key: signer}
	cert, err := pki.IssueNodeCert(ca.cert, ca.key, tn.key, "raw", []string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	srv, _ = pki.ServerTLSConfig(ca.cert, cert, tn.key)
	cli, _ = pki.ClientTLSConfig(ca.cert, cert, tn.key)
	return srv, cli
}

// sendAll writes size bytes from a 1 MiB buffer.
func sendAll(w io.Writer, size int64) error {
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		k := min(left, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		left -= k
	}
	return nil
}

// rawQUIC serves size bytes on one stream of one quic-go connection per
// run; the returned func dials, reads them all and returns the time taken.
// With a directory, the receiver also does the least any verifying store
// must: it writes the bytes to a new file while hashing them (SHA-256) and
// fsyncs it (impl=quic-raw-disk, the floor under strata's own pull).
func rawQUIC(b *testing.B, srvTLS, cliTLS *tls.Config, size int64, dir string) func() time.Duration {
	ln, err := quic.ListenAddr("127.0.0.1:0", srvTLS, QUICConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				s, err := c.AcceptStream(context.Background())
				if err != nil {
					return
				}
				io.ReadFull(s, make([]byte, 1))
				sendAll(s, size)
				s.Close()
				<-c.Context().Done()
			}()
		}
	}()
	return func() time.Duration {
		start := time.Now()
		c, err := quic.DialAddr(context.Background(), ln.Addr().String(), cliTLS, QUICConfig())
		if err != nil {
			b.Fatal(err)
		}
		defer c.CloseWithError(0, "")
		s, err := c.OpenStreamSync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		s.Write([]byte{1})
		var dst io.Writer = io.Discard
		var f *os.File
		if dir != "" {
			if f, err = os.CreateTemp(dir, "raw-*"); err != nil {
				b.Fatal(err)
			}
			defer os.Remove(f.Name())
			defer f.Close()
			dst = io.MultiWriter(f, sha256.New())
		}
		n, err := io.CopyBuffer(dst, s, make([]byte, 1<<20))
		if err != nil || n != size {
			b.Fatalf("received %d bytes, err %v", n, err)
		}
		if f != nil {
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
}

// rawTCP is rawQUIC over TCP, with or without TLS 1.3.
func rawTCP(b *testing.B, srvTLS, cliTLS *tls.Config, size int64, useTLS bool) func() time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if useTLS {
					c = tls.Server(c, srvTLS)
				}
				io.ReadFull(c, make([]byte, 1))
				sendAll(c, size)
			}()
		}
	}()
	return func() time.Duration {
		start := time.Now()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if useTLS {
			c = tls.Client(c, cliTLS)
		}
		c.Write([]byte{1})
		n, err := io.Copy(io.Discard, c)
		if err != nil || n != size {
			b.Fatalf("received %d bytes, err %v", n, err)
		}
		return time.Since(start)
	}
}

// BenchmarkFanOut pushes one model from an origin to many agents, each
// behind a bandwidth cap (both ways) that mimics a WAN link. impl=strata
// pulls peer-assisted (every agent lists the other agents and the origin as
// holders); impl=single is one agent pulling alone from the origin at the
// same cap, the time a fan-out is measured against. Metrics: s (until all
// hold it), origin-egress-bytes and its copies of the model, and the time
// as a multiple of one single transfer.
//
// On a machine with few cores, every simulated agent's QUIC, hashing and
// writing share those cores: at a high cap the fan-out is bound by CPU
// (cores-busy near the core count), not by the links, and x-single says
// more about the machine than the protocol. The lower cap shows the
// protocol with the links as the limit.
func BenchmarkFanOut(b *testing.B) {
	size := envInt(b, "STRATA_BENCH_FANOUT_BYTES", 256<<20)
	agents := int(envInt(b, "STRATA_BENCH_FANOUT_AGENTS", 16))
	caps := os.Getenv("STRATA_BENCH_FANOUT_CAP")
	if caps == "" {
		caps = "12.5e6,5e6"
	}
	for _, c := range strings.Split(caps, ",") {
		capBps, err := strconv.ParseFloat(strings.TrimSpace(c), 64)
		if err != nil || capBps <= 0 {
			b.Fatalf("STRATA_BENCH_FANOUT_CAP: %q is not a rate in bytes/s", c)
		}
		fanOut(b, size, agents, int64(capBps))
	}
}

func fanOut(b *testing.B, size int64, agents int, capBps int64) {
	group := fmt.Sprintf("size=%s/agents=%d/cap=%.1fMBps", sizeName(size), agents, float64(capBps)/1e6)
	ca := newTestCA(b)
	capped := func(c *Config) {
		c.IngressBytesPerSec, c.EgressBytesPerSec = capBps, capBps
		c.RetryTimeout = 2 * time.Minute
	}
	origin := startNode(b, ca, "origin", "", nodeOpts{mutate: capped})
	m := publishBlob(b, origin, "fanout", size, 1<<20)

	var single time.Duration
	b.Run(group+"/impl=single", func(b *testing.B) {
		n := startNode(b, ca, "single", "", nodeOpts{mutate: capped})
		before := origin.Stats().BytesSent
		start := time.Now()
		if _, err := n.Pull(context.Background(), PullRequest{Manifest: m, Holders: []Holder{origin.holder()}}); err != nil {
			b.Fatal(err)
		}
		single = time.Since(start)
		b.ReportMetric(single.Seconds(), "s")
		b.ReportMetric(float64(origin.Stats().BytesSent-before), "origin-egress-bytes")
		b.ReportMetric(float64(origin.Stats().BytesSent-before)/float64(size), "origin-copies")
		b.ReportMetric(1, "x-single")
		b.ReportMetric(0, "ns/op")
	})
	b.Run(group+"/impl=strata", func(b *testing.B) {
		nodes := make([]*testNode, agents)
		for i := range nodes {
			nodes[i] = startNode(b, ca, fmt.Sprintf("agent%02d", i), "", nodeOpts{mutate: capped})
		}
		before := origin.Stats().BytesSent
		start := time.Now()
		c0 := cpuTime()
		errs := make(chan error, agents)
		var doneMu sync.Mutex
		var doneAt []time.Duration
		for i, n := range nodes {
			// The origin is listed last, as the farthest, and every other
			// agent as a holder that may have chunks.
			var holders []Holder
			for j := 1; j < agents; j++ {
				holders = append(holders, nodes[(i+j)%agents].holder())
			}
			holders = append(holders, origin.holder())
			go func() {
				_, err := n.Pull(context.Background(), PullRequest{Manifest: m, Holders: holders})
				doneMu.Lock()
				doneAt = append(doneAt, time.Since(start))
				doneMu.Unlock()
				errs <- err
			}()
		}
		for range nodes {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		d := time.Since(start)
		cpu := cpuTime() - c0
		// How busy the machine's cores were: near the core count means the
		// fan-out was bound by CPU, not by the simulated links.
		b.ReportMetric(cpu.Seconds()/d.Seconds(), "cores-busy")
		ost := origin.Stats()
		b.Logf("origin: %d chunk requests sent to peers instead, %d answered with an unsent chunk, %d forced", ost.SeededRefusals, ost.Substituted, ost.ForcedServes)
		egress := float64(ost.BytesSent - before)
		b.ReportMetric(d.Seconds(), "s")
		b.ReportMetric(median(doneAt).Seconds(), "p50-s")
		b.ReportMetric(egress, "origin-egress-bytes")
		b.ReportMetric(egress/float64(size), "origin-copies")
		if single > 0 {
			b.ReportMetric(d.Seconds()/single.Seconds(), "x-single")
		}
		b.ReportMetric(0, "ns/op")
	})
}
