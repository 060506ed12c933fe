# shellcheck shell=bash
# Option parsing shared by tools/demo and tools/tlstune-bench (bash). Sourced, not run.
# The script sets prog (its name), usage (its help) and caller (the directory the user ran
# it from, before it changed to the source tree), and loops:
#   taken=1; case "$1" in --n | --n=*) need_value "$@"; whole_number --n 3 "$value"; n=$value ;; esac
#   shift "$taken"

# shellcheck disable=SC2154 # prog and usage are the sourcing script's
# usage_error MESSAGE: the message and the usage on stderr, exit 2, before any work.
usage_error() {
	echo "$prog: $1" >&2
	echo "$usage" >&2
	exit 2
}

# need_value "$@": the value of the option in $1, given as --name=VALUE or --name VALUE;
# sets value, and taken to the words it used.
# shellcheck disable=SC2034 # value and taken are for the caller
need_value() {
	case "$1" in
	*=*) value=${1#*=} taken=1 ;;
	*) [ $# -ge 2 ] || usage_error "$1 needs a value"
		value=$2 taken=2 ;;
	esac
	[ -n "$value" ] || usage_error "${1%%=*} needs a value"
}

# whole_number NAME MIN VALUE: VALUE is a whole number of MIN or more, or a usage error.
whole_number() {
	if ! [[ $3 =~ ^[0-9]{1,9}$ ]] || [ "$((10#$3))" -lt "$2" ]; then
		usage_error "$1: '$3' is not a whole number of $2 or more"
	fi
}

# from_caller PATH: PATH as the user meant it, from where they ran the script.
from_caller() {
	case "$1" in
	/*) echo "$1" ;;
	*) echo "$caller/$1" ;;
	esac
}
