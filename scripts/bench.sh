#!/usr/bin/env bash
# Runs every benchmark once and prints the table (figures and ratios). A
# failing benchmark does not hide the others' figures: the table is printed
# from whatever ran, and the exit status says whether everything passed.
set -uo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench . -benchtime 1x -timeout 90m ./... | tee "$out"
status=${PIPESTATUS[0]}
go run ./cmd/benchtable < "$out"
exit "$status"
