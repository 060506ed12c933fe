# Cost rows for tools/tlstune-bench (issue 24): calls the shim interposes, on fds it knows
# nothing of, in a process without TLS (examples/call_cost), the library's start-up, and
# what an idle connection keeps after a burst (examples/idle_memory), and apache's syscalls
# (tools/lib/apache.sh).
# Without and with the shim, interleaved $runs times. Expects the bench's $shim, $tree,
# $runs, $quick, $work, spread and its say and progress functions.

# call_time PRELOAD HOW CALLS: ns per call of examples/call_cost HOW (its median of 5 rounds).
call_time() {
	LD_PRELOAD="$1" "$tree/examples/call_cost" "$2" "$3" | awk '{ print $2 }'
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

# idle_kib PRELOAD [ARG]...: KiB a process keeps per idle connection after reading a burst
# of 64 KiB on each of 300 (examples/idle_memory ARG...: its role, --release-buffers,
# --connect-first).
idle_kib() {
	LD_PRELOAD="$1" "$tree/examples/idle_memory" --cert "$work/cert.pem" --key "$work/key.pem" "${@:2}" |
		awk '/^KiB per connection / { print $4 }'
}

# floor_libraries: $work/floor-c.so, an empty preload library in C, and $work/floor-cxx.so,
# an empty one in C++ with an exception, its runtime linked in as libtlstune.so's is
# (static libstdc++; static libgcc, where the shim borrows the process's unwinder): what any
# preloaded library, and the C++ runtime, cost a start before the shim's own code.
floor_libraries() {
	echo 'int tlstune_floor;' | cc -shared -fPIC -O2 -x c -o "$work/floor-c.so" - ||
		fail "cost rows" "cannot build an empty C library (cc)"
	printf '%s\n' '#include <stdexcept>' \
		'extern "C" __attribute__((visibility("default"))) int tlstune_floor(int n) {' \
		'try { if (n < 0) throw std::runtime_error("n"); } catch (const std::exception &) { return 1; }' \
		'return 0; }' |
		c++ -shared -fPIC -O2 -fvisibility=hidden -static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL -x c++ -o "$work/floor-cxx.so" - ||
		fail "cost rows" "cannot build an empty C++ library (c++)"
}

# interleaved_row NAME MEASURE [ARG]...: MEASURE "" ARG... and MEASURE "$with" ARG... ($with:
# the shim unless set), side by side $runs times; one table row of the medians and the
# per-run ratios.
interleaved_row() {
	local name=$1 a b i ma mb mr lo hi with=${with:-$shim}
	shift
	: >"$work/cost.a"
	: >"$work/cost.b"
	: >"$work/cost.r"
	for ((i = 1; i <= runs; i++)); do
		progress "cost: $name, run $i of $runs"
		a=$("$1" "" "${@:2}") || fail "cost row '$name'" "failed without the shim"
		b=$("$1" "$with" "${@:2}") || fail "cost row '$name'" "failed with the shim"
		nonzero "cost row '$name', run $i" "$a" "$b"
		echo "$a" >>"$work/cost.a"
		echo "$b" >>"$work/cost.b"
		awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f\n", b / a }' >>"$work/cost.r"
	done
	read -r ma _ <<<"$(spread <"$work/cost.a")"
	read -r mb _ <<<"$(spread <"$work/cost.b")"
	read -r mr lo hi <<<"$(spread <"$work/cost.r")"
	say "| $name | $ma | $mb | ${mr}x ($lo to $hi) |"
}

cost_rows() {
	local calls=200000 starts=200 apache_requests=4000 name how
	[ -n "$quick" ] && calls=20000 && starts=50 && apache_requests=400
	say "## Cost where tlstune has no work: examples/call_cost, ns per call, $(runs_text "$runs")"
	say ""
	say "| what | without: ns | with: ns | with/without (lowest to highest of the runs) |"
	say "|------|-------------|----------|-----------------------------------------------|"
	while IFS='|' read -r how name; do
		interleaved_row "$name" call_time "$how" "$calls"
	done <<'ROWS'
close-epoll|`close` of a regular file, in a process with an epoll set
close-epoll-tls|`close` of an eventfd registered in an epoll set, in a process with a TLS connection
dup-close|`dup` of a regular file and `close` of the copy
dup-close-tls|the same in a process with a TLS connection
epoll-ctl|`EPOLL_CTL_ADD` and `EPOLL_CTL_DEL` of an eventfd
epoll-ctl-tls|the same in a process with a TLS connection
epoll-wait|`epoll_wait`, timeout 0, one idle eventfd in the set
poll|`poll`, timeout 0, one idle eventfd
write|`write` of a byte to `/dev/null`
ssl-pending|`SSL_pending`, an SSL that never wrote
ssl-get-error|`SSL_get_error`, the same
ssl-get-mode|`SSL_get_mode` (`SSL_ctrl`), the same
ROWS
	# The loader mapping the library and its constructor: a process that never uses OpenSSL.
	interleaved_row "\`/bin/true\` started ($starts in a row), microseconds, not ns" start_time "$starts"
	floor_libraries
	with="$work/floor-c.so" interleaved_row "the same with an empty C library preloaded instead (the floor of any preload), microseconds" start_time "$starts"
	with="$work/floor-cxx.so" interleaved_row "the same with an empty C++ library, its runtime linked in (static libstdc++ and libgcc), microseconds" start_time "$starts"
	interleaved_row "RSS per idle client connection after 64 KiB read, 300 connections, KiB, not ns" idle_kib
	interleaved_row "the same, the client sets \`SSL_MODE_RELEASE_BUFFERS\` (curl, python), KiB" idle_kib --release-buffers
	interleaved_row "the same, the client makes its 300 connections first, then reads each burst, KiB" idle_kib --connect-first
	interleaved_row "RSS per idle server connection after 64 KiB read, 300 connections, KiB" idle_kib --role server
	interleaved_row "the same, the server sets \`SSL_MODE_RELEASE_BUFFERS\` (nginx), KiB" idle_kib --role server --release-buffers
	interleaved_row "apache 2.4 (event MPM, mod_ssl): syscalls for $apache_requests keep-alive requests of 100 B, 50 clients (h2load --h1, strace -f -c), not ns" apache_syscalls "$apache_requests"
	say ""
	say "Each run times the call alone in a loop (the median of 5 rounds of $calls calls); the ratio is per run, without and with side by side, so a slow spell of the machine hits both."
	say ""
}
