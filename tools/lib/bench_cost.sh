# Cost rows for tools/tlstune-bench (issue 24): calls the shim interposes, on fds it knows
# nothing of, in a process without TLS (examples/call_cost). Without and with the shim,
# interleaved $runs times; each run's own median of 5 rounds. Expects the bench's $shim,
# $tree, $runs, spread and its say and progress functions.

cost_rows() {
	local calls=200000 name how a b i ma mb mr lo hi
	[ -n "$quick" ] && calls=20000
	say "## Cost where tlstune has no work: examples/call_cost, ns per call, $(runs_text "$runs")"
	say ""
	say "| what | without: ns | with: ns | with/without (lowest to highest of the runs) |"
	say "|------|-------------|----------|-----------------------------------------------|"
	while IFS='|' read -r how name; do
		: >"$work/cost.a"
		: >"$work/cost.b"
		: >"$work/cost.r"
		for ((i = 1; i <= runs; i++)); do
			progress "cost: $name, run $i of $runs"
			a=$("$tree/examples/call_cost" "$how" "$calls" | awk '{ print $2 }')
			b=$(LD_PRELOAD="$shim" "$tree/examples/call_cost" "$how" "$calls" | awk '{ print $2 }')
			echo "$a" >>"$work/cost.a"
			echo "$b" >>"$work/cost.b"
			awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f\n", b / a }' >>"$work/cost.r"
		done
		read -r ma _ <<<"$(spread <"$work/cost.a")"
		read -r mb _ <<<"$(spread <"$work/cost.b")"
		read -r mr lo hi <<<"$(spread <"$work/cost.r")"
		say "| $name | $ma | $mb | ${mr}x ($lo to $hi) |"
	done <<'ROWS'
close-epoll|`close` of a regular file, in a process with an epoll set
dup-close|`dup` of a regular file and `close` of the copy
epoll-ctl|`EPOLL_CTL_ADD` and `EPOLL_CTL_DEL` of an eventfd
epoll-wait|`epoll_wait`, timeout 0, one idle eventfd in the set
poll|`poll`, timeout 0, one idle eventfd
ROWS
	startup_row
	say ""
	say "Each run times the call alone in a loop (the median of 5 rounds of $calls calls); the ratio is per run, without and with side by side, so a slow spell of the machine hits both."
	say ""
}

# start_time PRELOAD N: microseconds per start of /bin/true, N starts in a row.
start_time() {
	local preload=$1 n=$2 i begin end
	begin=$(date +%s%N)
	for ((i = 0; i < n; i++)); do
		LD_PRELOAD="$preload" /bin/true
	done
	end=$(date +%s%N)
	echo $(((end - begin) / n / 1000))
}

# The library's start-up cost (the loader mapping it, its constructor): /bin/true, which
# never uses OpenSSL, started without and with it, interleaved.
startup_row() {
	local starts=200 a b i ma mb mr lo hi
	[ -n "$quick" ] && starts=50
	: >"$work/start.a"
	: >"$work/start.b"
	: >"$work/start.r"
	for ((i = 1; i <= runs; i++)); do
		progress "cost: start-up, run $i of $runs"
		a=$(start_time "" "$starts")
		b=$(start_time "$shim" "$starts")
		echo "$a" >>"$work/start.a"
		echo "$b" >>"$work/start.b"
		awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f\n", b / a }' >>"$work/start.r"
	done
	read -r ma _ <<<"$(spread <"$work/start.a")"
	read -r mb _ <<<"$(spread <"$work/start.b")"
	read -r mr lo hi <<<"$(spread <"$work/start.r")"
	say "| \`/bin/true\` started ($starts in a row), microseconds, not ns | $ma | $mb | ${mr}x ($lo to $hi) |"
}
