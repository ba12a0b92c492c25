// Package onnx encodes small feed-forward models as ONNX ModelProto bytes in
// pure Go, without generated protobuf code: the wire format is written field
// by field with google.golang.org/protobuf/encoding/protowire, following the
// field numbers of onnx/onnx.proto (IR version 8).
//
// A model is a stack of dense Layers. Each layer becomes one Gemm node
// (Y = X·W + B, W stored [in, out]) followed by its activation node (Relu,
// Sigmoid, Softmax over the last axis, Tanh, or nothing). Weights are float32
// initializers stored as raw little-endian data. The graph has one input,
// "input" by default, shaped [N, features] float32 with N symbolic, and one
// output, "output" by default, shaped [N, outputs].
//
// Encoding is deterministic: the same layers and Options always give the same
// bytes, so a model's digest identifies it.
//
// Use:
//
//	model, err := onnx.LogisticRegression(weights, bias, onnx.Options{})
//	// or
//	model, layers, err := onnx.RandomMLP(1, 64, 256, 256, 16)
//	probs := onnx.Predict(layers, x, n) // pure-Go reference forward pass
package onnx
