# Cold start rows for tools/tlstune-bench (issue 13): what a one-shot process pays for the
# CA bundle, without the shim, with the shim and its CA cache off (TLSTUNE_CA_CACHE=off:
# what the rest of the shim costs) and with the cache (the default: the first load indexes
# the file and each store parses what chain building asks for). Expects the bench's $work (bundle.pem, cert.pem), $shim,
# $tree, $port (nginx up, serving $work/small) and its say and progress functions.

# cold_ms STEP COMMAND...: one run's wall time in ms; with COLD_INSIDE set, what COMMAND
# prints. A command that fails, or prints no number, fails STEP: its time is no measurement.
cold_ms() {
	local step=$1 start end inside
	shift
	if [ -n "${COLD_INSIDE:-}" ]; then
		inside=$("$@" 2>/dev/null | tail -1) || fail "$step" "$1 failed"
		numbers "$step" "$inside"
		echo "$inside"
		return
	fi
	start=$(date +%s%N)
	"$@" >/dev/null 2>&1 || fail "$step" "$1 failed"
	end=$(date +%s%N)
	echo "$(((end - start) / 1000))" | awk '{ print $1 / 1000 }'
}

# cold_row NAME LABEL A B C: arrays A, B and C hold the commands without the shim, with it
# and the cache off, and with the cache; they run interleaved $cold_runs times (other load
# drifts alike for all three) and the row shows each median in ms and its ratio to the
# first; cold.dat gets the medians under LABEL, for the chart.
cold_row() {
	local name=$1 label=$2 i step="cold start row '$1'"
	local -n first=$3 second=$4 third=$5
	: >"$work/cold.a"
	: >"$work/cold.b"
	: >"$work/cold.c"
	for ((i = 0; i < cold_runs; i++)); do
		cold_ms "$step, without the shim" "${first[@]}" >>"$work/cold.a"
		cold_ms "$step, cache off" "${second[@]}" >>"$work/cold.b"
		cold_ms "$step, with the cache" "${third[@]}" >>"$work/cold.c"
	done
	local ma mb mc
	ma=$(cold_median "$work/cold.a") mb=$(cold_median "$work/cold.b") mc=$(cold_median "$work/cold.c")
	nonzero "$step" "$ma" "$mb" "$mc"
	say "$(awk -v name="$name" -v a="$ma" -v b="$mb" -v c="$mc" \
		'BEGIN { printf "| %s | %.2f | %.2f (%.2fx) | %.2f (%.2fx) |", name, a, b, b / a, c, c / a }')"
	printf '%d "%s" %.3f %.3f %.3f\n' "$((++cold_index))" "$label" "$ma" "$mb" "$mc" >>"$work/cold.dat"
}
cold_median() { sort -n "$1" | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'; }

cold_start_rows() {
	local cold_runs=${1:-21}
	local env_plain=(env SSL_CERT_FILE="$work/bundle.pem")
	local env_off=(env SSL_CERT_FILE="$work/bundle.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=off)
	local env_cached=(env SSL_CERT_FILE="$work/bundle.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=on)
	say "## Cold start: one process, one context ($(grep -c 'BEGIN CERT' "$work/bundle.pem") certificates in the bundle), median of $cold_runs interleaved runs, ms"
	say ""
	say "| what | without | with, cache off (TLSTUNE_CA_CACHE=off) | with the cache (default) |"
	say "|------|---------|----------------------------------------|--------------------------|"
	: >"$work/cold.dat"
	cold_index=0

	progress "cold start: curl"
	local curl_bundle=(curl -s --fail --cacert "$work/bundle.pem" "https://127.0.0.1:$port/small")
	local curl_floor=(curl -s --fail --cacert "$work/cert.pem" "https://127.0.0.1:$port/small")
	local a=("${env_plain[@]}" "${curl_bundle[@]}") b=("${env_off[@]}" "${curl_bundle[@]}")
	local c=("${env_cached[@]}" "${curl_bundle[@]}")
	cold_row "curl, one HTTPS GET, process wall time" "curl GET" a b c
	a=("${env_plain[@]}" "${curl_floor[@]}") b=("${env_off[@]}" "${curl_floor[@]}")
	c=("${env_cached[@]}" "${curl_floor[@]}")
	cold_row "curl, the same with a CA file of the one server certificate (the floor)" "curl GET,\\none-certificate floor" a b c

	progress "cold start: C"
	# --contexts 0 --quiet: one context, the first, timed inside the process (seconds).
	local c_context=("$tree/examples/ca_client" --loader ctx-default --quiet --contexts 0)
	local seconds_to_ms=(bash -o pipefail -c '"$@" | awk "{ print \$4 * 1000 }"' -)
	a=("${env_plain[@]}" "${seconds_to_ms[@]}" "${c_context[@]}")
	b=("${env_off[@]}" "${seconds_to_ms[@]}" "${c_context[@]}")
	c=("${env_cached[@]}" "${seconds_to_ms[@]}" "${c_context[@]}")
	COLD_INSIDE=1 cold_row "C: first SSL_CTX_new + SSL_CTX_set_default_verify_paths, in process" "C first context,\\nin process" a b c
	a=("${env_plain[@]}" "${c_context[@]}") b=("${env_off[@]}" "${c_context[@]}")
	c=("${env_cached[@]}" "${c_context[@]}")
	cold_row "C: the same, process wall time" "C first context,\\nprocess" a b c
	a=(env SSL_CERT_FILE="$work/cert.pem" "${seconds_to_ms[@]}" "${c_context[@]}")
	b=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=off "${seconds_to_ms[@]}" "${c_context[@]}")
	c=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=on "${seconds_to_ms[@]}" "${c_context[@]}")
	COLD_INSIDE=1 cold_row "C: first context, in process, with SSL_CERT_FILE of the one server certificate (the floor)" "C, one-certificate\\nfloor" a b c

	progress "cold start: python"
	local python_context=(/usr/bin/python3 -c 'import ssl, time
start = time.perf_counter()
ssl.create_default_context()
print((time.perf_counter() - start) * 1000)')
	a=("${env_plain[@]}" "${python_context[@]}") b=("${env_off[@]}" "${python_context[@]}")
	c=("${env_cached[@]}" "${python_context[@]}")
	COLD_INSIDE=1 cold_row "python: first ssl.create_default_context(), in process" "python first context,\\nin process" a b c
	cold_row "python: the same, process wall time" "python first context,\\nprocess" a b c
	a=(env SSL_CERT_FILE="$work/cert.pem" "${python_context[@]}")
	b=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=off "${python_context[@]}")
	c=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=on "${python_context[@]}")
	COLD_INSIDE=1 cold_row "python: first context, in process, with SSL_CERT_FILE of the one server certificate (the floor)" "python, one-certificate\\nfloor" a b c
	printf '\r\033[K' >&2
	say ""
	say "Goals (issues 13 and 21): C's first context <= 2 ms, curl within 1.25x of the one-certificate floor (compare the two curl rows), python's first context <= 3 ms. The floor rows are what the same context costs with one certificate to load: SSL_CTX_new and the program's own set-up, which no CA loading can remove."
	say ""
}
