#!/usr/bin/env bash
# Runs every fuzz target for FUZZTIME each (default 5m) and prints, per
# target, the executions and whether it found a crasher. A crasher is saved
# by go test under the package's testdata/fuzz/ and fails the run.
# FUZZPARALLEL=N runs N fuzzing workers (default: one per CPU).
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5m}
status=0
printf '%-45s %-22s %s\n' TARGET EXECS RESULT
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    out=$(go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" ${FUZZPARALLEL:+-parallel "$FUZZPARALLEL"} "$pkg" 2>&1)
    rc=$?
    execs=$(printf '%s\n' "$out" | grep -o 'execs: [0-9]*' | tail -1 | awk '{print $2}')
    result=ok
    if [ $rc -ne 0 ]; then
      result="FAILED (see testdata/fuzz/$target)"
      status=1
      printf '%s\n' "$out" | tail -20 >&2
    elif [ -z "$execs" ]; then
      # A target that skips itself (a missing library) fuzzes nothing.
      result="NOT RUN: $(printf '%s\n' "$out" | grep -m1 -o 'SKIP.*\|skip.*' || echo 'no executions')"
      status=1
    fi
    printf '%-45s %-22s %s\n' "${pkg#github.com/strata-mesh/strata/}.$target" "${execs:-?}" "$result"
  done
done
exit $status
