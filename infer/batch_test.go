package infer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// waitFor polls cond until it holds, failing tb after 20 seconds.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within 20s")
		}
		time.Sleep(time.Millisecond) // polling interval, not a wait for an effect
	}
}

// TestBatchingGivesEachCallerItsRows holds the model's only runner so that
// concurrent requests pile up into one batch, then checks that the batch ran
// as one session call and that every caller got the rows for its inputs.
func TestBatchingGivesEachCallerItsRows(t *testing.T) {
	const callers = 6
	rowsEach := []int{1, 2, 3, 1, 2, 3} // 12 rows: exactly MaxBatch
	s, reg := newServer(t, Config{BatchWindow: time.Hour, MaxBatch: 12, BatchRunners: 1})
	m := newMLP(t, 9, 5, 7, 3)
	load(t, s, "m", "1", m.model)
	s.mu.RLock()
	b := s.models["m"].batcher
	s.mu.RUnlock()
	if b == nil {
		t.Fatal("model with a dynamic batch dimension is not batched")
	}
	b.slots <- struct{}{} // occupy the runner

	var wg sync.WaitGroup
	got := make([][]float32, callers)
	errs := make([]error, callers)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			x := rows(c, rowsEach[c], 5)
			resp, err := s.Infer(context.Background(), &Request{Model: "m", Inputs: []Tensor{{Name: "input", Datatype: FP32, Shape: []int64{int64(rowsEach[c]), 5}, Data: x}}})
			if err != nil {
				errs[c] = err
				return
			}
			if diff := cmp.Diff([]int64{int64(rowsEach[c]), 3}, resp.Outputs[0].Shape); diff != "" {
				t.Errorf("caller %d output shape (-want +got):\n%s", c, diff)
			}
			got[c] = resp.Outputs[0].Data.([]float32)
		}(c)
	}
	// The batch is full once every request has joined it.
	waitFor(t, func() bool { return b.queued.Load() == callers })
	<-b.slots // free the runner
	wg.Wait()
	for c := range errs {
		if errs[c] != nil {
			t.Fatalf("caller %d: %v", c, errs[c])
		}
		assertClose(t, m.predict(rows(c, rowsEach[c], 5), rowsEach[c]), got[c], 1e-4)
	}
	if diff := cmp.Diff(1.0, gather(t, reg)[`strata_infer_batch_rows{model="m",version="1"}`]); diff != "" {
		t.Errorf("session calls (-want +got):\n%s", diff)
	}
}

// TestBatchingUnderLoad sends distinct inputs from many goroutines at once;
// whatever batches form, every caller must get exactly its own rows.
func TestBatchingUnderLoad(t *testing.T) {
	s, reg := newServer(t, Config{})
	m := newMLP(t, 4, 6, 8, 2)
	load(t, s, "m", "1", m.model)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				n := 1 + (c+i)%3
				x := rows(c*1000+i, n, 6)
				resp, err := s.Infer(context.Background(), &Request{Model: "m", Inputs: []Tensor{{Name: "input", Datatype: FP32, Shape: []int64{int64(n), 6}, Data: x}}})
				if err != nil {
					errs <- err
					return
				}
				want, got := m.predict(x, n), resp.Outputs[0].Data.([]float32)
				for k := range want {
					if d := want[k] - got[k]; d > 1e-4 || d < -1e-4 || len(got) != len(want) {
						errs <- fmt.Errorf("caller %d request %d: got %v, want %v", c, i, got, want)
						return
					}
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("640 requests in %v session calls", gather(t, reg)[`strata_infer_batch_rows{model="m",version="1"}`])
}
