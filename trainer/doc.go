// Package trainer runs training jobs. It has two halves:
//
//   - a built-in Go trainer for small tabular classifiers (logistic
//     regression and a small MLP) that writes ONNX through trainer/onnx,
//     with input standardisation folded into the first layer, and a
//     per-feature reference summary of its training data for drift
//     detection (infer/drift);
//   - a launcher that runs a job's command on every gang member with the
//     environment torchrun and PyTorch DDP expect.
//
// Use the built-in trainer:
//
//	ds, err := trainer.ReadCSV(f, "label") // "" means the last column
//	res, err := trainer.Train(ctx, ds, trainer.Config{Kind: trainer.KindMLP, Seed: 1})
//	// res.Model is ONNX bytes; res.Reference is the drift reference.
package trainer
