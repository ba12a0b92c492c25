package infer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestHotSwapNoFailures loads version after version of one model while
// clients (in Go and over HTTP) keep asking it; every request must succeed
// and its outputs must be those of the version it says answered.
func TestHotSwapNoFailures(t *testing.T) {
	s, _ := newServer(t, Config{})
	const versions = 12
	models := make([]mlp, versions+1)
	for i := 1; i <= versions; i++ {
		models[i] = newMLP(t, int64(i), 4, 8, 2)
	}
	load(t, s, "m", "1", models[1].model)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	x := []float32{0.1, 0.2, -0.3, 0.4}
	var stop atomic.Bool
	var served sync.Map // version -> count
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				var ver string
				var got []float32
				if c%2 == 0 {
					resp, err := s.Infer(context.Background(), &Request{Model: "m", Inputs: []Tensor{{Name: "input", Datatype: FP32, Shape: []int64{1, 4}, Data: x}}})
					if err != nil {
						errs <- err
						return
					}
					ver, got = resp.Version, resp.Outputs[0].Data.([]float32)
				} else {
					var err error
					ver, got, err = httpInfer(srv.URL, x)
					if err != nil {
						errs <- err
						return
					}
				}
				n, _ := strconv.Atoi(ver)
				if n < 1 || n > versions {
					errs <- fmt.Errorf("answered by unknown version %q", ver)
					return
				}
				want := models[n].predict(x, 1)
				for k := range want {
					if d := want[k] - got[k]; d > 1e-4 || d < -1e-4 {
						errs <- fmt.Errorf("version %s answered %v, its model gives %v", ver, got, want)
						return
					}
				}
				v, _ := served.LoadOrStore(ver, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
		}(c)
	}
	var old []*version
	for i := 2; i <= versions; i++ {
		s.mu.RLock()
		old = append(old, s.models["m"])
		s.mu.RUnlock()
		if err := s.Load(context.Background(), "m", strconv.Itoa(i), models[i].model); err != nil {
			t.Fatal(err)
		}
		// Let some requests reach the new version before the next swap, so
		// swaps overlap in-flight requests rather than racing ahead of them.
		waitFor(t, func() bool {
			c, ok := served.Load(strconv.Itoa(i))
			return ok && c.(*atomic.Int64).Load() >= 20
		})
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, v := range old {
		if !v.closed.Load() {
			t.Errorf("version %s still open after being swapped out and drained", v.info.Version)
		}
	}
}

func httpInfer(url string, x []float32) (string, []float32, error) {
	body := fmt.Sprintf(`{"inputs":[{"name":"input","shape":[1,%d],"datatype":"FP32","data":%s}]}`, len(x), appendData(nil, x))
	resp, err := http.Post(url+"/v2/models/m/infer", "application/json", strings.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var out struct {
		ModelVersion string `json:"model_version"`
		Outputs      []struct {
			Data []float32 `json:"data"`
		} `json:"outputs"`
		Error string `json:"error"`
	}
	if err := decodeJSON(resp.Body, &out); err != nil {
		return "", nil, err
	}
	if resp.StatusCode != 200 {
		return "", nil, fmt.Errorf("status %d: %s", resp.StatusCode, out.Error)
	}
	return out.ModelVersion, out.Outputs[0].Data, nil
}
