# Cold start rows for tools/tlstune-bench (issue 13): what a one-shot process pays for the
# CA bundle, without the shim, with it (eager: the first load parses everything) and with
# TLSTUNE_CA_LAZY=on (the first load indexes the file and parses what chain building asks
# for). Expects the bench's $work (bundle.pem, cert.pem), $shim, $tree, $port (nginx up,
# serving $work/small) and its say and progress functions.

# cold_median COMMAND...: the median wall time of $cold_runs runs of COMMAND, in ms.
cold_median() {
	local i start end
	for ((i = 0; i < cold_runs; i++)); do
		start=$(date +%s%N)
		"$@" >/dev/null 2>&1 || true
		end=$(date +%s%N)
		echo $(((end - start) / 1000))
	done | sort -n | awk '{ t[NR] = $1 } END { printf "%.2f", t[int((NR + 1) / 2)] / 1000 }'
}

# cold_inside COMMAND...: the median of what COMMAND prints (ms), over $cold_runs runs.
cold_inside() {
	local i
	for ((i = 0; i < cold_runs; i++)); do
		"$@" 2>/dev/null
	done | sort -n | awk '{ t[NR] = $1 } END { printf "%.2f", t[int((NR + 1) / 2)] }'
}

cold_row() { # cold_row NAME WITHOUT EAGER LAZY: ms, and the ratios to the row's first
	say "$(awk -v name="$1" -v a="$2" -v b="$3" -v c="$4" \
		'BEGIN { printf "| %s | %.2f | %.2f (%.2fx) | %.2f (%.2fx) |", name, a, b, b / a, c, c / a }')"
}

cold_start_rows() {
	local cold_runs=${1:-21} curl_bundle curl_floor c_context python_context
	local eager=(env SSL_CERT_FILE="$work/bundle.pem" LD_PRELOAD="$shim")
	local lazy=(env SSL_CERT_FILE="$work/bundle.pem" LD_PRELOAD="$shim" TLSTUNE_CA_LAZY=on)
	local plain=(env SSL_CERT_FILE="$work/bundle.pem")
	say "## Cold start: one process, one context ($(grep -c 'BEGIN CERT' "$work/bundle.pem") certificates in the bundle), median of $cold_runs runs, ms"
	say ""
	say "| what | without | with (eager) | with TLSTUNE_CA_LAZY=on |"
	say "|------|---------|--------------|-------------------------|"

	progress "cold start: curl"
	curl_bundle=(curl -s --fail --cacert "$work/bundle.pem" "https://127.0.0.1:$port/small")
	curl_floor=(curl -s --fail --cacert "$work/cert.pem" "https://127.0.0.1:$port/small")
	local floor
	floor=$(cold_median "${plain[@]}" "${curl_floor[@]}")
	cold_row "curl, one HTTPS GET, process wall time" "$(cold_median "${plain[@]}" "${curl_bundle[@]}")" \
		"$(cold_median "${eager[@]}" "${curl_bundle[@]}")" "$(cold_median "${lazy[@]}" "${curl_bundle[@]}")"
	cold_row "curl, the same with a CA file of the one server certificate (the floor)" "$floor" \
		"$(cold_median env LD_PRELOAD="$shim" "${curl_floor[@]}")" \
		"$(cold_median env LD_PRELOAD="$shim" TLSTUNE_CA_LAZY=on "${curl_floor[@]}")"

	progress "cold start: C"
	# One context, timed inside the process (--contexts 0 --quiet: the first and only one).
	c_context=("$tree/examples/ca_client" --loader ctx-default --quiet --contexts 0)
	cold_row "C: first SSL_CTX_new + SSL_CTX_set_default_verify_paths, in process" \
		"$(cold_inside "${plain[@]}" sh -c '"$@" | awk "{ print \$4 * 1000 }"' - "${c_context[@]}")" \
		"$(cold_inside "${eager[@]}" sh -c '"$@" | awk "{ print \$4 * 1000 }"' - "${c_context[@]}")" \
		"$(cold_inside "${lazy[@]}" sh -c '"$@" | awk "{ print \$4 * 1000 }"' - "${c_context[@]}")"
	cold_row "C: the same, process wall time" "$(cold_median "${plain[@]}" "${c_context[@]}")" \
		"$(cold_median "${eager[@]}" "${c_context[@]}")" "$(cold_median "${lazy[@]}" "${c_context[@]}")"

	progress "cold start: python"
	python_context=(/usr/bin/python3 -c 'import ssl, time
start = time.perf_counter()
ssl.create_default_context()
print((time.perf_counter() - start) * 1000)')
	cold_row "python: first ssl.create_default_context(), in process" \
		"$(cold_inside "${plain[@]}" "${python_context[@]}")" "$(cold_inside "${eager[@]}" "${python_context[@]}")" \
		"$(cold_inside "${lazy[@]}" "${python_context[@]}")"
	cold_row "python: the same, process wall time" "$(cold_median "${plain[@]}" "${python_context[@]}")" \
		"$(cold_median "${eager[@]}" "${python_context[@]}")" "$(cold_median "${lazy[@]}" "${python_context[@]}")"
	printf '\r\033[K' >&2
	say ""
	say "Goals (issue 13): C first context <= 2 ms, curl within 1.25x of the one-certificate floor, python's first context <= 3 ms. The curl rows' ratio to the floor: divide by the floor row's first column."
	say ""
}
