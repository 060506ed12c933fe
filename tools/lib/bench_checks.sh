# shellcheck shell=bash
# Checks for tools/tlstune-bench and its sections (sourced). A step that cannot find what it
# measures, or whose loads, verifies or transfers fail, says so in one line naming the step
# and the bench stops: a failure never becomes a number, nor a ratio.

# fail STEP MESSAGE: "tlstune-bench: STEP: MESSAGE" on stderr and in the report, then exit 1
# (from a subshell, its status: the caller passes it on with `|| exit 1`).
fail() {
	echo "tlstune-bench: $1: $2" >&2
	[ -z "${report:-}" ] || printf '\n> **Failed: %s: %s**\n' "$1" "$2" >>"$report"
	exit 1
}

# numbers STEP VALUE...: fails unless every VALUE is a number (digits, at most one point).
numbers() {
	local step=$1 value
	shift
	for value; do
		[[ $value =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "$step" "measured nothing: '$value' is not a number"
	done
}

# nonzero STEP VALUE...: numbers above zero, as what a ratio divides by must be.
nonzero() {
	local step=$1 value
	shift
	numbers "$step" "$@"
	for value; do
		awk -v v="$value" 'BEGIN { exit !(v > 0) }' || fail "$step" "measured 0, which no ratio can divide by"
	done
}
