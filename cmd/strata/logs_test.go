package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestLogsFollow: -f prints what the job writes as it writes it, each
// byte once, and returns when the job has ended.
func TestLogsFollow(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	outputs := []string{"epoch 1\n", "epoch 1\nepoch 2\n", "epoch 1\nepoch 2\nsaved model.onnx\n"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(calls.Load())
		switch r.URL.Path {
		case "/v1/jobs/j":
			calls.Add(1)
			state := "running"
			if n >= 2 {
				state = "succeeded"
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"name":"j","state":%q}`, state)
		case "/v1/jobs/j/logs":
			fmt.Fprint(w, outputs[min(n-1, 2)])
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if err := runLogs([]string{"-address", srv.URL, "-f", "j"}, &out, &errb); err != nil {
		t.Fatalf("logs -f: %v %s", err, errb.String())
	}
	if want := outputs[2]; out.String() != want {
		t.Errorf("logs -f printed %q, want %q", out.String(), want)
	}
}
