// Package infer serves ONNX models: one ONNX Runtime session per loaded model
// version, the Open Inference Protocol (KServe v2) over HTTP, dynamic
// batching, hot swap of versions with no failed request, forwarding of
// requests for models held elsewhere, and a sample of live traffic for the
// drift detectors.
//
// The ONNX Runtime shared library is loaded once per process, from
// Config.LibraryPath or $STRATA_ORT_LIB; `make setup-ort` installs the
// pinned CPU build into .deps/onnxruntime. GPU nodes can point
// STRATA_ORT_LIB at a CUDA build instead.
//
// Use:
//
//	srv, err := infer.New(infer.Config{NodeName: "edge-1", Registerer: reg})
//	if err != nil { ... } // says how to install the runtime when it is missing
//	defer srv.Close()
//	err = srv.Load(ctx, "fraud", "3", onnxBytes) // swaps out version 2 if loaded
//	mux.Handle("/v2/", srv.Handler())
//
//	resp, err := srv.Infer(ctx, &infer.Request{Model: "fraud", Inputs: []infer.Tensor{{
//		Name: "x", Datatype: infer.FP32, Shape: []int64{1, 4}, Data: []float32{1, 2, 3, 4},
//	}}})
//
// Batching applies to models whose inputs and outputs all have a dynamic first
// dimension (-1) and fixed others: concurrent requests are concatenated along
// the first dimension into one session call (see Config.BatchWindow,
// MaxBatch, BatchRunners) and each caller gets its own rows back.
//
// Infer bodies are JSON tensors or, for less codec time on wide tensors, the
// protocol's binary tensor data extension (Inference-Header-Content-Length:
// a JSON header followed by raw little-endian tensor bytes); see Handler.
// A Forwarder receives the client's request as sent, headers included.
//
// 0-d (scalar) tensors are refused: the Go binding cannot create them.
package infer
