# Cold start rows for tools/tlstune-bench (issue 13): what a one-shot process pays for the
# CA bundle, without the shim, with the shim and its CA cache off (TLSTUNE_CA_CACHE=off:
# what the rest of the shim costs) and with the cache (the default: the first load indexes
# the file and each store parses what chain building asks for). Expects the bench's $work (bundle.pem, cert.pem), $shim,
# $tree, $port (nginx up, serving $work/small) and its say and progress functions.

# cold_ms COMMAND...: one run's wall time in ms; with COLD_INSIDE set, what COMMAND prints.
cold_ms() {
	local start end
	if [ -n "${COLD_INSIDE:-}" ]; then
		"$@" 2>/dev/null | tail -1
		return
	fi
	start=$(date +%s%N)
	"$@" >/dev/null 2>&1 || true
	end=$(date +%s%N)
	echo "$(((end - start) / 1000))" | awk '{ print $1 / 1000 }'
}

# cold_row NAME A B C: arrays A, B and C hold the commands without the shim, with it and
# the cache off, and with the cache; they run interleaved $cold_runs times (other load drifts alike for all three) and
# the row shows each median in ms and its ratio to the first.
cold_row() {
	local name=$1 i
	local -n first=$2 second=$3 third=$4
	: >"$work/cold.a"
	: >"$work/cold.b"
	: >"$work/cold.c"
	for ((i = 0; i < cold_runs; i++)); do
		cold_ms "${first[@]}" >>"$work/cold.a"
		cold_ms "${second[@]}" >>"$work/cold.b"
		cold_ms "${third[@]}" >>"$work/cold.c"
	done
	median() { sort -n "$1" | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'; }
	say "$(awk -v name="$name" -v a="$(median "$work/cold.a")" -v b="$(median "$work/cold.b")" \
		-v c="$(median "$work/cold.c")" \
		'BEGIN { printf "| %s | %.2f | %.2f (%.2fx) | %.2f (%.2fx) |", name, a, b, b / a, c, c / a }')"
}

cold_start_rows() {
	local cold_runs=${1:-21}
	local env_plain=(env SSL_CERT_FILE="$work/bundle.pem")
	local env_off=(env SSL_CERT_FILE="$work/bundle.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=off)
	local env_cached=(env SSL_CERT_FILE="$work/bundle.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=on)
	say "## Cold start: one process, one context ($(grep -c 'BEGIN CERT' "$work/bundle.pem") certificates in the bundle), median of $cold_runs interleaved runs, ms"
	say ""
	say "| what | without | with, cache off (TLSTUNE_CA_CACHE=off) | with the cache (default) |"
	say "|------|---------|----------------------------------------|--------------------------|"

	progress "cold start: curl"
	local curl_bundle=(curl -s --fail --cacert "$work/bundle.pem" "https://127.0.0.1:$port/small")
	local curl_floor=(curl -s --fail --cacert "$work/cert.pem" "https://127.0.0.1:$port/small")
	local a=("${env_plain[@]}" "${curl_bundle[@]}") b=("${env_off[@]}" "${curl_bundle[@]}")
	local c=("${env_cached[@]}" "${curl_bundle[@]}")
	cold_row "curl, one HTTPS GET, process wall time" a b c
	a=("${env_plain[@]}" "${curl_floor[@]}") b=("${env_off[@]}" "${curl_floor[@]}")
	c=("${env_cached[@]}" "${curl_floor[@]}")
	cold_row "curl, the same with a CA file of the one server certificate (the floor)" a b c

	progress "cold start: C"
	# --contexts 0 --quiet: one context, the first, timed inside the process (seconds).
	local c_context=("$tree/examples/ca_client" --loader ctx-default --quiet --contexts 0)
	local seconds_to_ms=(sh -c '"$@" | awk "{ print \$4 * 1000 }"' -)
	a=("${env_plain[@]}" "${seconds_to_ms[@]}" "${c_context[@]}")
	b=("${env_off[@]}" "${seconds_to_ms[@]}" "${c_context[@]}")
	c=("${env_cached[@]}" "${seconds_to_ms[@]}" "${c_context[@]}")
	COLD_INSIDE=1 cold_row "C: first SSL_CTX_new + SSL_CTX_set_default_verify_paths, in process" a b c
	a=("${env_plain[@]}" "${c_context[@]}") b=("${env_off[@]}" "${c_context[@]}")
	c=("${env_cached[@]}" "${c_context[@]}")
	cold_row "C: the same, process wall time" a b c
	a=(env SSL_CERT_FILE="$work/cert.pem" "${seconds_to_ms[@]}" "${c_context[@]}")
	b=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=off "${seconds_to_ms[@]}" "${c_context[@]}")
	c=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=on "${seconds_to_ms[@]}" "${c_context[@]}")
	COLD_INSIDE=1 cold_row "C: first context, in process, with SSL_CERT_FILE of the one server certificate (the floor)" a b c

	progress "cold start: python"
	local python_context=(/usr/bin/python3 -c 'import ssl, time
start = time.perf_counter()
ssl.create_default_context()
print((time.perf_counter() - start) * 1000)')
	a=("${env_plain[@]}" "${python_context[@]}") b=("${env_off[@]}" "${python_context[@]}")
	c=("${env_cached[@]}" "${python_context[@]}")
	COLD_INSIDE=1 cold_row "python: first ssl.create_default_context(), in process" a b c
	cold_row "python: the same, process wall time" a b c
	a=(env SSL_CERT_FILE="$work/cert.pem" "${python_context[@]}")
	b=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=off "${python_context[@]}")
	c=(env SSL_CERT_FILE="$work/cert.pem" LD_PRELOAD="$shim" TLSTUNE_CA_CACHE=on "${python_context[@]}")
	COLD_INSIDE=1 cold_row "python: first context, in process, with SSL_CERT_FILE of the one server certificate (the floor)" a b c
	printf '\r\033[K' >&2
	say ""
	say "Goals (issues 13 and 21): C's first context <= 2 ms, curl within 1.25x of the one-certificate floor (compare the two curl rows), python's first context <= 3 ms. The floor rows are what the same context costs with one certificate to load: SSL_CTX_new and the program's own set-up, which no CA loading can remove."
	say ""
}
