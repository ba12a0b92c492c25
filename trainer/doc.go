// Package trainer runs training jobs. It has two halves:
//
//   - a built-in Go trainer for small tabular classifiers (logistic
//     regression and a small MLP) that writes ONNX through trainer/onnx,
//     with input standardisation folded into the first layer, and a
//     per-feature reference summary of its training data for drift
//     detection (infer/drift);
//   - a launcher that runs a job's command on every gang member with the
//     environment torchrun and PyTorch DDP expect (all members here, or,
//     with Job.Node, one node's members of a gang spanning several nodes).
//
// Use the built-in trainer:
//
//	ds, err := trainer.ReadCSV(f, "label") // "" means the last column
//	res, err := trainer.Train(ctx, ds, trainer.Config{Kind: trainer.KindMLP, Seed: 1})
//	// res.Model is ONNX bytes; res.Reference is the drift reference.
//
// Launch a job (both launchers satisfy Launcher):
//
//	var l trainer.Launcher = trainer.NewExec(trainer.ExecOptions{Logger: log})
//	run, err := l.Launch(ctx, trainer.Job{
//		ID:         "fraud-retrain-7",
//		Command:    []string{"torchrun", "--nproc-per-node=1", "train.py"},
//		Members:    []trainer.Member{{Node: "gpu-1", Addr: "10.0.0.1", GPUs: []int{0}}, {Node: "gpu-1", Addr: "10.0.0.1", GPUs: []int{1}}},
//		DatasetDir: "/var/lib/strata/artifacts/ds-123",
//		OutputDir:  "/var/lib/strata/jobs/fraud-retrain-7/out",
//		Fabric:     trainer.Fabric{SocketIfname: "eth1", IBHCA: "mlx5_0"},
//		Retries:    1,
//	})
//	err = run.Wait(ctx) // run.Status() and run.Log(rank) at any time
//
// trainer.Builtin runs the Go trainer as a single-member job: it reads the
// first *.csv in DatasetDir and writes model.onnx, reference.json and
// metrics.json to OutputDir.
package trainer
