#!/usr/bin/env bash
# Runs every benchmark once and prints the table (figures and ratios).
set -euo pipefail
out=$(mktemp)
go test -run '^$' -bench . -benchtime 1x -timeout 60m ./... | tee "$out"
go run ./cmd/benchtable < "$out"
