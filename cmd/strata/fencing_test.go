package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// signalTree sends sig to pid and every process descended from it, as a
// host's pause (a frozen VM) stops an agent and the jobs it runs alike.
func signalTree(pid int, sig syscall.Signal) {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; ppid follows
		// the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				children[pp] = append(children[pp], p)
			}
		}
	}
	var walk func(int)
	walk = func(p int) {
		_ = syscall.Kill(p, sig)
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
}

// TestPausedJobRunsOnce pauses the host that runs a training job (the
// agent and the job's processes stopped alike) for longer than failure
// detection, so the job's owner places it again elsewhere, then resumes
// it. The job is recorded as run to completion once, by the node it was
// placed on again: the paused node's run, paused for longer than its
// lease, is stopped and its outcome not recorded.
func TestPausedJobRunsOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("about a minute of real time")
	}
	dir := t.TempDir()
	seed := &proc{name: "c1", dir: filepath.Join(dir, "c1"), api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		args: []string{"-tier", "cloud", "-site", "dc", "-log-level", "info"}}
	startAgent(t, seed)
	agents := map[string]*proc{"c1": seed}
	for _, name := range []string{"e1", "e2"} {
		p := &proc{name: name, dir: filepath.Join(dir, name), api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			args: []string{"-tier", "edge", "-site", "edge-a", "-join", seed.gossip, "-log-level", "info"}}
		startAgent(t, p)
		agents[name] = p
	}
	dump := func() {
		for _, p := range agents {
			t.Logf("%s log:\n%s", p.name, p.log)
		}
		for _, what := range []string{"placements", "jobs"} {
			out, err := cli(t, seed.api, what)
			t.Logf("strata %s: %v\n%s", what, err, out)
		}
	}
	meshtest.Poll(t, 30*time.Second, 100*time.Millisecond, "three agents", func() bool { return len(membersOf(t, seed.api)) == 3 }, dump)

	ran := filepath.Join(dir, "ran")
	job := filepath.Join(dir, "job.yaml")
	os.WriteFile(job, []byte(`apiVersion: strata/v1
kind: TrainingJob
metadata: {name: once}
spec:
  resources: {cpu: 10m, memory: 16Mi}
  tiers: [edge]
  command: [sh, -c, 'sleep 8; echo "$PWD" >> `+ran+`']
`), 0o600)
	if out, err := cli(t, seed.api, "apply", "-f", job); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	jobOn := func() (node, state string) {
		out, err := cli(t, seed.api, "jobs", "-o", "json")
		if err != nil {
			return "", ""
		}
		var js []api.Job
		if json.Unmarshal([]byte(out), &js) != nil {
			return "", ""
		}
		for _, j := range js {
			if j.Name == "once" {
				return j.Node, j.State
			}
		}
		return "", ""
	}
	var first string
	meshtest.Poll(t, 30*time.Second, 100*time.Millisecond, "the job running", func() bool {
		n, st := jobOn()
		first = n
		return st == "running"
	}, dump)
	paused := agents[first]
	signalTree(paused.cmd.Process.Pid, syscall.SIGSTOP)
	pausedAt := time.Now()
	meshtest.Poll(t, 60*time.Second, 100*time.Millisecond, "the job running on the other edge node", func() bool {
		n, st := jobOn()
		return n != first && n != "" && st == "running"
	}, func() { signalTree(paused.cmd.Process.Pid, syscall.SIGCONT); dump() })
	t.Logf("placed again %s after the pause", time.Since(pausedAt).Round(100*time.Millisecond))
	// Stay paused past the paused run's own end (8s after it started).
	time.Sleep(time.Until(pausedAt.Add(10 * time.Second))) // the pause under test
	signalTree(paused.cmd.Process.Pid, syscall.SIGCONT)
	meshtest.Poll(t, 60*time.Second, 200*time.Millisecond, "the job done", func() bool {
		_, st := jobOn()
		return st == "succeeded"
	}, dump)
	// Give the resumed node time to record its run, if it wrongly would.
	time.Sleep(5 * time.Second) // the window a double completion would land in
	b, _ := os.ReadFile(ran)
	t.Logf("processes that ran to their end: %q (a process frozen with its host ends when the host resumes, before its agent can stop it; its run is not recorded)", strings.Fields(string(b)))
	if n, st := jobOn(); st != "succeeded" || n == first {
		t.Errorf("job record: %s on %s, want succeeded on the node it was placed on again", st, n)
	}
	succeeded := 0
	for _, p := range agents {
		succeeded += strings.Count(p.log.String(), "training job succeeded")
	}
	if succeeded != 1 {
		t.Errorf("%d runs recorded as succeeded, want 1", succeeded)
	}
	if !strings.Contains(paused.log.String(), "training job run fenced") && !strings.Contains(paused.log.String(), "training job run stopped: placed elsewhere") {
		t.Errorf("the resumed node did not say it dropped its run")
	}
	if t.Failed() {
		dump()
	}
}
