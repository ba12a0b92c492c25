package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/api/client"
)

func TestParseArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args      []string
		pos       []string
		kind, out string
	}{
		{args: []string{"x:1"}, pos: []string{"x:1"}, kind: "model"},
		{args: []string{"x:1", "--kind", "dataset"}, pos: []string{"x:1"}, kind: "dataset"},
		{args: []string{"--kind", "dataset", "x:1"}, pos: []string{"x:1"}, kind: "dataset"},
		{args: []string{"--kind", "dataset", "x:1", "--output", "f"}, pos: []string{"x:1"}, kind: "dataset", out: "f"},
		{args: []string{"a", "-kind=code", "b", "-output", "f", "c"}, pos: []string{"a", "b", "c"}, kind: "code", out: "f"},
		{args: []string{"--kind", "dataset", "--", "-x", "--output"}, pos: []string{"-x", "--output"}, kind: "dataset"},
		{args: []string{"x", "--", "--kind"}, pos: []string{"x", "--kind"}, kind: "model"},
	} {
		fs := flag.NewFlagSet("pull", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		kind := fs.String("kind", "model", "")
		out := fs.String("output", "", "")
		pos, err := parseArgs(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *kind != tc.kind || *out != tc.out {
			t.Errorf("parseArgs(%q) = %q, kind %q, output %q, err %v; want %q, kind %q, output %q", tc.args, pos, *kind, *out, err, tc.pos, tc.kind, tc.out)
		}
	}
}

// TestHoistFlags: client flags written before the command go after it.
func TestHoistFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ args, want []string }{
		{[]string{"members"}, []string{"members"}},
		{[]string{"members", "-o", "json"}, []string{"members", "-o", "json"}},
		{[]string{"-address", "http://h:7470", "members"}, []string{"members", "-address", "http://h:7470"}},
		{[]string{"-o", "json", "-address=http://h:7470", "node", "gpu-1"}, []string{"node", "-o", "json", "-address=http://h:7470", "gpu-1"}},
		{[]string{"--token", "t", "apply", "-f", "x.yaml"}, []string{"apply", "--token", "t", "-f", "x.yaml"}},
		{[]string{"-address"}, []string{"-address"}},
	} {
		if got := hoistFlags(tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("hoistFlags(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestAgentErrorsForTheCLI: an agent's refusal reads as the CLI's user
// needs it: the command to run, not the API path, and no status code for
// a 4xx (a 5xx keeps it).
func TestAgentErrorsForTheCLI(t *testing.T) {
	t.Parallel()
	var c clientFlags
	for _, tc := range []struct {
		status int
		msg    string
		want   string
	}{
		{404, `no training job "x" (see GET /v1/jobs)`, `no training job "x" (strata jobs lists them)`},
		{409, "name taken", "name taken"},
		{503, "no mesh CA", "no mesh CA (HTTP 503)"},
	} {
		err := c.explain(&client.Error{Status: tc.status, Message: tc.msg, JSON: true})
		if err.Error() != tc.want {
			t.Errorf("%d %q reads %q, want %q", tc.status, tc.msg, err, tc.want)
		}
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != tc.status {
			t.Errorf("%d %q: the API error is not kept under it", tc.status, tc.msg)
		}
	}
}

// TestGetTakesFlagsBeforeTheKind: `strata -o json -address URL get
// placements` (the client flags before the command, hoisted after it)
// asks URL for the placements, as `strata get placements -o json
// -address URL` does.
func TestGetTakesFlagsBeforeTheKind(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-o", "json", "-address", "http://127.0.0.1:1", "get", "placements"},
		{"get", "-address", "http://127.0.0.1:1", "placements", "-o", "json"},
		{"get", "placements", "-o", "json", "-address", "http://127.0.0.1:1"},
	} {
		var out, errs strings.Builder
		code := run(args, &out, &errs)
		if code == 0 || !strings.Contains(errs.String(), "cannot reach the agent at http://127.0.0.1:1") || !strings.Contains(errs.String(), "/v1/placements") {
			t.Errorf("strata %s: exit %d, stderr %q; want it to ask http://127.0.0.1:1 for the placements", strings.Join(args, " "), code, errs.String())
		}
	}
}
