#!/usr/bin/env bash
# Runs the demo (strata dev --once) N times to measure how often it passes.
#
#   scripts/demo-loop.sh N [extra strata dev flags]
#
# Builds first (make build), with the environment make demo gives the demo:
# the ONNX Runtime library and the demo dataset under .deps (set
# STRATA_ORT_LIB or STRATA_DEMO_DATA to use others). The output of every
# failed run is kept in a temporary directory, named at the end. Prints
# "demo: P passed, F failed" and exits 1 if any run failed.
set -uo pipefail

usage() { echo "usage: $0 N [strata dev flags]" >&2; exit 2; }
[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || usage
n=$1
shift

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export STRATA_ORT_LIB=${STRATA_ORT_LIB:-$root/.deps/onnxruntime/libonnxruntime.so.1}
export STRATA_DEMO_DATA=${STRATA_DEMO_DATA:-$root/.deps/data/breast_cancer.csv}

if ! make build >/dev/null; then
	echo "demo: make build failed" >&2
	exit 1
fi
for f in "$STRATA_ORT_LIB" "$STRATA_DEMO_DATA"; do
	[[ -f $f ]] || { echo "demo: $f is missing (run make setup)" >&2; exit 1; }
done

keep=$(mktemp -d "${TMPDIR:-/tmp}/strata-demo-loop.XXXXXX")
passed=0
failed=0
for ((i = 1; i <= n; i++)); do
	log="$keep/run-$i.log"
	start=$SECONDS
	if ./bin/strata dev --once "$@" >"$log" 2>&1; then
		passed=$((passed + 1))
		rm -f "$log"
		echo "run $i/$n: passed ($((SECONDS - start))s)"
	else
		status=$?
		failed=$((failed + 1))
		echo "run $i/$n: FAILED, exit $status ($((SECONDS - start))s): $log"
		grep -m1 '^demo:\|^strata dev:' "$log" | sed 's/^/    /'
	fi
done

echo "demo: $passed passed, $failed failed"
if ((failed > 0)); then
	echo "output of the failed runs: $keep"
	exit 1
fi
rmdir "$keep"
