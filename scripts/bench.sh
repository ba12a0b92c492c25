#!/usr/bin/env bash
# Runs every benchmark once and prints the table (figures and ratios). A
# failing benchmark does not hide the others' figures: the table is printed
# from whatever ran, and the exit status says whether everything passed.
set -uo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# -p 1: one package's benchmarks at a time. Run side by side, a package's
# benchmarks share the CPU with another's and their wall times (p99 most)
# measure the other as much as themselves.
go test -p 1 -run '^$' -bench . -benchtime 1x -timeout 90m ./... | tee "$out"
status=${PIPESTATUS[0]}
go run ./cmd/benchtable < "$out"
exit "$status"
