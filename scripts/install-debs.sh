#!/usr/bin/env bash
# Installs the Debian packages the tests use, when missing.
#
#   libonnx-testdata  ONNX's backend test cases (model.onnx plus TensorProto
#                     inputs and expected outputs), used by the infer
#                     package's conformance test.
#   chromium          a headless browser the web dashboard's tests drive
#                     (internal/ui, through the DevTools protocol).
#   python3-torch     PyTorch (CPU, Gloo) and ONNX for Python: the PyTorch DDP
#   python3-onnx      example runs as a multi-node gang in internal/jobs' tests.
#
# Packages already installed are skipped, so running this again is cheap. On a
# machine without apt-get the tests that need these packages skip.
set -euo pipefail
pkgs=(libonnx-testdata chromium python3-torch python3-onnx)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-debs: apt-get not found; tests needing ${missing[*]} will skip" >&2
	exit 0
fi
SUDO=
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
