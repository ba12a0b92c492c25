#!/usr/bin/env bash
# Checks the code's hygiene: gofmt, go vet, go mod tidy (go.mod and go.sum
# must not change) and staticcheck. Every check runs, even after one fails;
# the summary says which failed, and the exit status is 1 if any did.
#
#   scripts/hygiene.sh            every package
#   scripts/hygiene.sh ./api/...  vet and staticcheck these packages only
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}
# staticcheck is a tool of go.mod: go mod download (make setup) caches it, and
# the check needs no network.
pkgs=("$@")
[[ ${#pkgs[@]} -gt 0 ]] || pkgs=(./...)

failed=()
# shellcheck source=scripts/steps.sh
source "$root/scripts/steps.sh"

check_gofmt() {
	local files
	files=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
	[[ -z $files ]] && return 0
	echo "not gofmt'ed (run make fmt):"
	echo "$files" | sed 's/^/  /'
	return 1
}

# go mod tidy -diff prints what tidy would change and exits 1, leaving the
# files alone.
check_tidy() {
	"$GO" mod tidy -diff
}

step gofmt check_gofmt
step "go vet" "$GO" vet "${pkgs[@]}"
step "go mod tidy" check_tidy
step staticcheck "$GO" tool staticcheck "${pkgs[@]}"

if [[ ${#failed[@]} -gt 0 ]]; then
	echo "hygiene: FAILED: ${failed[*]} (${SECONDS}s)"
	exit 1
fi
echo "hygiene: ok (${SECONDS}s)"
