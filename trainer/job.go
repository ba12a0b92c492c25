package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Launcher runs training jobs. Launch validates the job, starts it and
// returns at once; ctx governs the whole run (cancelling it stops every
// member), not only the start. Implementations: Exec (a command on every
// gang member) and Builtin (the in-process Go trainer).
type Launcher interface {
	Launch(ctx context.Context, job Job) (*Run, error)
}

// Compile-time checks.
var (
	_ Launcher = (*Exec)(nil)
	_ Launcher = (*Builtin)(nil)
)

// ErrJob is returned, wrapped with every problem, for an invalid Job.
var ErrJob = errors.New("trainer: invalid job")

// ErrNotSupported is returned when a launcher cannot run a job of this
// shape (for example the built-in trainer with more than one member).
var ErrNotSupported = errors.New("trainer: not supported")

// Member is one slot of a gang. A member's rank is its index in Job.Members.
type Member struct {
	// Node is the ID of the node the member runs on.
	Node string `json:"node"`
	// Addr is the node's address, used as MASTER_ADDR when the member has
	// rank 0. Default "127.0.0.1".
	Addr string `json:"addr,omitempty"`
	// GPUs, when set, become CUDA_VISIBLE_DEVICES (indices on the node).
	GPUs []int `json:"gpus,omitempty"`
}

// Fabric carries the NCCL and Gloo hints of the fabric the gang was placed on.
// Empty fields set nothing, leaving NCCL to its own discovery.
type Fabric struct {
	// SocketIfname becomes NCCL_SOCKET_IFNAME (for example "eth0" or
	// "^lo,docker").
	SocketIfname string `json:"socket_ifname,omitempty"`
	// GlooIfname becomes GLOO_SOCKET_IFNAME: the interface of the node's
	// advertised address, which Gloo binds instead of the one its
	// host name resolves to.
	GlooIfname string `json:"gloo_ifname,omitempty"`
	// IBHCA becomes NCCL_IB_HCA (for example "mlx5_0,mlx5_1").
	IBHCA string `json:"ib_hca,omitempty"`
	// DisableIB sets NCCL_IB_DISABLE=1, for fabrics without InfiniBand
	// or RoCE.
	DisableIB bool `json:"disable_ib,omitempty"`
}

// Job is one training job as a launcher sees it.
type Job struct {
	// ID names the job in logs, events and STRATA_JOB_ID.
	ID string `json:"id"`
	// Command is the argv run on every member (Exec only).
	Command []string `json:"command,omitempty"`
	// Env is added to every member's environment, after the inherited
	// environment and before the variables the launcher sets (which win).
	Env map[string]string `json:"env,omitempty"`
	// Dir is the members' working directory. Default: the agent's.
	Dir string `json:"dir,omitempty"`
	// Members is the gang; rank i runs on Members[i]. Default: one local
	// member.
	Members []Member `json:"members,omitempty"`
	// MasterPort is the rendezvous port on rank 0. Default 29500,
	// torchrun's.
	MasterPort int `json:"master_port,omitempty"`
	// DatasetDir is where the job's dataset artifact lies
	// (STRATA_DATASET_DIR).
	DatasetDir string `json:"dataset_dir"`
	// Data, for the built-in trainer, are the files it trains on and
	// how it mixes them; empty: the first *.csv in DatasetDir.
	Data []DataFile `json:"data,omitempty"`
	// OutputDir is where the job writes its model (STRATA_OUTPUT_DIR).
	OutputDir string `json:"output_dir"`
	// Fabric carries NCCL interface hints.
	Fabric Fabric `json:"fabric,omitzero"`
	// Retries is how many times a failed gang is restarted as a whole.
	// Default 0.
	Retries int `json:"retries,omitempty"`
	// Node, when set, makes this launch start only the members on that
	// node: the gang spans several nodes and each node's agent launches
	// its own ranks (with the whole gang in Members, so every rank's
	// environment is the gang's). Empty starts every member here.
	Node string `json:"node,omitempty"`
	// CheckpointDir, when set, becomes STRATA_CHECKPOINT_DIR: a directory
	// that outlives attempts, where a job may keep checkpoints to resume
	// from when its gang is restarted.
	CheckpointDir string `json:"checkpoint_dir,omitempty"`
	// Train configures the built-in trainer; nil means the Builtin
	// launcher's own Config.
	Train *Config `json:"train,omitempty"`
	// Torchrun, when set, makes each member a torchrun that starts the
	// job's workers on its node (Exec only); nil runs Command as each
	// member.
	Torchrun *Torchrun `json:"torchrun,omitempty"`
}

// Torchrun runs a member as PyTorch's elastic launcher:
//
//	torchrun --nnodes=NNODES --node_rank=NODE_RANK --nproc_per_node=ProcsPerNode
//	  --rdzv_backend=static --master_addr=MASTER_ADDR --master_port=MASTER_PORT
//	  --rdzv_id=JOB-ATTEMPT --max_restarts=0 --redirects=0:1,… --tee=0:1,…
//	  --log_dir=DIR/torchrun Command...
//
// so that each member node runs ProcsPerNode workers of the script in
// Command, and the gang's world is members × ProcsPerNode. torchrun sets
// each worker's RANK, LOCAL_RANK, WORLD_SIZE and the rest. Each worker's
// stdout lines reach the member's log prefixed with "[defaultN]:", N its
// local rank; its stderr reaches it as written. Restarts are the gang's (Job.Retries,
// or the agents'), not torchrun's. A Job with Torchrun has one member per
// node.
type Torchrun struct {
	// Path is the torchrun executable. Default "torchrun", looked up in
	// PATH.
	Path string `json:"path,omitempty"`
	// ProcsPerNode is the workers each member starts. Default 1.
	ProcsPerNode int `json:"procs_per_node,omitempty"`
}

// DefaultMasterPort is torchrun's default rendezvous port.
const DefaultMasterPort = 29500

// EnsureDefaults fills zero fields with their documented defaults.
func (j *Job) EnsureDefaults() {
	if len(j.Members) == 0 {
		j.Members = []Member{{Node: "local"}}
	}
	for i := range j.Members {
		if j.Members[i].Addr == "" {
			j.Members[i].Addr = "127.0.0.1"
		}
	}
	if j.MasterPort == 0 {
		j.MasterPort = DefaultMasterPort
	}
	if t := j.Torchrun; t != nil {
		c := *t
		if c.Path == "" {
			c.Path = "torchrun"
		}
		if c.ProcsPerNode == 0 {
			c.ProcsPerNode = 1
		}
		j.Torchrun = &c
	}
}

// Validate reports every problem with the job joined into one error wrapping
// ErrJob. Zero fields with defaults are valid.
func (j Job) Validate() error {
	var errs []error
	if j.ID == "" {
		errs = append(errs, errors.New("id is empty"))
	}
	if j.DatasetDir == "" || j.OutputDir == "" {
		errs = append(errs, errors.New("dataset_dir and output_dir are required"))
	}
	if j.MasterPort < 0 || j.MasterPort > 65535 {
		errs = append(errs, fmt.Errorf("master_port %d is not a port", j.MasterPort))
	}
	if j.Retries < 0 {
		errs = append(errs, fmt.Errorf("retries %d must not be negative", j.Retries))
	}
	local := false
	for i, m := range j.Members {
		if m.Node == "" {
			errs = append(errs, fmt.Errorf("member %d has no node", i))
		}
		local = local || m.Node == j.Node
	}
	if j.Node != "" && !local {
		errs = append(errs, fmt.Errorf("no member runs on node %q", j.Node))
	}
	if t := j.Torchrun; t != nil {
		if t.ProcsPerNode < 0 {
			errs = append(errs, fmt.Errorf("torchrun procs_per_node %d must not be negative", t.ProcsPerNode))
		}
		seen := map[string]bool{}
		for _, m := range j.Members {
			if seen[m.Node] {
				errs = append(errs, fmt.Errorf("torchrun runs one member per node, node %q has two", m.Node))
				break
			}
			seen[m.Node] = true
		}
	}
	if j.Train != nil {
		if err := j.Train.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w %q: %w", ErrJob, j.ID, errors.Join(errs...))
	}
	return nil
}

// State is a run's or a member's lifecycle state:
// pending → running → succeeded | failed.
type State string

// States.
const (
	StatePending   State = "pending"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
)

// MemberStatus is one member's state in the current attempt.
type MemberStatus struct {
	// Rank is the member's index in Job.Members.
	Rank int `json:"rank"`
	// Node is the member's node.
	Node string `json:"node"`
	// State is the member's lifecycle state.
	State State `json:"state"`
	// ExitCode is the process's exit status; -1 while running, when it
	// was killed by a signal, or when it never started.
	ExitCode int `json:"exit_code"`
	// Error says why the member failed, empty otherwise.
	Error string `json:"error,omitempty"`
}

// Status is a copy of a run's state.
type Status struct {
	// Job is the job's ID.
	Job string `json:"job"`
	// State is the run's lifecycle state.
	State State `json:"state"`
	// Attempt counts gang starts, from 1.
	Attempt int `json:"attempt"`
	// Members are the current attempt's members, by rank.
	Members []MemberStatus `json:"members"`
	// Error says why the run failed, empty otherwise.
	Error string `json:"error,omitempty"`
}

// Run is a launched job. Its methods are safe for concurrent use.
type Run struct {
	job  Job
	done chan struct{}

	mu      sync.Mutex
	state   State
	attempt int
	members []MemberStatus
	logs    []*tailBuffer
	err     error
}

func newRun(job Job, logLimit int) *Run {
	r := &Run{job: job, done: make(chan struct{}), state: StatePending}
	r.resetMembers(logLimit)
	return r
}

// resetMembers starts a new attempt's member table and logs.
func (r *Run) resetMembers(logLimit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.members = make([]MemberStatus, len(r.job.Members))
	r.logs = make([]*tailBuffer, len(r.job.Members))
	for i, m := range r.job.Members {
		r.members[i] = MemberStatus{Rank: i, Node: m.Node, State: StatePending, ExitCode: -1}
		r.logs[i] = newTailBuffer(logLimit)
	}
}

func (r *Run) setState(s State) {
	r.mu.Lock()
	r.state = s
	r.mu.Unlock()
}

func (r *Run) setMember(rank int, s State, code int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := &r.members[rank]
	m.State, m.ExitCode = s, code
	if err != nil {
		m.Error = err.Error()
	}
}

func (r *Run) finish(err error) {
	r.mu.Lock()
	r.err = err
	r.state = StateSucceeded
	if err != nil {
		r.state = StateFailed
	}
	r.mu.Unlock()
	close(r.done)
}

// Job returns the job as launched, with defaults filled.
func (r *Run) Job() Job { return r.job }

// Done is closed when the run has succeeded or failed.
func (r *Run) Done() <-chan struct{} { return r.done }

// Wait blocks until the run ends or ctx is done. It returns nil when the
// run succeeded, the run's error when it failed, or ctx.Err().
func (r *Run) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status returns a copy of the run's state.
func (r *Run) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Status{Job: r.job.ID, State: r.state, Attempt: r.attempt, Members: slices.Clone(r.members)}
	if r.err != nil {
		s.Error = r.err.Error()
	}
	return s
}

// Log returns the captured tail of a member's combined stdout and stderr in
// the current attempt ("" for an unknown rank).
func (r *Run) Log(rank int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rank < 0 || rank >= len(r.logs) {
		return ""
	}
	return r.logs[rank].String()
}

// tailBuffer keeps the last limit bytes written to it. It is safe for
// concurrent use (stdout and stderr copy into it from two goroutines).
type tailBuffer struct {
	mu      sync.Mutex
	limit   int
	buf     []byte
	dropped int64
}

func newTailBuffer(limit int) *tailBuffer { return &tailBuffer{limit: limit} }

// Write keeps the tail; it never fails.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.dropped += int64(len(t.buf) + len(p) - t.limit)
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.dropped += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept tail.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
