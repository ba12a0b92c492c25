#!/usr/bin/env bash
# Extracts the demo's dataset: the Wisconsin diagnostic breast cancer data
# (569 cases, 30 features) that Debian's python3-sklearn package ships as
# sklearn/datasets/data/breast_cancer.csv. The package is downloaded and
# unpacked, not installed (its Python dependencies are not needed).
#
#   .deps/data/breast_cancer.csv
#
# Already extracted: nothing to do. Without apt-get, `strata dev` says so and
# uses a synthetic dataset instead.
set -euo pipefail
dest=.deps/data
out=$dest/breast_cancer.csv
[ -s "$out" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-data: apt-get not found; the demo will use a synthetic dataset" >&2
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest"
if ! (cd "$tmp" && apt-get download python3-sklearn >/dev/null 2>&1); then
	SUDO=
	[ "$(id -u)" -ne 0 ] && SUDO=sudo
	$SUDO apt-get update -qq
	(cd "$tmp" && apt-get download python3-sklearn >/dev/null)
fi
dpkg-deb -x "$tmp"/python3-sklearn_*.deb "$tmp/x"
src=$(find "$tmp/x" -path '*sklearn/datasets/data/breast_cancer.csv' | head -1)
[ -n "$src" ] || { echo "install-data: breast_cancer.csv not in python3-sklearn" >&2; exit 1; }
cp "$src" "$out.tmp" && mv "$out.tmp" "$out"
echo "install-data: installed $out"
