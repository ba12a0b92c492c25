#!/usr/bin/env bash
# make test's run, in two lanes side by side:
#
#   end to end  go test ./cmd/strata: agents as processes in network
#               namespaces, four tests at a time. They wait on real time
#               (TestFaultSchedule alone is five minutes of faults) and
#               leave most of the CPU idle.
#   the rest    hygiene, then every other package's tests, then the race
#               run, then the release build and its tests (test-release).
#
# Run one after the other they took 14-16 minutes on a 2-core machine;
# side by side the end-to-end lane fills the CPU the other leaves. Each
# lane's output is printed whole when it ends (the end-to-end lane's last),
# with how long each step took. Every step runs even after one fails; the
# exit status is 1 if any did.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}
MAKE=${MAKE:-make}

# The race detector runs where concurrency is the product's: gossip,
# transfers, the catalog and the components over it, the agent's wiring.
# The race run found data races in mesh (reads of memberlist's state
# without its lock) and exercises every goroutine the agent starts.
race_pkgs=(./mesh/... ./agent/... ./storage/... ./internal/...)

failed=()
# shellcheck source=scripts/steps.sh
source "$root/scripts/steps.sh"

e2e_log=$(mktemp)
trap 'rm -f "$e2e_log"' EXIT
start=$SECONDS
(
	s=$SECONDS
	if $GO test -count=1 -timeout 20m -parallel 4 ./cmd/strata; then
		echo "-- end-to-end tests: ok ($((SECONDS - s))s)"
	else
		echo "-- end-to-end tests: FAILED ($((SECONDS - s))s)"
		exit 1
	fi
) >"$e2e_log" 2>&1 &
e2e=$!

mapfile -t rest < <($GO list ./... | grep -v '/cmd/strata$')
step hygiene bash scripts/hygiene.sh
step "tests" $GO test -count=1 -timeout 20m "${rest[@]}"
step "race run" $GO test -count=1 -race -timeout 20m "${race_pkgs[@]}"
step "release tests" $MAKE --no-print-directory test-release

echo "== end-to-end tests (go test ./cmd/strata, run beside the steps above)"
wait "$e2e" || failed+=("end-to-end tests")
cat "$e2e_log"

echo "test: $((SECONDS - start))s"
if [[ ${#failed[@]} -gt 0 ]]; then
	echo "test: FAILED: ${failed[*]}"
	exit 1
fi
echo "test: ok"
