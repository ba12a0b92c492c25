#!/usr/bin/env bash
# Installs the ONNX Runtime shared library into .deps/onnxruntime.
#
# The library comes from the onnxruntime-node npm package (CPU build, linux
# x64), whose C API version matches github.com/yalue/onnxruntime_go in go.mod.
# Only the tarball is fetched and unpacked: no npm install scripts run. The
# file is checked against a pinned sha256; a present file with the right hash
# is left alone, so running this again is cheap.
#
# To use another build (a CUDA build on a GPU node, say), skip this script and
# point STRATA_ORT_LIB at your libonnxruntime.so.
set -euo pipefail

ORT_NPM_VERSION=1.24.1
ORT_SHA256=53ef1ac028dd1b05554b8da28d9159eb3876f99868193d2aaa6e67f0243c23d4
ORT_MEMBER=package/bin/napi-v6/linux/x64/libonnxruntime.so.1

root=$(cd "$(dirname "$0")/.." && pwd)
dest_dir="$root/.deps/onnxruntime"
dest="$dest_dir/libonnxruntime.so.1"

die() { echo "install-ort: $*" >&2; exit 1; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$dest" ] && [ "$(sha_of "$dest")" = "$ORT_SHA256" ]; then
	exit 0
fi

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) ;;
*) die "no pinned ONNX Runtime build for $(uname -s)/$(uname -m); build or download libonnxruntime.so (C API 1.24) and set STRATA_ORT_LIB to its path" ;;
esac

command -v npm >/dev/null 2>&1 || die "npm is needed to fetch onnxruntime-node@$ORT_NPM_VERSION (apt-get install npm), or set STRATA_ORT_LIB to an existing libonnxruntime.so"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "install-ort: fetching onnxruntime-node@$ORT_NPM_VERSION" >&2
(cd "$tmp" && npm pack --silent --ignore-scripts "onnxruntime-node@$ORT_NPM_VERSION" >/dev/null) ||
	die "npm pack onnxruntime-node@$ORT_NPM_VERSION failed (is the npm registry reachable?)"
shopt -s nullglob
tgzs=("$tmp"/onnxruntime-node-*.tgz)
[ ${#tgzs[@]} -eq 1 ] || die "npm pack produced no tarball in $tmp"
tgz=${tgzs[0]}
tar -xzf "$tgz" -C "$tmp" "$ORT_MEMBER" || die "$ORT_MEMBER not found in $(basename "$tgz")"

got=$(sha_of "$tmp/$ORT_MEMBER")
[ "$got" = "$ORT_SHA256" ] || die "sha256 mismatch for $ORT_MEMBER: got $got, want $ORT_SHA256"

mkdir -p "$dest_dir"
install -m 0644 "$tmp/$ORT_MEMBER" "$dest.tmp"
mv -f "$dest.tmp" "$dest"
echo "install-ort: installed $dest" >&2
