package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/policy"
	"github.com/strata-mesh/strata/storage"
	"github.com/strata-mesh/strata/trainer"
)

// An exec TrainingJob placed on several nodes runs as a gang: every member
// node's agent starts its own ranks, and the agent of rank 0 (the leader)
// coordinates them through two catalog tables.
//
//  1. No member acts until the whole gang is admitted (every node of the
//     placement admitted its share at the placement's epoch). A node that
//     cannot admit refuses, and the controller places the job again at a
//     new epoch; the others release the old one.
//  2. The leader allocates MASTER_PORT (free on its host) and writes the
//     gang record: run, attempt 1, starting, the ranks with their nodes'
//     advertised addresses.
//  3. Each member pulls the job's data and answers ready for that attempt.
//  4. When every member is ready the leader marks the attempt running, and
//     every member starts its ranks.
//  5. A rank exiting non-zero fails its member; a member failing (or its
//     node failing) fails the attempt: the leader starts the next attempt
//     (a new port), every member stops its ranks and answers again, up to
//     the job's retries. STRATA_CHECKPOINT_DIR outlives attempts.
//  6. When every member succeeded the leader registers rank 0's model and
//     ends the gang; maxDuration ends it failed.

// gangPoll bounds the wait between looks at the catalog when nothing
// changes (a node failing shows in the mesh, not the catalog).
const gangPoll = 2 * time.Second

// gangAdmitted says every node of a multi-node placement admitted its
// share at the placement's epoch: from the controller's placed state, or
// from the nodes' own documents when that has not replicated yet.
func (j *Runner) gangAdmitted(rec catalog.Placement) bool {
	if rec.State == catalog.StatePlaced {
		return true
	}
	docs := map[string]mesh.NodeState{j.cfg.Name: j.cfg.Mesh.Local()}
	for _, n := range j.cfg.Mesh.Nodes() {
		if n.Name != j.cfg.Name {
			docs[n.Name] = n.NodeState
		}
	}
	for _, pn := range rec.Nodes {
		ok := false
		for _, as := range docs[pn.Name].Assignments {
			ok = ok || as.Key == rec.Key && as.Epoch == rec.Epoch && as.Accepted
		}
		if !ok {
			return false
		}
	}
	return true
}

// isGang says the job runs as a multi-node gang, each member node's agent
// starting its own ranks (the builtin trainer runs on rank 0's node alone).
func isGang(rec catalog.Placement, launcher string) bool {
	return len(rec.Nodes) > 1 && launcher != policy.LauncherBuiltin
}

func launcherOf(spec *policy.TrainingJobSpec) string {
	if spec.Launcher != "" {
		return spec.Launcher
	}
	if len(spec.Command) > 0 {
		return "exec"
	}
	return "builtin"
}

func jobDir(dataDir string, rec catalog.Placement) string {
	return filepath.Join(dataDir, "jobs", fmt.Sprintf("%s-%d", rec.Name, rec.Epoch))
}

// hostOf is the host of a node's advertised gossip address.
func hostOf(st mesh.NodeState) string {
	host, _, _ := net.SplitHostPort(st.Addrs.Gossip)
	return host
}

// ranksOf lists the processes the gang's nodes start, in rank order, perNode
// on each node, each with its node's advertised address; false while a
// node's document is not here.
func (j *Runner) ranksOf(rec catalog.Placement, perNode int) ([]trainer.Member, bool) {
	nodes := slices.Clone(rec.Nodes)
	sort.SliceStable(nodes, func(a, b int) bool { return nodes[a].Rank < nodes[b].Rank })
	addrs := map[string]string{j.cfg.Name: hostOf(j.cfg.Mesh.Local())}
	for _, n := range j.cfg.Mesh.Nodes() {
		if n.Name != j.cfg.Name {
			addrs[n.Name] = hostOf(n.NodeState)
		}
	}
	out := make([]trainer.Member, 0, len(nodes)*perNode)
	for _, pn := range nodes {
		if addrs[pn.Name] == "" {
			return nil, false
		}
		for range perNode {
			out = append(out, trainer.Member{Node: pn.Name, Addr: addrs[pn.Name]})
		}
	}
	return out, true
}

// procsPerNode is how many processes strata starts on each member node:
// the gang's ranks per node for exec, one torchrun (which starts them)
// for torchrun.
func procsPerNode(spec *policy.TrainingJobSpec) int {
	if launcherOf(spec) == policy.LauncherTorchrun || spec.Gang.RanksPerNode < 1 {
		return 1
	}
	return spec.Gang.RanksPerNode
}

// shareGPUs gives the members on node the node's gpus, shared out evenly
// in rank order (the policy checks they divide evenly).
func shareGPUs(members []trainer.Member, node string, gpus []int) {
	var local []int
	for i, m := range members {
		if m.Node == node {
			local = append(local, i)
		}
	}
	if len(local) == 0 || len(gpus) == 0 {
		return
	}
	each := len(gpus) / len(local)
	if each == 0 {
		each = 1
	}
	for k, i := range local {
		lo := min(k*each, len(gpus)-each)
		members[i].GPUs = slices.Clone(gpus[lo : lo+each])
	}
}

// torchrunOf is the trainer's torchrun settings for a torchrun job, nil
// for any other.
func torchrunOf(spec *policy.TrainingJobSpec) *trainer.Torchrun {
	if launcherOf(spec) != policy.LauncherTorchrun {
		return nil
	}
	return &trainer.Torchrun{ProcsPerNode: max(spec.Gang.RanksPerNode, 1)}
}

// assignedGPUs are the GPUs this node's assignment of key holds.
func (j *Runner) assignedGPUs(key string) []int {
	for _, as := range j.cfg.Mesh.Local().Assignments {
		if as.Key == key {
			return as.GPUs
		}
	}
	return nil
}

// freePort returns a TCP port free on host now (on every interface when
// host is not one of this machine's, as behind a NAT that advertises
// another address).
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		ln, err = net.Listen("tcp", ":0")
	}
	if err != nil {
		return 0, fmt.Errorf("allocating MASTER_PORT on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ifaceOf names the network interface that holds ip ("" when none does).
func ifaceOf(ip string) string {
	want := net.ParseIP(ip)
	ifs, err := net.Interfaces()
	if want == nil || err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(want) {
				return ifc.Name
			}
		}
	}
	return ""
}

func newRunID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// leadGang coordinates the gang from rank 0's node and records the job.
// parent is the run's context before maxDuration: when it ends the job was
// placed elsewhere or deleted, and no verdict is written.
func (j *Runner) leadGang(parent, ctx context.Context, rec catalog.Placement, doc *policy.Document, jr catalog.Job) {
	spec := doc.TrainingJob
	var ranks []trainer.Member
	err := j.until(ctx, func() bool {
		var ok bool
		ranks, ok = j.ranksOf(rec, procsPerNode(spec))
		return ok
	})
	if err != nil {
		j.endGang(parent, catalog.Gang{}, jr, doc, "", fmt.Errorf("waiting for the gang's node documents: %w", err))
		return
	}
	g := catalog.Gang{
		Job: rec.Name, Key: rec.Key, Run: newRunID(), Generation: rec.Generation, Epoch: rec.Epoch,
		MasterAddr: ranks[0].Addr, Ranks: gangRanks(ranks),
	}
	data := j.dataDeps(spec)
	for attempt := 1; attempt <= spec.Retries+1; attempt++ {
		g.Attempt, g.State, g.Message = attempt, catalog.GangStarting, ""
		if g.MasterPort, err = freePort(g.MasterAddr); err != nil {
			break
		}
		j.putGang(g, data...)
		err = j.awaitGang(ctx, &g, &jr, data)
		if err == nil || ctx.Err() != nil {
			break
		}
		j.log.Warn("training gang failed", "job", jr.Name, "attempt", attempt, "retries", spec.Retries, "err", err)
	}
	if err != nil && ctx.Err() != nil && parent.Err() == nil {
		err = fmt.Errorf("%w (maxDuration %s)", err, time.Duration(spec.MaxDuration))
	}
	j.endGang(parent, g, jr, doc, filepath.Join(jobDir(j.cfg.DataDir, rec), "out"), err)
}

// endGang writes the gang's and the job's verdicts, registering the model
// rank 0 left in out when the gang succeeded.
func (j *Runner) endGang(parent context.Context, g catalog.Gang, jr catalog.Job, doc *policy.Document, out string, err error) {
	if parent.Err() != nil {
		return // placed elsewhere or deleted: the next run decides
	}
	if j.halted(jr) != "" {
		j.finish(jr, err) // says why, records nothing
		return
	}
	if g.Run != "" {
		g.State, g.Message = catalog.GangSucceeded, ""
		if err != nil {
			g.State, g.Message = catalog.GangFailed, err.Error()
		}
		j.putGang(g)
	}
	if out != "" {
		// Rank 0's per-step metrics, as they were at its end (they are
		// also read as the job runs).
		jr.Steps = readSteps(filepath.Join(out, trainer.StepsFile))
	}
	if err == nil {
		err = j.register(parent, &jr, doc, out)
	}
	j.finish(jr, err)
}

// awaitGang drives one attempt: it marks it running once every member is
// ready and returns nil once every member succeeded, or why it failed.
func (j *Runner) awaitGang(ctx context.Context, g *catalog.Gang, jr *catalog.Job, data []mesh.Dep) error {
	var nodes []string
	for _, r := range g.Ranks {
		if !slices.Contains(nodes, r.Node) {
			nodes = append(nodes, r.Node)
		}
	}
	asked := time.Now()
	var last []catalog.MemberStatus
	// Rank 0 runs on this node: its per-step metrics are read as it goes,
	// so that a sweep can stop a poor gang trial early.
	stepsPath := filepath.Join(j.cfg.DataDir, "jobs", fmt.Sprintf("%s-%d", g.Job, g.Epoch), "out", trainer.StepsFile)
	for {
		changed, meshChanged := j.cfg.Catalog.Changed(), j.cfg.Mesh.Changed()
		ready, succeeded := 0, 0
		statuses := make([]catalog.MemberStatus, len(g.Ranks))
		for i, r := range g.Ranks {
			statuses[i] = catalog.MemberStatus{Rank: i, Node: r.Node, State: catalog.JobPending, ExitCode: -1}
		}
		for _, node := range nodes {
			// A node gone while the gang runs fails the attempt; before it
			// runs, the gang waits: the controller places the job again
			// (a new epoch, which ends this run without a verdict).
			if err := j.nodeGone(node); err != nil && g.State == catalog.GangRunning {
				return err
			}
			m, err := j.cfg.Catalog.GangMembers.Value(rec2member(g.Job, node))
			if err != nil || m.Run != g.Run || m.Attempt != g.Attempt {
				continue
			}
			for _, st := range m.Ranks {
				if st.Rank >= 0 && st.Rank < len(statuses) && g.Ranks[st.Rank].Node == node {
					statuses[st.Rank] = st
				}
			}
			switch m.State {
			case catalog.MemberFailed:
				return fmt.Errorf("attempt %d: member %s failed: %s", g.Attempt, node, m.Error)
			case catalog.MemberSucceeded:
				succeeded++
				ready++
			case catalog.MemberReady, catalog.MemberRunning:
				ready++
			}
		}
		running := g.State == catalog.GangStarting && ready == len(nodes)
		if running {
			g.State = catalog.GangRunning
			j.putGang(*g, data...)
			jr.State, jr.Attempt = catalog.JobRunning, g.Attempt
			if jr.Started.IsZero() {
				jr.Started = time.Now().UTC()
			}
			j.log.Info("training gang running", "job", jr.Name, "attempt", g.Attempt, "nodes", len(nodes),
				"ranks", len(g.Ranks), "master", net.JoinHostPort(g.MasterAddr, fmt.Sprint(g.MasterPort)), "ready_after", time.Since(asked))
		}
		steps := jr.Steps
		if g.State == catalog.GangRunning {
			steps = readSteps(stepsPath)
		}
		if running || !slices.Equal(last, statuses) || jr.Attempt != g.Attempt || len(steps) != len(jr.Steps) {
			last, jr.Members, jr.Attempt, jr.Steps = statuses, statuses, g.Attempt, steps
			j.write(*jr)
		}
		if g.State == catalog.GangRunning && succeeded == len(nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("attempt %d stopped: %w", g.Attempt, ctx.Err())
		case <-changed:
		case <-meshChanged:
		case <-time.After(gangPoll):
		}
	}
}

func rec2member(job, node string) string { return catalog.GangMember{Job: job, Node: node}.Key() }

// nodeGone says why a member node can no longer take part (failed or left
// the mesh), nil while it can.
func (j *Runner) nodeGone(name string) error {
	if name == j.cfg.Name {
		return nil
	}
	for _, n := range j.cfg.Mesh.Nodes() {
		if n.Name == name {
			if n.Status == mesh.StatusFailed || n.Status == mesh.StatusLeft {
				return fmt.Errorf("member node %s is %s", name, n.Status)
			}
			return nil
		}
	}
	return nil // not known here yet: replication lag, not a failure
}

// dataDeps names the manifests of the job's data and code as held here: the gang
// record depends on them, so that a member acts on it only once they have
// replicated to it (and never fails on its data for replication lag).
func (j *Runner) dataDeps(spec *policy.TrainingJobSpec) []mesh.Dep {
	var deps []mesh.Dep
	for _, d := range spec.Data {
		var m storage.Manifest
		var err error
		if d.Artifact != "" {
			m, err = j.cfg.Artifacts.ByDigest(d.Artifact, storage.KindDataset, storage.KindModel)
		} else {
			name, version, _ := strings.Cut(d.Dataset, ":")
			m, err = j.cfg.Artifacts.Lookup(storage.KindDataset, name, version)
		}
		if err != nil {
			continue // the members say what is missing
		}
		if ref, ok := j.cfg.Catalog.Manifests.Ref(string(m.Kind) + "/" + m.Name + "/" + m.Version); ok {
			deps = append(deps, ref)
		}
	}
	if spec.Code != "" {
		if m, err := j.lookupCode(spec.Code); err == nil {
			if ref, ok := j.cfg.Catalog.Manifests.Ref(string(m.Kind) + "/" + m.Name + "/" + m.Version); ok {
				deps = append(deps, ref)
			}
		}
	}
	return deps
}

func (j *Runner) putGang(g catalog.Gang, data ...mesh.Dep) {
	g.Updated = time.Now().UTC()
	deps := slices.Clone(data)
	if ref, ok := j.cfg.Catalog.Placements.Ref(g.Key); ok {
		deps = append(deps, ref)
	}
	if _, err := j.cfg.Catalog.Gangs.Put(g, deps...); err != nil {
		j.log.Warn("recording training gang", "job", g.Job, "err", err)
	}
}

// until polls cond at every change of the mesh or catalog until it holds
// or ctx ends.
func (j *Runner) until(ctx context.Context, cond func() bool) error {
	for {
		changed, meshChanged := j.cfg.Catalog.Changed(), j.cfg.Mesh.Changed()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-meshChanged:
		case <-time.After(gangPoll):
		}
	}
}

// member runs this node's ranks of a gang, attempt by attempt, as the
// leader's gang record says, until the gang ends or ctx does.
func (j *Runner) member(ctx context.Context, rec catalog.Placement, lj *localJob) {
	doc, err := j.policyDoc(rec.Key)
	if err != nil || doc.TrainingJob == nil || !isGang(rec, launcherOf(doc.TrainingJob)) {
		return // the leader records why; builtin jobs run on rank 0 alone
	}
	spec := doc.TrainingJob
	if d := time.Duration(spec.MaxDuration); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	m := &gangMember{j: j, rec: rec, spec: spec, lj: lj, dir: jobDir(j.cfg.DataDir, rec)}
	defer m.stop()
	for {
		changed := j.cfg.Catalog.Changed()
		if g, ok := m.gang(); ok && m.step(ctx, g) {
			return
		}
		var done <-chan struct{}
		if m.run != nil && !m.reported {
			done = m.run.Done()
			m.putProgress()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-done:
			m.report()
		case <-time.After(gangPoll):
		}
	}
}

// gangMember is one node's side of a gang.
type gangMember struct {
	j    *Runner
	rec  catalog.Placement
	spec *policy.TrainingJobSpec
	lj   *localJob
	dir  string

	prepared bool
	base     trainer.Job
	prepErr  error

	// runID and attempt are the gang attempt this node answers; joined
	// says it saw that run before it ended.
	runID    string
	attempt  int
	joined   bool
	launched bool
	run      *trainer.Run
	cancel   context.CancelFunc
	reported bool
	gangRec  catalog.Gang
	// sent is the rank statuses last recorded.
	sent []catalog.MemberStatus
}

// putProgress records this node's ranks again while they run, once their
// statuses have changed since the last record (they start after Launch
// returns).
func (m *gangMember) putProgress() {
	select {
	case <-m.run.Done():
		return // report records the end
	default:
	}
	if st := m.localStatuses(); !slices.Equal(st, m.sent) {
		m.put(catalog.MemberRunning, st, nil)
	}
}

// gang returns the leader's record of this placement, when it has
// replicated here with what it was derived from.
func (m *gangMember) gang() (catalog.Gang, bool) {
	r, err := m.j.cfg.Catalog.Gangs.Get(m.rec.Name)
	if err != nil || len(m.j.cfg.Catalog.Gangs.Pending(r)) > 0 {
		return catalog.Gang{}, false
	}
	g := r.Value
	return g, g.Key == m.rec.Key && g.Epoch == m.rec.Epoch && g.Generation == m.rec.Generation
}

// step acts on the gang record; true when the gang has ended.
func (m *gangMember) step(ctx context.Context, g catalog.Gang) bool {
	switch {
	case g.State == catalog.GangSucceeded || g.State == catalog.GangFailed:
		if g.Run == m.runID && m.joined {
			m.stop()
			return true
		}
		return false // a past run's verdict: wait for this run's leader
	case g.Run != m.runID || g.Attempt > m.attempt:
		m.stop()
		m.runID, m.attempt, m.joined, m.launched, m.reported, m.gangRec = g.Run, g.Attempt, true, false, false, g
		if !m.prepared {
			m.base, m.prepErr = m.prepare(ctx)
			m.prepared = m.prepErr == nil
		}
		if m.prepErr != nil {
			m.put(catalog.MemberFailed, nil, m.prepErr)
		} else {
			m.put(catalog.MemberReady, nil, nil)
		}
	case g.Run == m.runID && g.Attempt == m.attempt && g.State == catalog.GangRunning && !m.launched && m.prepErr == nil:
		m.launched, m.gangRec = true, g
		job := m.base
		job.Members, job.MasterPort, job.Node, job.Retries = gangMembers(g.Ranks), g.MasterPort, m.j.cfg.Name, 0
		shareGPUs(job.Members, m.j.cfg.Name, m.j.assignedGPUs(m.rec.Key))
		rctx, cancel := context.WithCancel(ctx)
		run, err := trainer.NewExec(trainer.ExecOptions{Logger: m.j.log}).Launch(rctx, job)
		if err != nil {
			cancel()
			m.reported = true
			m.put(catalog.MemberFailed, nil, err)
			return false
		}
		m.run, m.cancel = run, cancel
		m.j.mu.Lock()
		m.lj.run = run
		m.j.mu.Unlock()
		m.put(catalog.MemberRunning, m.localStatuses(), nil)
	}
	return false
}

// DefaultDataLag is Config.DataLag's default.
const DefaultDataLag = 30 * time.Second

// dataLag bounds how long a job waits for its data and code to show up
// here (their manifests, or a holder in the nodes' documents) before it
// reports them missing.
func (j *Runner) dataLag() time.Duration {
	if j.cfg.DataLag > 0 {
		return j.cfg.DataLag
	}
	return DefaultDataLag
}

// prepare pulls the job's data once for every attempt. Data not found here
// yet, or with no holder known yet, is waited for (replication lag), up to
// the runner's dataLag.
func (m *gangMember) prepare(ctx context.Context) (trainer.Job, error) {
	jr := catalog.Job{Name: m.rec.Name, Key: m.rec.Key, Launcher: launcherOf(m.spec)}
	var job trainer.Job
	var err error
	wctx, cancel := context.WithTimeout(ctx, m.j.dataLag())
	defer cancel()
	_ = m.j.until(wctx, func() bool {
		job, _, err = m.j.prepare(ctx, jr, m.spec, m.dir)
		return err == nil || !(errors.Is(err, mesh.ErrNotFound) || errors.Is(err, dataplane.ErrNoHolders))
	})
	if err != nil {
		return job, err
	}
	if ifc := ifaceOf(hostOf(m.j.cfg.Mesh.Local())); ifc != "" {
		job.Fabric.GlooIfname = ifc
		if job.Fabric.SocketIfname == "" {
			job.Fabric.SocketIfname = ifc
		}
	}
	return job, nil
}

// report records how this node's ranks of the attempt ended.
func (m *gangMember) report() {
	m.reported = true
	err := m.run.Wait(context.Background())
	m.saveLogs()
	if err != nil {
		m.put(catalog.MemberFailed, m.localStatuses(), err)
		return
	}
	m.put(catalog.MemberSucceeded, m.localStatuses(), nil)
}

// stop ends this node's ranks of the current attempt and keeps their logs.
func (m *gangMember) stop() {
	if m.run == nil {
		return
	}
	m.cancel()
	<-m.run.Done()
	if !m.reported {
		m.saveLogs()
	}
	m.run, m.cancel = nil, nil
}

func (m *gangMember) saveLogs() {
	for i, r := range m.run.Job().Members {
		if r.Node == m.j.cfg.Name {
			_ = os.WriteFile(filepath.Join(m.dir, fmt.Sprintf("rank-%d.log", i)), []byte(m.run.Log(i)), 0o600)
		}
	}
}

func (m *gangMember) localStatuses() []catalog.MemberStatus {
	if m.run == nil {
		return nil
	}
	var out []catalog.MemberStatus
	for _, st := range statusesOf(m.run.Status().Members) {
		if st.Node == m.j.cfg.Name {
			out = append(out, st)
		}
	}
	return out
}

func (m *gangMember) put(state string, ranks []catalog.MemberStatus, err error) {
	m.sent = ranks
	rec := catalog.GangMember{Job: m.rec.Name, Node: m.j.cfg.Name, Run: m.runID, Epoch: m.rec.Epoch, Attempt: m.attempt,
		State: state, Ranks: ranks, Updated: time.Now().UTC()}
	if err != nil {
		rec.Error = err.Error()
	}
	var deps []mesh.Dep
	if ref, ok := m.j.cfg.Catalog.Gangs.Ref(m.rec.Name); ok {
		deps = append(deps, ref)
	}
	if _, perr := m.j.cfg.Catalog.GangMembers.Put(rec, deps...); perr != nil {
		m.j.log.Warn("recording training gang member", "job", m.rec.Name, "err", perr)
	}
}
