package trainer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/trainer"
	"github.com/strata-mesh/strata/trainer/internal/orttest"
)

// waitRun waits for r with a generous deadline (a bound on a hang, not a
// timing assertion).
func waitRun(tb testing.TB, r *trainer.Run) error {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-r.Done():
		return r.Wait(ctx)
	case <-ctx.Done():
		tb.Fatalf("run did not finish: %+v", r.Status())
		return nil
	}
}

func testJob(tb testing.TB, script string, members ...trainer.Member) trainer.Job {
	tb.Helper()
	dir := tb.TempDir()
	return trainer.Job{
		ID:         "job-1",
		Command:    []string{"sh", "-c", script},
		Members:    members,
		DatasetDir: filepath.Join(dir, "data"),
		OutputDir:  dir,
	}
}

func TestExecEnvironment(t *testing.T) {
	job := testJob(t, `echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT $NCCL_SOCKET_IFNAME $NCCL_IB_HCA ${NCCL_IB_DISABLE:-x} ${CUDA_VISIBLE_DEVICES:-none} $STRATA_JOB_ID $STRATA_ATTEMPT $EXTRA"; test "$STRATA_DATASET_DIR" = "$EXPECT_DATA" && test "$STRATA_OUTPUT_DIR" = "$EXPECT_OUT"`,
		trainer.Member{Node: "n1", Addr: "10.0.0.1", GPUs: []int{0, 1}},
		trainer.Member{Node: "n1", Addr: "10.0.0.1", GPUs: []int{2, 3}},
		trainer.Member{Node: "n2", Addr: "10.0.0.2"},
	)
	job.MasterPort = 29600
	job.Fabric = trainer.Fabric{SocketIfname: "eth1", IBHCA: "mlx5_0"}
	job.Env = map[string]string{"EXTRA": "x=1", "RANK": "overridden-by-launcher", "EXPECT_DATA": job.DatasetDir, "EXPECT_OUT": job.OutputDir}
	r, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err != nil {
		t.Fatalf("run failed: %v\nlogs: %q %q %q", err, r.Log(0), r.Log(1), r.Log(2))
	}
	want := []string{
		"0 3 0 2 0 10.0.0.1:29600 eth1 mlx5_0 x 0,1 job-1 1 x=1\n",
		"1 3 1 2 0 10.0.0.1:29600 eth1 mlx5_0 x 2,3 job-1 1 x=1\n",
		"2 3 0 1 1 10.0.0.1:29600 eth1 mlx5_0 x none job-1 1 x=1\n",
	}
	got := []string{r.Log(0), r.Log(1), r.Log(2)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("member environments (-want +got):\n%s", diff)
	}
	st := r.Status()
	if st.State != trainer.StateSucceeded || st.Attempt != 1 {
		t.Fatalf("status %+v", st)
	}
	for _, m := range st.Members {
		if m.State != trainer.StateSucceeded || m.ExitCode != 0 {
			t.Fatalf("member %+v", m)
		}
	}
}

func TestExecMemberFailureStopsGang(t *testing.T) {
	// Ranks 0 and 2 start and then run "forever" (a child sleep, so only
	// killing the process group stops it); rank 1 waits until both have
	// started, then fails.
	script := `touch "$STRATA_OUTPUT_DIR/started.$RANK"
if [ "$RANK" = 1 ]; then
  while [ ! -e "$STRATA_OUTPUT_DIR/started.0" ] || [ ! -e "$STRATA_OUTPUT_DIR/started.2" ]; do sleep 0.01; done
  echo "rank 1 failing" >&2
  exit 3
fi
sleep 600
echo unreachable`
	job := testJob(t, script, trainer.Member{Node: "a"}, trainer.Member{Node: "b"}, trainer.Member{Node: "c"})
	r, err := trainer.NewExec(trainer.ExecOptions{KillGrace: 2 * time.Second}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	err = waitRun(t, r)
	if err == nil || !strings.Contains(err.Error(), "rank 1 on b exited") {
		t.Fatalf("want rank 1's failure, got %v", err)
	}
	st := r.Status()
	if st.State != trainer.StateFailed {
		t.Fatalf("run state %s, want failed", st.State)
	}
	if m := st.Members[1]; m.State != trainer.StateFailed || m.ExitCode != 3 {
		t.Fatalf("rank 1: %+v", m)
	}
	for _, rank := range []int{0, 2} {
		m := st.Members[rank]
		if m.State != trainer.StateFailed || !strings.HasPrefix(m.Error, trainer.ReasonStopped) {
			t.Fatalf("rank %d: %+v, want stopped", rank, m)
		}
		if strings.Contains(r.Log(rank), "unreachable") {
			t.Fatalf("rank %d ran past its sleep", rank)
		}
	}
	if !strings.Contains(r.Log(1), "rank 1 failing") {
		t.Fatalf("rank 1 log %q", r.Log(1))
	}
}

func TestExecRetries(t *testing.T) {
	// Fails on the first attempt, succeeds on the second.
	job := testJob(t, `if [ -e "$STRATA_OUTPUT_DIR/tried" ]; then echo "attempt $STRATA_ATTEMPT"; exit 0; fi; touch "$STRATA_OUTPUT_DIR/tried"; exit 1`)
	job.Retries = 1
	r, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err != nil {
		t.Fatal(err)
	}
	if st := r.Status(); st.Attempt != 2 || st.State != trainer.StateSucceeded || r.Log(0) != "attempt 2\n" {
		t.Fatalf("status %+v, log %q", st, r.Log(0))
	}

	job = testJob(t, `exit 7`)
	job.Retries = 2
	r, err = trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err == nil {
		t.Fatal("want failure after retries")
	}
	if st := r.Status(); st.Attempt != 3 || st.Members[0].ExitCode != 7 {
		t.Fatalf("status %+v", st)
	}
}

func TestExecCancel(t *testing.T) {
	job := testJob(t, `touch "$STRATA_OUTPUT_DIR/started.$RANK"; sleep 600`, trainer.Member{Node: "a"}, trainer.Member{Node: "b"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // a failed check leaves no member running
	r, err := trainer.NewExec(trainer.ExecOptions{KillGrace: 2 * time.Second}).Launch(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	// Both members run (their files exist) a moment before the launcher,
	// back from starting the second, says the run is running.
	waitFor(t, func() bool {
		_, e0 := os.Stat(filepath.Join(job.OutputDir, "started.0"))
		_, e1 := os.Stat(filepath.Join(job.OutputDir, "started.1"))
		return e0 == nil && e1 == nil && r.Status().State == trainer.StateRunning
	})
	cancel()
	if err := waitRun(t, r); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	for _, m := range r.Status().Members {
		if m.State != trainer.StateFailed {
			t.Fatalf("member %+v still not stopped", m)
		}
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met before the deadline")
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a wait for behaviour
	}
}

func TestExecLogBounded(t *testing.T) {
	job := testJob(t, `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done`)
	r, err := trainer.NewExec(trainer.ExecOptions{LogLimit: 100}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err != nil {
		t.Fatal(err)
	}
	log := r.Log(0)
	if len(log) != 100 || !strings.HasSuffix(log, "line 1999\n") {
		t.Fatalf("log tail %q (%d bytes), want the last 100 bytes", log, len(log))
	}
}

func TestExecInvalid(t *testing.T) {
	tests := []struct {
		name string
		job  trainer.Job
	}{
		{name: "no-id", job: trainer.Job{Command: []string{"true"}, DatasetDir: "d", OutputDir: "o"}},
		{name: "no-dirs", job: trainer.Job{ID: "j", Command: []string{"true"}}},
		{name: "no-command", job: trainer.Job{ID: "j", DatasetDir: "d", OutputDir: "o"}},
		{name: "port", job: trainer.Job{ID: "j", Command: []string{"true"}, DatasetDir: "d", OutputDir: "o", MasterPort: 70000}},
		{name: "member", job: trainer.Job{ID: "j", Command: []string{"true"}, DatasetDir: "d", OutputDir: "o", Members: []trainer.Member{{}}}},
		{name: "retries", job: trainer.Job{ID: "j", Command: []string{"true"}, DatasetDir: "d", OutputDir: "o", Retries: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), tc.job); !errors.Is(err, trainer.ErrJob) {
				t.Fatalf("want ErrJob, got %v", err)
			}
		})
	}
	job := testJob(t, "")
	job.Command = []string{filepath.Join(t.TempDir(), "missing-binary")}
	r, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err == nil || !strings.Contains(err.Error(), trainer.ReasonStart) {
		t.Fatalf("want a start failure, got %v", err)
	}
}

func TestBuiltinLauncher(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	ds := linearSet(21, 800)
	var csv strings.Builder
	if err := ds.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "train.csv"), []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	job := trainer.Job{ID: "retrain-1", DatasetDir: data, OutputDir: filepath.Join(dir, "out"), Env: map[string]string{trainer.LabelEnv: "y"}}
	r, err := (&trainer.Builtin{Config: trainer.Config{Seed: 1, Epochs: 30}}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err != nil {
		t.Fatal(err)
	}
	var m trainer.Metrics
	readJSON(t, filepath.Join(job.OutputDir, trainer.MetricsFile), &m)
	if m.Accuracy < 0.9 || m.Classes != 2 || len(m.Features) != 3 {
		t.Fatalf("metrics %+v", m)
	}
	// Per-step metrics: one step per epoch, the last one the final
	// accuracy.
	steps, bad, err := trainer.ReadSteps(filepath.Join(job.OutputDir, trainer.StepsFile))
	if err != nil || bad != 0 || len(steps) != 30 || steps[29].Step != 30 || steps[29].Metrics["accuracy"] != m.Accuracy {
		t.Fatalf("steps: %d (bad %d, %v), last %+v; want 30 ending at accuracy %v", len(steps), bad, err, steps[len(steps)-1], m.Accuracy)
	}
	var ref drift.Reference
	readJSON(t, filepath.Join(job.OutputDir, trainer.ReferenceFile), &ref)
	if len(ref.Features) != 3 || ref.Prediction == nil {
		t.Fatalf("reference has %d features, prediction %v", len(ref.Features), ref.Prediction != nil)
	}
	model, err := os.ReadFile(filepath.Join(job.OutputDir, trainer.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{150, 0.02, 0, -50, -0.02, 0}
	got := orttest.Run(t, model, "input", "output", x, 2, 3, 1)
	if got[0] < 0.5 || got[1] > 0.5 {
		t.Fatalf("P(y=1) for a clear positive and a clear negative: %v", got)
	}

	job.Members = []trainer.Member{{Node: "a"}, {Node: "b"}}
	if _, err := (&trainer.Builtin{}).Launch(context.Background(), job); !errors.Is(err, trainer.ErrNotSupported) {
		t.Fatalf("two members: want ErrNotSupported, got %v", err)
	}
	job.Members = nil
	job.DatasetDir = t.TempDir()
	r, err = (&trainer.Builtin{}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); !errors.Is(err, trainer.ErrDataset) {
		t.Fatalf("empty dataset dir: want ErrDataset, got %v", err)
	}
}

func readJSON(tb testing.TB, path string, v any) {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		tb.Fatal(fmt.Errorf("%s: %w", path, err))
	}
}

// TestExecNodeStartsItsOwnRanks: with Job.Node set, a launch starts only
// that node's members, each with the whole gang's environment.
func TestExecNodeStartsItsOwnRanks(t *testing.T) {
	job := testJob(t, `echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK $NNODES $MASTER_ADDR:$MASTER_PORT $GLOO_SOCKET_IFNAME $STRATA_CHECKPOINT_DIR"`,
		trainer.Member{Node: "n1", Addr: "10.0.0.1"},
		trainer.Member{Node: "n2", Addr: "10.0.0.2"},
		trainer.Member{Node: "n2", Addr: "10.0.0.2"},
	)
	job.Node, job.MasterPort, job.CheckpointDir = "n2", 29601, "/ckpt"
	job.Fabric.GlooIfname = "lo"
	r, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err != nil {
		t.Fatalf("run failed: %v", err)
	}
	want := []string{"", "1 3 0 2 1 2 10.0.0.1:29601 lo /ckpt\n", "2 3 1 2 1 2 10.0.0.1:29601 lo /ckpt\n"}
	if diff := cmp.Diff(want, []string{r.Log(0), r.Log(1), r.Log(2)}); diff != "" {
		t.Fatalf("member outputs (-want +got):\n%s", diff)
	}
	if st := r.Status(); st.Members[0].State != trainer.StatePending || st.Members[1].State != trainer.StateSucceeded {
		t.Fatalf("rank 0 belongs to another node and must not run here: %+v", st.Members)
	}
	job.Node = "n3"
	if _, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job); !errors.Is(err, trainer.ErrJob) {
		t.Fatalf("a node with no member: err %v, want ErrJob", err)
	}
}

// TestExecTorchrunCommand: with Job.Torchrun, each member runs torchrun
// with its node's place in the gang, starting the job's command as its
// workers. echo stands in for torchrun: what is tested is the argv.
func TestExecTorchrunCommand(t *testing.T) {
	job := testJob(t, "", trainer.Member{Node: "n1", Addr: "10.0.0.1"}, trainer.Member{Node: "n2", Addr: "10.0.0.2"})
	job.Command = []string{"train.py", "--lr", "0.1"}
	job.Dir, job.MasterPort = t.TempDir(), 29602
	job.Torchrun = &trainer.Torchrun{Path: "echo", ProcsPerNode: 4}
	r, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRun(t, r); err != nil {
		t.Fatalf("run failed: %v", err)
	}
	common := " --nproc_per_node=4 --rdzv_backend=static --master_addr=10.0.0.1 --master_port=29602 --rdzv_id=job-1-1 --max_restarts=0 --redirects=0:1,1:1,2:1,3:1 --tee=0:1,1:1,2:1,3:1 --log_dir=" + filepath.Join(job.Dir, "torchrun") + " train.py --lr 0.1\n"
	want := []string{"--nnodes=2 --node_rank=0" + common, "--nnodes=2 --node_rank=1" + common}
	if diff := cmp.Diff(want, []string{r.Log(0), r.Log(1)}); diff != "" {
		t.Fatalf("torchrun command lines (-want +got):\n%s", diff)
	}
	job.Members = append(job.Members, trainer.Member{Node: "n2"})
	if _, err := trainer.NewExec(trainer.ExecOptions{}).Launch(context.Background(), job); !errors.Is(err, trainer.ErrJob) {
		t.Fatalf("two torchrun members on one node: err %v, want ErrJob", err)
	}
}
