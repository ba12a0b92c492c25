package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDriftTable: strata drift says where a capture for a retrain stands
// and when a monitor compares with its site's own reference.
func TestDriftTable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[
 {"policy":"InferenceService/scorer","model":"scorer","version":"1","site":"edge-a","node":"edge-a-1","detector":"ks","threshold":0.001,"window":200,
  "reference":"training","ready":true,"state":"alarm","seen":611,"alarmed":true,"alarm_seen":411,"capture":{"alarm_at":"2026-11-28T21:00:00Z","rows":37,"want":150}},
 {"policy":"InferenceService/scorer","model":"scorer","version":"2","site":"edge-b","node":"edge-b-1","detector":"ks","threshold":0.001,"window":200,
  "reference":"training","reference_site":"edge-b","ready":true,"state":"ok","seen":900,"capture":{"alarm_at":"2026-11-28T21:00:00Z","rows":150,"want":150,"dataset":"scorer-capture:edge-b-1-20261128T210000Z"}}
]`)
	}))
	t.Cleanup(srv.Close)
	var out, errb bytes.Buffer
	if code := run([]string{"drift", "-address", srv.URL}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"DRIFT (at 411), capturing 37/150 rows", "ok, captured scorer-capture:edge-b-1-20261128T210000Z, edge-b's reference"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("strata drift:\n%s\nwant %q", out.String(), want)
		}
	}
}
