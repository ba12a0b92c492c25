# Sourced by hygiene.sh and test.sh: step NAME CMD... runs CMD, prints
# "== NAME" before and "-- NAME: ok|FAILED (Ns)" after, and adds NAME to
# the caller's failed array when CMD fails; every step runs.
step() {
	local name=$1
	shift
	local start=$SECONDS
	echo "== $name"
	if "$@"; then
		echo "-- $name: ok ($((SECONDS - start))s)"
	else
		echo "-- $name: FAILED ($((SECONDS - start))s)"
		failed+=("$name")
	fi
}
