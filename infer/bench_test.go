package infer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ort "github.com/yalue/onnxruntime_go"
)

// Benchmarks report their own percentiles: `make bench` runs each body once
// (-benchtime 1x), so every body repeats its requests itself.

// benchSizes is the MLP the benchmarks serve: 64 features, two hidden layers
// of 256, 16 outputs.
var benchSizes = []int{64, 256, 256, 16}

func percentile(d []time.Duration, p float64) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return float64(s[i].Nanoseconds()) / 1e3
}

func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	b.ReportMetric(percentile(lat, 0.50), "p50-us")
	b.ReportMetric(percentile(lat, 0.95), "p95-us")
	b.ReportMetric(percentile(lat, 0.99), "p99-us")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkHTTPPath compares inference three ways over the same MLP: ONNX
// Runtime called in-process (ort-direct), a minimal net/http handler decoding
// the same JSON into the same session (minimal-http), and the Open Inference
// Protocol handler over loopback HTTP, with JSON tensors (strata) and with the
// binary tensor data extension (strata-binary). Batch 1 is the edge case of
// one client row; batch 64 shows where the JSON codec dominates.
func BenchmarkHTTPPath(b *testing.B) {
	lib := needRuntime(b)
	m := newMLP(b, 1, benchSizes...)
	features := benchSizes[0]

	s, err := New(Config{LibraryPath: lib, NodeName: "bench", Logger: discard()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	load(b, s, "m", "1", m.model)
	// All of them call the very session the server loaded.
	sess := s.models["m"].sess
	direct := func(x []float32, n int) ([]float32, error) {
		in, err := ort.NewTensor(ort.NewShape(int64(n), int64(len(x)/n)), x)
		if err != nil {
			return nil, err
		}
		defer in.Destroy()
		outs := []ort.Value{nil}
		if err := sess.Run([]ort.Value{in}, outs); err != nil {
			return nil, err
		}
		defer outs[0].Destroy()
		return outs[0].(*ort.Tensor[float32]).GetData(), nil
	}

	post := func(client *http.Client, url string, body []byte, hdr map[string]string) func() error {
		return func() error {
			req, err := http.NewRequest("POST", url, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return err
		}
	}
	minimal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Inputs []struct {
				Name     string    `json:"name"`
				Shape    []int64   `json:"shape"`
				Datatype string    `json:"datatype"`
				Data     []float32 `json:"data"`
			} `json:"inputs"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Inputs) != 1 || len(req.Inputs[0].Shape) != 2 {
			http.Error(w, "bad request", 400)
			return
		}
		n := int(req.Inputs[0].Shape[0])
		out, err := direct(req.Inputs[0].Data, n)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		type tensor struct {
			Name     string    `json:"name"`
			Datatype string    `json:"datatype"`
			Shape    []int64   `json:"shape"`
			Data     []float32 `json:"data"`
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"model_name": "m", "outputs": []tensor{{"output", "FP32", []int64{int64(n), int64(len(out) / n)}, out}}})
	}))
	defer minimal.Close()

	strata := httptest.NewServer(s.Handler())
	defer strata.Close()
	url := strata.URL + "/v2/models/m/infer"

	for _, batch := range []int{1, 64} {
		x := rows(1, batch, features)
		jsonBody := []byte(fmt.Sprintf(`{"inputs":[{"name":"input","shape":[%d,%d],"datatype":"FP32","data":%s}]}`, batch, features, appendData(nil, x)))
		binHeader := fmt.Sprintf(`{"inputs":[{"name":"input","shape":[%d,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}],"parameters":{"binary_data_output":true}}`, batch, features, 4*len(x))
		binBody := appendBinary([]byte(binHeader), x)
		impls := []namedFunc{
			{"ort-direct", func() error { _, err := direct(x, batch); return err }},
			{"minimal-http", post(minimal.Client(), minimal.URL, jsonBody, nil)},
			{"strata", post(strata.Client(), url, jsonBody, nil)},
			{"strata-binary", post(strata.Client(), url, binBody, map[string]string{headerLengthKey: strconv.Itoa(len(binHeader))})},
		}
		perRound := 300
		if batch > 1 {
			perRound = 60
		}
		res := interleave(b, impls, 10, perRound, 1)
		for _, im := range impls {
			b.Run(fmt.Sprintf("batch=%d/impl=%s", batch, im.name), func(b *testing.B) { res[im.name].report(b) })
		}
	}
}

type namedFunc struct {
	name string
	f    func() error
}

type measured struct {
	lat     []time.Duration
	elapsed time.Duration
}

func (m measured) report(b *testing.B) { reportLatency(b, m.lat, m.elapsed) }

// interleave measures impls in rounds, rotating their order each round, so
// that noise from other work on the machine falls on all of them alike. Each
// round runs perRound requests per worker from conc workers per impl, after
// one unmeasured warm-up round.
func interleave(b *testing.B, impls []namedFunc, rounds, perRound, conc int) map[string]measured {
	out := map[string]measured{}
	for r := -1; r < rounds; r++ {
		for k := range impls {
			im := impls[(k+max(r, 0))%len(impls)]
			lat := make([][]time.Duration, conc)
			errs := make(chan error, conc)
			var wg sync.WaitGroup
			start := time.Now()
			for w := 0; w < conc; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					l := make([]time.Duration, 0, perRound)
					for i := 0; i < perRound; i++ {
						t0 := time.Now()
						if err := im.f(); err != nil {
							errs <- err
							return
						}
						l = append(l, time.Since(t0))
					}
					lat[w] = l
				}(w)
			}
			wg.Wait()
			elapsed := time.Since(start)
			close(errs)
			for err := range errs {
				b.Fatalf("%s: %v", im.name, err)
			}
			if r < 0 {
				continue
			}
			m := out[im.name]
			for _, l := range lat {
				m.lat = append(m.lat, l...)
			}
			m.elapsed += elapsed
			out[im.name] = m
		}
	}
	return out
}

// BenchmarkBatching drives one-row requests at concurrency 1, 8 and 32
// through Server.Infer with dynamic batching (strata) and without
// (unbatched), reporting throughput, latency percentiles and rows per
// session call.
//
// Read the unbatched percentiles with care: with more workers than cores,
// an unbatched worker holds its processor through its short ONNX Runtime
// call and runs request after request until descheduled, so its waits for a
// CPU fall between measured calls and show in throughput, not in the
// percentiles. The time a closed-loop client spends per request is
// concurrency / throughput (Little's law), reported as client-us. The
// offered=... rows put both under the same open-loop load (80% of what
// unbatched serves at concurrency 32), with latency counted from each
// request's due time, waits for a CPU included.
func BenchmarkBatching(b *testing.B) {
	lib := needRuntime(b)
	m := newMLP(b, 1, benchSizes...)
	x := rows(1, 1, benchSizes[0])
	servers := map[string]*Server{}
	var impls []namedFunc
	for _, impl := range []string{"strata", "unbatched"} {
		s, err := New(Config{LibraryPath: lib, Logger: discard(), Registerer: prometheus.NewRegistry(), DisableBatching: impl == "unbatched"})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		load(b, s, "m", "1", m.model)
		servers[impl] = s
		impls = append(impls, namedFunc{impl, func() error {
			_, err := s.Infer(context.Background(), &Request{Model: "m", Inputs: []Tensor{{Name: "input", Datatype: FP32, Shape: []int64{1, int64(len(x))}, Data: x}}})
			return err
		}})
	}
	const total = 4000 // requests per impl per round
	var unbatchedRate float64
	for _, conc := range []int{1, 8, 32} {
		before := map[string][2]float64{}
		for name, s := range servers {
			before[name] = batchRows(b, s)
		}
		res := interleave(b, impls, 6, max(total/conc, 20), conc)
		if r := res["unbatched"]; conc == 32 {
			unbatchedRate = float64(len(r.lat)) / r.elapsed.Seconds()
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("conc=%d/impl=%s", conc, im.name), func(b *testing.B) {
				r := res[im.name]
				r.report(b)
				b.ReportMetric(float64(conc)*r.elapsed.Seconds()/float64(len(r.lat))*1e6, "client-us")
				after := batchRows(b, servers[im.name])
				prev := before[im.name]
				b.ReportMetric((after[0]-prev[0])/(after[1]-prev[1]), "rows/call")
			})
		}
	}
	// The same offered load for both, 80% of what unbatched serves at
	// concurrency 32: latency from each request's due time, so waiting for
	// a CPU counts (a closed loop hides it; see above).
	rate := 0.8 * unbatchedRate
	lat := openLoop(b, impls, rate, 20000, 3)
	for _, im := range impls {
		b.Run(fmt.Sprintf("offered=%.0fk-per-s/impl=%s", rate/1000, im.name), func(b *testing.B) {
			l := lat[im.name]
			b.ReportMetric(percentile(l, 0.50), "p50-us")
			b.ReportMetric(percentile(l, 0.95), "p95-us")
			b.ReportMetric(percentile(l, 0.99), "p99-us")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// openLoop offers n requests at rate per second, each due at a fixed
// time, from more workers than ever have a request in hand, and returns the
// latencies measured from each request's due time: unlike a closed loop,
// the time a request waits for a CPU (or a worker) counts. Rounds of the
// implementations interleave as in interleave.
func openLoop(b *testing.B, impls []namedFunc, rate float64, n, rounds int) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for r := -1; r < rounds; r++ {
		for k := range impls {
			im := impls[(k+max(r, 0))%len(impls)]
			lat := make([]time.Duration, n)
			var next atomic.Int64
			var failed atomic.Value
			start := time.Now().Add(time.Millisecond)
			var wg sync.WaitGroup
			for range 128 {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(n) {
							return
						}
						due := start.Add(time.Duration(float64(i) / rate * 1e9))
						// The sleep is the open-loop schedule itself: a
						// request is offered at its due time, not when the
						// previous one finished. Nothing is awaited here.
						if d := time.Until(due); d > 0 {
							time.Sleep(d)
						}
						if err := im.f(); err != nil {
							failed.Store(err)
							return
						}
						lat[i] = time.Since(due)
					}
				})
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatalf("%s: %v", im.name, err)
			}
			if r >= 0 {
				out[im.name] = append(out[im.name], lat...)
			}
		}
	}
	return out
}

// batchRows returns the sum of rows and the number of session calls so far.
func batchRows(b *testing.B, s *Server) [2]float64 {
	mfs, err := s.cfg.Registerer.(*prometheus.Registry).Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "strata_infer_batch_rows" {
			h := mf.GetMetric()[0].GetHistogram()
			return [2]float64{h.GetSampleSum(), float64(h.GetSampleCount())}
		}
	}
	return [2]float64{}
}

// BenchmarkLoadToServing measures a model from its bytes to its first
// answer through the OIP handler: a small MLP and one of about 17 MB.
func BenchmarkLoadToServing(b *testing.B) {
	s, _ := newServer(b, Config{})
	for _, c := range []struct {
		impl  string
		sizes []int
	}{{"small", []int{8, 32, 1}}, {"17MB", []int{1024, 2048, 1024, 1}}} {
		b.Run("impl="+c.impl, func(b *testing.B) {
			m := newMLP(b, 1, c.sizes...)
			data, _ := json.Marshal(rows(1, 1, c.sizes[0]))
			body := fmt.Sprintf(`{"inputs":[{"name":"input","shape":[1,%d],"datatype":"FP32","data":%s}]}`, c.sizes[0], data)
			var took []float64
			for i := range b.N {
				start := time.Now()
				load(b, s, "m-"+c.impl, strconv.Itoa(i+1), m.model)
				if code, out, _ := raw(s.Handler(), "/v2/models/m-"+c.impl+"/infer", body); code != 200 {
					b.Fatalf("infer = %d %s", code, out)
				}
				took = append(took, time.Since(start).Seconds()*1000)
			}
			slices.Sort(took)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(took[len(took)/2], "ms-median")
			b.ReportMetric(float64(len(m.model))/1e6, "MB")
		})
	}
}

// BenchmarkLargeRequest sends one 48 MB request (2.6M rows) to a
// scikit-learn style classifier (ZipMap probabilities), as rows over
// MaxRunRows run in parts (impl=strata) and as one session call
// (impl=whole, MaxRunRows above the rows): the process's peak RSS while
// it is answered, and its RSS 5 s after, each above the RSS before. The
// parts row runs first: ONNX Runtime keeps what the whole call took.
func BenchmarkLargeRequest(b *testing.B) {
	lib := needRuntime(b)
	model, err := os.ReadFile("testdata/sklearn_like_str.onnx")
	if err != nil {
		b.Fatal(err)
	}
	const n = 2_600_000
	var body bytes.Buffer
	body.WriteString(`{"inputs":[{"name":"float_input","shape":[` + strconv.Itoa(n) + `,3],"datatype":"FP32","data":[`)
	for i, x := range rows(9, n, 3) {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(strconv.FormatFloat(float64(x), 'g', 4, 32))
	}
	body.WriteString(`]}]}`)
	for _, c := range []struct {
		impl string
		rows int
	}{{"strata", 0}, {"whole", 2 * n}} {
		b.Run("impl="+c.impl, func(b *testing.B) {
			s, _ := newServer(b, Config{LibraryPath: lib, DisableBatching: true, MaxRunRows: c.rows})
			load(b, s, "skl", "1", model)
			for range b.N {
				runtime.GC()
				debug.FreeOSMemory()
				before := procStatus(b, "VmRSS:")
				if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
					b.Skipf("cannot reset the peak RSS: %v", err)
				}
				start := time.Now()
				rec := httptest.NewRecorder()
				s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v2/models/skl/infer", bytes.NewReader(body.Bytes())))
				took := time.Since(start)
				if rec.Code != 200 {
					b.Fatalf("infer = %d %.200s", rec.Code, rec.Body.String())
				}
				peak := procStatus(b, "VmHWM:")
				rec = nil
				time.Sleep(5 * time.Second) // what the RSS comes back to, by itself, 5 s after
				b.ReportMetric(float64(body.Len())/1e6, "body-MB")
				b.ReportMetric(float64(peak-before)/1e3, "peak-MB")
				b.ReportMetric(float64(procStatus(b, "VmRSS:")-before)/1e3, "after-5s-MB")
				b.ReportMetric(took.Seconds(), "s")
			}
		})
	}
}

// procStatus reads a kB figure of /proc/self/status.
func procStatus(b *testing.B, key string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	b.Skipf("no %s in /proc/self/status", key)
	return 0
}
