package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ExecOptions tune the Exec launcher. The zero value means the defaults.
type ExecOptions struct {
	// LogLimit bounds the bytes of output kept per member (the tail).
	// Default 64 KiB.
	LogLimit int
	// KillGrace is how long a stopped member's process group has between
	// SIGTERM and SIGKILL. Default 5 s.
	KillGrace time.Duration
	// Logger receives lifecycle records. Default: discard.
	Logger *slog.Logger
}

// ExecOptions defaults.
const (
	DefaultLogLimit  = 64 << 10
	DefaultKillGrace = 5 * time.Second
)

// workNice is the niceness job members run at (the agent runs at 0), so
// that a busy host still gives the agent the CPU it needs to answer its
// peers; see spawn.
const workNice = 10

// Reasons a member or run fails, as they appear in errors and statuses.
const (
	// ReasonExited: the member's process exited non-zero.
	ReasonExited = "exited"
	// ReasonStopped: the member was stopped because another member
	// failed or the run was cancelled.
	ReasonStopped = "stopped"
	// ReasonStart: the member's process could not be started.
	ReasonStart = "start failed"
)

// Exec runs a job's command once per gang member as a local process in its
// own process group, with the environment torchrun and PyTorch DDP expect:
//
//	MASTER_ADDR, MASTER_PORT   rank 0's address and the rendezvous port
//	WORLD_SIZE, RANK           the gang size and the member's index
//	LOCAL_RANK, LOCAL_WORLD_SIZE
//	                           the member's index among, and the count of,
//	                           members on its node
//	NODE_RANK (and GROUP_RANK), NNODES
//	                           the node's index in the gang; the node count
//	NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_DISABLE, GLOO_SOCKET_IFNAME
//	                           fabric hints, when known
//	CUDA_VISIBLE_DEVICES       the member's GPUs, when assigned
//	STRATA_DATASET_DIR, STRATA_OUTPUT_DIR, STRATA_JOB_ID, STRATA_ATTEMPT
//	STRATA_CHECKPOINT_DIR      when Job.CheckpointDir is set
//	STRATA_METRICS_FILE        rank 0's per-step metrics (see StepsFile)
//
// With Job.Torchrun each member is a torchrun that starts the command as
// its node's workers (see Torchrun).
//
// If any member fails, the others' process groups get SIGTERM, then SIGKILL
// after KillGrace, and the gang is restarted up to Job.Retries times.
//
// Every member is started as a process on this host, whatever its Node,
// unless Job.Node is set: then only that node's members are started, and a
// gang spanning several nodes is one Exec per node, each started by its
// node's agent (package internal/jobs coordinates them and restarts the
// gang as a whole; give each node's Exec Retries 0).
type Exec struct {
	opts ExecOptions
	log  *slog.Logger
}

// NewExec returns an Exec launcher.
func NewExec(opts ExecOptions) *Exec {
	if opts.LogLimit <= 0 {
		opts.LogLimit = DefaultLogLimit
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Exec{opts: opts, log: log.With("component", "trainer.exec")}
}

// Launch validates job, starts every member and returns the Run. The run
// ends when every member has exited (succeeded when all exit 0), when a
// failure has used up the retries, or when ctx is cancelled (failed with
// ctx's error).
func (e *Exec) Launch(ctx context.Context, job Job) (*Run, error) {
	job.EnsureDefaults()
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if len(job.Command) == 0 {
		return nil, fmt.Errorf("%w %q: command is empty", ErrJob, job.ID)
	}
	r := newRun(job, e.opts.LogLimit)
	go e.run(ctx, r)
	return r, nil
}

func (e *Exec) run(ctx context.Context, r *Run) {
	job := r.job
	var err error
	for attempt := 1; attempt <= job.Retries+1; attempt++ {
		if ctx.Err() != nil {
			err = fmt.Errorf("job %q cancelled: %w", job.ID, ctx.Err())
			break
		}
		if attempt > 1 {
			r.resetMembers(e.opts.LogLimit)
		}
		r.mu.Lock()
		r.attempt = attempt
		r.mu.Unlock()
		err = e.attempt(ctx, r, attempt)
		if err == nil || ctx.Err() != nil {
			break
		}
		e.log.Warn("gang failed", "job", job.ID, "attempt", attempt, "retries", job.Retries, "error", err)
	}
	if err == nil {
		e.log.Info("job succeeded", "job", job.ID)
	}
	r.finish(err)
}

type exitResult struct {
	rank int
	err  error
}

// attempt runs the gang once.
func (e *Exec) attempt(ctx context.Context, r *Run, attempt int) error {
	job := r.job
	cmds := make([]*exec.Cmd, len(job.Members))
	exits := make(chan exitResult, len(job.Members))
	started := 0
	var startErr error
	for rank := range job.Members {
		if job.Node != "" && job.Members[rank].Node != job.Node {
			continue // another node's agent starts it
		}
		argv := job.argv(rank, attempt)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = job.Dir
		cmd.Env = memberEnv(job, rank, attempt)
		cmd.Stdout = r.logs[rank]
		cmd.Stderr = r.logs[rank]
		ownProcessGroup(cmd)
		// Output pipes are held by grandchildren too; do not wait on them
		// forever once the process group has been killed.
		cmd.WaitDelay = e.opts.KillGrace
		exited, niceErr, err := spawn(cmd)
		if err != nil {
			startErr = fmt.Errorf("rank %d on %s: %s: %w", rank, job.Members[rank].Node, ReasonStart, err)
			r.setMember(rank, StateFailed, -1, startErr)
			break
		}
		if niceErr != nil {
			e.log.Debug("cannot lower the priority of a job member", "job", job.ID, "rank", rank, "error", niceErr)
		}
		cmds[rank] = cmd
		started++
		r.setMember(rank, StateRunning, -1, nil)
		go func(rank int) {
			exits <- exitResult{rank: rank, err: <-exited}
		}(rank)
	}
	if startErr == nil {
		r.setState(StateRunning)
		e.log.Info("gang started", "job", job.ID, "attempt", attempt, "members", len(job.Members))
	}

	var failure error = startErr
	stopping := startErr != nil
	var killTimer <-chan time.Time
	stop := func() {
		if stopping {
			return
		}
		stopping = true
		for _, c := range cmds {
			if c != nil && c.Process != nil {
				terminateGroup(c.Process.Pid)
			}
		}
		killTimer = time.After(e.opts.KillGrace)
	}
	if startErr != nil {
		for _, c := range cmds {
			if c != nil {
				killGroup(c.Process.Pid)
			}
		}
	}
	done := ctx.Done()
	for remaining := started; remaining > 0; {
		select {
		case x := <-exits:
			remaining--
			code := -1
			var ee *exec.ExitError
			if errors.As(x.err, &ee) {
				code = ee.ExitCode()
			} else if x.err == nil {
				code = 0
			}
			switch {
			case x.err == nil:
				r.setMember(x.rank, StateSucceeded, 0, nil)
			case stopping:
				r.setMember(x.rank, StateFailed, code, fmt.Errorf("%s: %w", ReasonStopped, x.err))
			default:
				err := fmt.Errorf("rank %d on %s %s: %w", x.rank, job.Members[x.rank].Node, ReasonExited, x.err)
				r.setMember(x.rank, StateFailed, code, err)
				failure = err
				stop()
			}
		case <-done:
			done = nil
			if failure == nil {
				failure = fmt.Errorf("job %q cancelled: %w", job.ID, ctx.Err())
			}
			stop()
		case <-killTimer:
			killTimer = nil
			for _, c := range cmds {
				if c != nil && c.Process != nil {
					killGroup(c.Process.Pid)
				}
			}
		}
	}
	return failure
}

// argv is what member rank runs: the job's command, or torchrun starting
// it on the member's node.
func (j Job) argv(rank, attempt int) []string {
	t := j.Torchrun
	if t == nil {
		return j.Command
	}
	_, _, node, nodes := placeOf(j.Members, rank)
	logDir := filepath.Join(os.TempDir(), "strata-torchrun")
	if j.Dir != "" {
		logDir = filepath.Join(j.Dir, "torchrun")
	}
	// Each worker's stdout is teed with its local rank as a prefix. The
	// streams are given per worker ("0:1,1:1"): torch 1.13 on Python 3.11
	// (Debian's) fails on any single value, the default "0" included.
	streams := make([]string, t.ProcsPerNode)
	for i := range streams {
		streams[i] = strconv.Itoa(i) + ":1"
	}
	perWorker := strings.Join(streams, ",")
	return append([]string{t.Path,
		"--nnodes=" + strconv.Itoa(nodes),
		"--node_rank=" + strconv.Itoa(node),
		"--nproc_per_node=" + strconv.Itoa(t.ProcsPerNode),
		"--rdzv_backend=static",
		"--master_addr=" + j.Members[0].Addr,
		"--master_port=" + strconv.Itoa(j.MasterPort),
		"--rdzv_id=" + j.ID + "-" + strconv.Itoa(attempt),
		"--max_restarts=0",
		"--redirects=" + perWorker,
		"--tee=" + perWorker,
		"--log_dir=" + logDir,
	}, j.Command...)
}

// placeOf returns member rank's index among the members on its node, how
// many members that node has, the node's index in the gang (by first
// member) and how many nodes the gang spans.
func placeOf(members []Member, rank int) (local, localWorld, node, nodes int) {
	seen := map[string]int{}
	for i, o := range members {
		if _, ok := seen[o.Node]; !ok {
			seen[o.Node] = len(seen)
		}
		if o.Node == members[rank].Node {
			if i < rank {
				local++
			}
			localWorld++
		}
	}
	return local, localWorld, seen[members[rank].Node], len(seen)
}

// memberEnv is the inherited environment, then job.Env, then the launcher's
// variables (later entries win in os/exec).
func memberEnv(job Job, rank, attempt int) []string {
	env := os.Environ()
	keys := make([]string, 0, len(job.Env))
	for k := range job.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+job.Env[k])
	}
	m := job.Members[rank]
	localRank, localWorld, nodeIndex, nnodes := placeOf(job.Members, rank)
	set := func(k, v string) { env = append(env, k+"="+v) }
	set("MASTER_ADDR", job.Members[0].Addr)
	set("MASTER_PORT", strconv.Itoa(job.MasterPort))
	set("WORLD_SIZE", strconv.Itoa(len(job.Members)))
	set("RANK", strconv.Itoa(rank))
	set("LOCAL_RANK", strconv.Itoa(localRank))
	set("LOCAL_WORLD_SIZE", strconv.Itoa(localWorld))
	set("GROUP_RANK", strconv.Itoa(nodeIndex))
	set("NODE_RANK", strconv.Itoa(nodeIndex))
	set("NNODES", strconv.Itoa(nnodes))
	if job.Fabric.GlooIfname != "" {
		set("GLOO_SOCKET_IFNAME", job.Fabric.GlooIfname)
	}
	if job.Fabric.SocketIfname != "" {
		set("NCCL_SOCKET_IFNAME", job.Fabric.SocketIfname)
	}
	if job.Fabric.IBHCA != "" {
		set("NCCL_IB_HCA", job.Fabric.IBHCA)
	}
	if job.Fabric.DisableIB {
		set("NCCL_IB_DISABLE", "1")
	}
	if len(m.GPUs) > 0 {
		ids := make([]string, len(m.GPUs))
		for i, g := range m.GPUs {
			ids[i] = strconv.Itoa(g)
		}
		set("CUDA_VISIBLE_DEVICES", strings.Join(ids, ","))
	}
	set("STRATA_DATASET_DIR", job.DatasetDir)
	set("STRATA_OUTPUT_DIR", job.OutputDir)
	if rank == 0 && job.OutputDir != "" {
		set(StepsEnv, filepath.Join(job.OutputDir, StepsFile))
	}
	set("STRATA_JOB_ID", job.ID)
	if job.CheckpointDir != "" {
		set("STRATA_CHECKPOINT_DIR", job.CheckpointDir)
	}
	set("STRATA_ATTEMPT", strconv.Itoa(attempt))
	return env
}
