#!/usr/bin/env bash
# Installs the ONNX Runtime shared library into .deps/onnxruntime (filled in
# by the inference work; until then there is nothing to install).
exit 0
