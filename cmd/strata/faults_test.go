package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/testbed"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// faultMinutes is how long TestFaultSchedule injects faults.
const faultMinutes = 5

// TestFaultSchedule runs six agents in three sites of the testbed (10–30
// ms apart) for five minutes of random faults, one at a time: a site cut
// off for 15–40 s, an agent killed with -9 and restarted 5–15 s later, an
// agent's host paused (the agent and its jobs stopped) for 5–20 s. A client
// applies a policy through a random agent every 1.5 s, and a training job
// (20 s long) every 40 s. After the faults end and the mesh is whole again, every
// policy whose apply was acknowledged is held by every agent, and every
// job is recorded as run to completion exactly once.
func TestFaultSchedule(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("five minutes of faults")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("fault schedule seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	bed := testbed.Start(t, testbed.Site{Name: "edge-a", Hosts: 2}, testbed.Site{Name: "edge-b", Hosts: 2}, testbed.Site{Name: "cloud", Hosts: 2})
	bed.SetLink("edge-a", "edge-b", 10*time.Millisecond, 0)
	bed.SetLink("edge-a", "cloud", 20*time.Millisecond, 0)
	bed.SetLink("edge-b", "cloud", 30*time.Millisecond, 0)
	sites := []string{"edge-a", "edge-b", "cloud"}
	c1, c2 := bed.Host("cloud", 0), bed.Host("cloud", 1)
	var agents []*nsAgent
	hostOf := map[*nsAgent]testbed.Host{}
	for _, site := range sites {
		tier := "edge"
		if site == "cloud" {
			tier = "cloud"
		}
		for _, h := range bed.Hosts(site) {
			a := &nsAgent{ns: netns{h.NS}, name: h.Name, site: site, gossip: 7946, api: 7470, data: 7471,
				args: []string{"-tier", tier, "-log-level", "info"}}
			for _, c := range []testbed.Host{c1, c2} {
				if c.Name != h.Name {
					a.args = append(a.args, "-join", c.IP.String()+":7946")
				}
			}
			a.start(t)
			agents = append(agents, a)
			hostOf[a] = h
		}
	}
	dump := func() {
		for _, a := range agents {
			t.Logf("%s log (last 4000 bytes):\n%s", a.name, tail(a.proc.log.String(), 4000))
		}
	}
	whole := func() bool {
		for _, a := range agents {
			if !a.seesAlive(t, len(agents)) {
				return false
			}
		}
		return true
	}
	meshtest.Poll(t, 60*time.Second, 250*time.Millisecond, "one mesh of six", whole, dump)

	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	down := map[*nsAgent]bool{}      // killed or paused: the client leaves it alone
	killed := map[*nsAgent][]*proc{} // the processes of agents killed and restarted since
	logsOf := func(a *nsAgent) string {
		var b strings.Builder
		for _, p := range killed[a] {
			b.WriteString(p.log.String())
		}
		return b.String() + a.proc.log.String()
	}
	var acked, jobs []string
	apply := func(a *nsAgent, name, doc string) bool {
		f := filepath.Join(dir, name+".yaml")
		os.WriteFile(f, []byte(doc), 0o600)
		_, err := a.run("apply", "-f", f)
		return err == nil
	}
	service := func(name string) string {
		return "apiVersion: strata/v1\nkind: InferenceService\nmetadata: {name: " + name + "}\nspec:\n  model: {name: m, version: \"1\"}\n  replicas: 1\n  resources: {cpu: 10m, memory: 16Mi}\n"
	}
	job := func(name string) string {
		return "apiVersion: strata/v1\nkind: TrainingJob\nmetadata: {name: " + name + "}\nspec:\n  tiers: [edge, cloud]\n  resources: {cpu: 10m, memory: 16Mi}\n" +
			"  command: [sh, -c, 'sleep 20; echo \"" + name + " $PWD\" >> " + ran + "']\n"
	}
	up := func() []*nsAgent {
		var out []*nsAgent
		for _, a := range agents {
			if !down[a] {
				out = append(out, a)
			}
		}
		return out
	}

	// The faults, one at a time, in their own goroutine; the client runs
	// here. Every fault undoes itself before the next starts.
	type fault struct {
		start time.Time
		what  string
	}
	faults := make(chan fault, 64)
	var mu sync.Mutex // guards down and killed between the two goroutines
	lock, unlock := mu.Lock, mu.Unlock
	t.Cleanup(func() {
		// On failure, every process's whole log, kept with go test
		// -artifacts: the dump gives each agent's last 4 KB only.
		if !t.Failed() {
			return
		}
		d := t.ArtifactDir()
		lock()
		defer unlock()
		for _, a := range agents {
			_ = os.WriteFile(filepath.Join(d, a.name+".log"), []byte(logsOf(a)), 0o644)
		}
		t.Logf("every agent's whole log (each of its processes, in order) is in %s", d)
	})
	end := time.Now().Add(faultMinutes * time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Now().Before(end) {
			time.Sleep(time.Duration(10+rng.IntN(10)) * time.Second) // the quiet time between faults: part of the random schedule under test
			lock()
			var cands []*nsAgent
			for _, a := range agents {
				if !down[a] {
					cands = append(cands, a)
				}
			}
			a := cands[rng.IntN(len(cands))]
			kind := rng.IntN(3)
			if kind != 0 {
				down[a] = true
			}
			unlock()
			switch kind {
			case 0:
				site := sites[rng.IntN(len(sites))]
				d := time.Duration(15+rng.IntN(26)) * time.Second
				faults <- fault{time.Now(), fmt.Sprintf("cut %s off for %s", site, d)}
				for _, o := range sites {
					if o != site {
						bed.Cut(site, o)
					}
				}
				time.Sleep(d) // the cut under test
				for _, o := range sites {
					if o != site {
						bed.Heal(site, o)
					}
				}
			case 1:
				d := time.Duration(5+rng.IntN(11)) * time.Second
				faults <- fault{time.Now(), fmt.Sprintf("kill -9 %s, restart after %s", a.name, d)}
				a.proc.cmd.Process.Signal(syscall.SIGKILL)
				a.proc.cmd.Wait()
				time.Sleep(d) // the outage under test
				lock()
				killed[a] = append(killed[a], a.proc)
				unlock()
				a.start(t)
			case 2:
				d := time.Duration(5+rng.IntN(16)) * time.Second
				faults <- fault{time.Now(), fmt.Sprintf("pause %s for %s", a.name, d)}
				signalTree(a.proc.cmd.Process.Pid, syscall.SIGSTOP)
				time.Sleep(d) // the pause under test
				signalTree(a.proc.cmd.Process.Pid, syscall.SIGCONT)
			}
			lock()
			delete(down, a)
			unlock()
		}
	}()
	start := time.Now()
	nextJob := start.Add(10 * time.Second)
	writes := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
			continue
		case f := <-faults:
			t.Logf("%5.1fs: %s", f.start.Sub(start).Seconds(), f.what)
			continue
		case <-time.After(1500 * time.Millisecond): // the client's pace: one write every 1.5s
		}
		lock()
		cands := up()
		unlock()
		a := cands[rng.IntN(len(cands))]
		if time.Now().After(nextJob) {
			name := fmt.Sprintf("job-%d", len(jobs))
			if apply(a, name, job(name)) {
				jobs = append(jobs, name)
			}
			nextJob = nextJob.Add(40 * time.Second)
			continue
		}
		writes++
		name := fmt.Sprintf("w-%03d", writes)
		if apply(a, name, service(name)) {
			acked = append(acked, name)
		}
	}
	for len(faults) > 0 {
		f := <-faults
		t.Logf("%5.1fs: %s", f.start.Sub(start).Seconds(), f.what)
	}
	t.Logf("%d of %d policy writes acknowledged, %d training jobs applied", len(acked), writes, len(jobs))

	healed := time.Now()
	meshtest.Poll(t, 2*time.Minute, time.Second, "one mesh of six after the faults", whole, dump)
	t.Logf("one mesh again %s after the last fault", time.Since(healed).Round(100*time.Millisecond))
	policiesAt := func(a *nsAgent) map[string]bool {
		resp, err := inHost(hostOf[a]).Get("http://127.0.0.1:7470/v1/policies")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var ps []api.Policy
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&ps) != nil {
			return nil
		}
		out := map[string]bool{}
		for _, p := range ps {
			out[p.Name] = true
		}
		return out
	}
	var missing []string
	meshtest.Poll(t, time.Minute, time.Second, "every acknowledged write at every agent", func() bool {
		missing = missing[:0]
		for _, a := range agents {
			held := policiesAt(a)
			for _, name := range append(slices.Clone(acked), jobs...) {
				if !held[name] {
					missing = append(missing, a.name+":"+name)
				}
			}
		}
		return len(missing) == 0
	}, func() { t.Logf("missing: %v", missing); dump() })

	jobState := func() map[string]string {
		out := map[string]string{}
		var js []api.Job
		if agents[4].get(t, &js, "jobs") != nil {
			return out
		}
		for _, j := range js {
			out[j.Name] = j.State
		}
		return out
	}
	meshtest.Poll(t, 3*time.Minute, time.Second, "every training job succeeded", func() bool {
		st := jobState()
		for _, j := range jobs {
			if st[j] != "succeeded" {
				return false
			}
		}
		return true
	}, func() {
		var js []api.Job
		_ = agents[4].get(t, &js, "jobs")
		for _, j := range js {
			t.Logf("job %s: %s %s (epoch %d, node %s)", j.Name, j.State, j.Error, j.Epoch, j.Node)
		}
		dump()
	})
	time.Sleep(5 * time.Second) // a late second completion would be recorded within this
	for _, j := range jobs {
		n := 0
		for _, a := range agents {
			for _, line := range strings.Split(logsOf(a), "\n") {
				if strings.Contains(line, `msg="training job succeeded"`) && slices.Contains(strings.Fields(line), "job="+j) {
					n++
				}
			}
		}
		if n != 1 {
			t.Errorf("%s recorded as run to completion %d times, want once", j, n)
		}
	}
	b, _ := os.ReadFile(ran)
	t.Logf("job processes that ran to their end (a process paused with its host ends when the host resumes, before its agent can stop it; such a run is not recorded):\n%s", b)
	if t.Failed() {
		dump()
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
