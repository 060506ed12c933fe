# The record-merging rows of tools/tlstune-bench (sourced; issue 14): $writes SSL_write
# calls of 100 B from examples/write_burst to examples/tls_server --sink, with
# TLSTUNE_COALESCE=records, =syscalls, and no shim at all. The server runs without the shim
# in every column, so what it spends is what the sender's records cost it. Needs $work
# (cert.pem, key.pem), $tree, $shim, $runs and the bench's say, progress, median and
# runs_text. tools/demo sources it too, for records_once: the checks come with it (a script
# that defines its own fail afterwards keeps its own).
. tools/lib/bench_checks.sh

# records_once MODE TRACE [SIZE COUNT]: one burst ($writes writes of 100 B unless given); MODE is none, syscalls, records, or dry (no shim,
# and write_burst makes and digests its data but writes none: what it costs apart from
# its writes). Prints
# "sender-cpu-ms receiver-cpu-ms" or, with TRACE=trace, "records wire-bytes": the server's
# socket reads under strace. Without read-ahead OpenSSL reads each record's 5-byte header
# with its own read(2), so those reads count the records, and all of them the bytes.
# A sender that fails, or a server that did not receive what it sent ("sent N sha256 H"
# against "received N sha256 H"), fails the step: run it as $(records_once ...) || exit 1.
records_once() {
	local mode=$1 trace=$2 size=${3:-100} count=${4:-$writes} vars=() port pid from received
	local dry=() step="record merging, $1, $count writes of ${3:-100} B${2/time/}"
	case $mode in
	none) ;;
	dry) dry=(--dry) ;;
	*) vars=(LD_PRELOAD="$shim" TLSTUNE_COALESCE="$mode") ;;
	esac
	local server=("$tree/examples/tls_server" --cert "$work/cert.pem" --key "$work/key.pem" --sink)
	if [ "$trace" = trace ]; then
		server=(strace -qq -yy -e trace=read -o "$work/records.strace" "${server[@]}")
	fi
	coproc server {
		TIMEFORMAT='%U %S'
		{ time "${server[@]}" >&3; } 3>&1 2>"$work/receiver.time"
	}
	pid=$server_PID
	# bash closes a coprocess's fds once it has ended: a copy of its output, kept until read.
	exec {from}<&"${server[0]}"
	read -r _ port <&"$from" || fail "$step" "tls_server did not start"
	local sender
	sender=$( { TIMEFORMAT='%U %S'; time env "${vars[@]}" "$tree/examples/write_burst" "$port" \
		--writes "$count" --size "$size" "${dry[@]}" >"$work/sender.out"; } 2>&1 | tail -1) ||
		{ kill "$pid" 2>/dev/null; fail "$step" "write_burst failed"; }
	read -r received <&"$from" || received="" # "received N sha256 H"
	exec {from}<&-
	wait "$pid" 2>/dev/null || true
	[ "$mode" = dry ] || [[ -n $received && $(cat "$work/sender.out") == *"sent ${received#received }"* ]] ||
		fail "$step" "the server received '${received:-nothing}', not what write_burst sent"
	if [ "$trace" = trace ]; then
		awk '/TCP/ && / = [0-9]+$/ { n = $NF + 0; bytes += n; if (n == 5) records++ }
		     END { if (!records) exit 1; printf "%d %d\n", records, bytes }' "$work/records.strace" ||
			fail "$step" "no record headers read in the server's trace"
		return
	fi
	local receiver
	receiver=$(tail -1 "$work/receiver.time")
	# shellcheck disable=SC2086 # user and system, two numbers each
	numbers "$step" $sender $receiver
	awk -v s="$sender" -v r="$(tail -1 "$work/receiver.time")" 'BEGIN {
		split(s, a, " "); split(r, b, " ")
		printf "%.0f %.0f\n", (a[1] + a[2]) * 1000, (b[1] + b[2]) * 1000 }'
}

record_rows() {
	say "## Record merging: $writes writes of 100 B, examples/write_burst to examples/tls_server, $(runs_text "$runs")"
	say ""
	say "| what | no shim | syscalls | records | no shim/records | syscalls/records |"
	say "|------|---------|----------|---------|-----------------|------------------|"
	local mode i m a b sender=() receiver=() wire=() bytes=() floor
	# The modes in turn within each run, the floor (dry: the sender without its writes)
	# among them, so that a slow spell of the machine hits all of them.
	: >"$work/records.runs"
	for ((i = 1; i <= runs; i++)); do
		for mode in none syscalls records dry; do
			progress "record merging: run $i of $runs, $mode"
			m=$(records_once "$mode" time) || exit 1
			echo "$mode $m" >>"$work/records.runs"
		done
	done
	# column MODE N: the median of column N of MODE's runs.
	column() { awk -v m="$1" -v n="$2" '$1 == m { print $n }' "$work/records.runs" | median; }
	for mode in none syscalls records; do
		sender+=("$(column "$mode" 2)")
		receiver+=("$(column "$mode" 3)")
		# Records and bytes are exact, not noisy: one run under strace (untimed) per mode.
		progress "record merging: $mode, records on the wire under strace"
		m=$(records_once "$mode" trace) || exit 1
		read -r a b <<<"$m"
		wire+=("$a")
		bytes+=("$b")
	done
	floor=$(column dry 2)
	printf '\r\033[K' >&2
	# A ratio divides by records' column: a difference of two runs can have measured none
	# there (a run's noise at most, under --quick, on a busy machine), which shows as "-".
	table_row() { # table_row NAME NONE SYSCALLS RECORDS
		say "$(awk -v n="$1" -v a="$2" -v b="$3" -v c="$4" 'BEGIN {
			printf "| %s | %s | %s | %s | %s | %s |", n, a, b, c,
				(c > 0 ? sprintf("%.1fx", a / c) : "-"), (c > 0 ? sprintf("%.1fx", b / c) : "-") }')"
	}
	row() { # row NAME NONE SYSCALLS RECORDS: measured, so never 0
		nonzero "record merging, $1" "$4"
		table_row "$@"
	}
	difference_row() { # difference_row NAME NONE SYSCALLS RECORDS: whole numbers, of either sign
		local value
		for value in "$2" "$3" "$4"; do
			[[ $value =~ ^-?[0-9]+$ ]] || fail "record merging, $1" "measured nothing: '$value' is not a number"
		done
		table_row "$@"
	}
	row "TLS records on the wire (the receiver's header reads)" "${wire[@]}"
	row "bytes on the wire (the receiver's socket reads)" "${bytes[@]}"
	row "sender CPU, ms (user + system, whole run)" "${sender[@]}"
	difference_row "sender CPU in its writes, ms (the row above less the same run writing nothing: $floor ms)" \
		$(printf '%s\n' "${sender[@]}" | awk -v f="$floor" '{ printf "%.0f ", $1 - f }')
	row "receiver CPU, ms (user + system, whole run, no shim)" "${receiver[@]}"
	# records.dat, for the chart: position, mode, records, bytes, sender CPU (whole run, and
	# in its writes) and receiver CPU, in ms.
	local names=("no shim" syscalls records)
	for i in 0 1 2; do
		echo "$((i + 1)) \"${names[i]}\" ${wire[i]} ${bytes[i]} ${sender[i]} $(awk -v s="${sender[i]}" -v f="$floor" 'BEGIN { printf "%.0f", s - f }') ${receiver[i]}"
	done >"$work/records.dat"
	say ""
	say "Goals (issue 14): at most 1/100 of the records, sender CPU 8x and receiver CPU 5x lower, about 20 % fewer bytes on the wire, against no shim. Whole runs include start-up, the handshake and the program making and digesting its data, the same in every column: so whole-run sender CPU can fall by no more than the whole run over that floor. Records and bytes come from one run under strace."
	say ""
}

# The threshold: from which write size holding plaintext stops paying. The same bytes
# ($writes x 320: 32 MB by default) in writes of each size; sender CPU in its writes
# (whole run less the run that writes nothing), syscall merging against record merging.
# Writes of 4 KiB and more are never held (kHeldWriteBelow): those rows show that nothing
# is lost.
record_size_rows() {
	say "## Record merging by write size: $((writes * 320)) bytes in writes of each size, sender CPU in its writes (ms), $(runs_text "$runs")"
	say ""
	say "| write size | writes | no shim | syscalls | records | syscalls/records |"
	say "|------------|--------|---------|----------|---------|------------------|"
	local size count mode i m
	for size in 256 1024 2048 3072 4096 16384 65536; do
		count=$((writes * 320 / size))
		local cpu=()
		# The modes in turn within each run, as in record_rows.
		: >"$work/records.runs"
		for ((i = 1; i <= runs; i++)); do
			for mode in dry none syscalls records; do
				progress "record merging by size: $size B, run $i of $runs, $mode"
				m=$(records_once "$mode" time "$size" "$count") || exit 1
				echo "$mode ${m%% *}" >>"$work/records.runs"
			done
		done
		for mode in dry none syscalls records; do
			cpu+=("$(awk -v m="$mode" '$1 == m { print $2 }' "$work/records.runs" | median)")
		done
		# The ratio divides by records' CPU in its writes: none measured (a run's noise at
		# most, under --quick) shows as "-", never as a ratio.
		say "$(awk -v s="$size" -v n="$count" -v d="${cpu[0]}" -v a="${cpu[1]}" -v b="${cpu[2]}" -v c="${cpu[3]}" 'BEGIN {
			a -= d; b -= d; c -= d
			printf "| %d | %d | %.0f | %.0f | %.0f | %s |", s, n, a, b, c, (c > 0 ? sprintf("%.2fx", b / c) : "-") }')"
	done
	printf '\r\033[K' >&2
	say ""
	say "Each cell is the median whole-run sender CPU less the median of the same run writing nothing (--dry); the server runs without the shim."
	say ""
}

# ping_once MODE: $pings request-response rounds of 100 B against tls_server --echo (no
# shim in the server); prints the client's wall time in ms.
ping_once() {
	local mode=$1 vars=() port pid start end out
	[ "$mode" != none ] && vars=(LD_PRELOAD="$shim" TLSTUNE_COALESCE="$mode")
	coproc pinger { "$tree/examples/tls_server" --cert "$work/cert.pem" --key "$work/key.pem" --echo; }
	pid=$pinger_PID
	read -r _ port <&"${pinger[0]}" || fail "record merging, pings, $mode" "tls_server did not start"
	start=$(date +%s%N)
	# shellcheck disable=SC2015 # the client failing or its output wrong: either fails the step
	out=$(env "${vars[@]}" "$tree/examples/write_burst" "$port" --ping "$pings" --size 100) &&
		[[ $out == "pings $pings ok" ]] ||
		{ kill "$pid" 2>/dev/null; fail "record merging, pings, $mode" "the ping loop failed: '$out'"; }
	end=$(date +%s%N)
	wait "$pid" 2>/dev/null || true
	echo $(((end - start) / 1000000))
}

# A request-response loop holds nothing: each write finds its connection quiet.
record_ping_rows() {
	say "## Record merging, a request-response loop: $pings pings of 100 B, client wall time (ms), $(runs_text "$runs")"
	say ""
	say "| no shim | syscalls | records | no shim/records |"
	say "|---------|----------|---------|-----------------|"
	local mode i m cells=()
	# The modes in turn within each run, as in record_rows.
	: >"$work/pings.runs"
	for ((i = 1; i <= runs; i++)); do
		for mode in none syscalls records; do
			progress "record merging: pings, run $i of $runs, $mode"
			m=$(ping_once "$mode") || exit 1
			echo "$mode $m" >>"$work/pings.runs"
		done
	done
	for mode in none syscalls records; do
		cells+=("$(awk -v m="$mode" '$1 == m { print $2 }' "$work/pings.runs" | median)")
	done
	printf '\r\033[K' >&2
	nonzero "record merging, pings" "${cells[@]}"
	say "$(awk -v a="${cells[0]}" -v b="${cells[1]}" -v c="${cells[2]}" 'BEGIN { printf "| %s | %s | %s | %.2fx |", a, b, c, a / c }')"
	say ""
}

# against_server STEP PATTERN SERVER-ARGS... -- [VAR=value...] -- ARGS...: starts
# tls_server with SERVER-ARGS (no shim), runs write_burst PORT ARGS with the variables and
# prints what it printed; a client that fails or prints no match of PATTERN fails STEP.
against_server() {
	local step=$1 pattern=$2 server=() vars=() port pid out
	shift 2
	while [ "$1" != -- ]; do server+=("$1"); shift; done
	shift
	while [ "$1" != -- ]; do vars+=("$1"); shift; done
	shift
	coproc peer { "$tree/examples/tls_server" --cert "$work/cert.pem" --key "$work/key.pem" "${server[@]}"; }
	pid=$peer_PID
	read -r _ port <&"${peer[0]}" || fail "$step" "tls_server did not start"
	# shellcheck disable=SC2015 # as in ping_once
	out=$(env "${vars[@]}" "$tree/examples/write_burst" "$port" "$@") && [[ $out =~ $pattern ]] ||
		{ kill "$pid" 2>/dev/null; fail "$step" "write_burst failed or printed '$out'"; }
	wait "$pid" 2>/dev/null || true
	echo "$out"
}

# request_cpu MODE: $pings rounds of a 100 B header and a 500 B body, each in its own
# SSL_write, then the echo read back; prints the client's CPU in microseconds.
request_cpu() {
	local mode=$1 vars=() out pattern="pings $pings ok.*cpu microseconds ([0-9]+)$"
	[ "$mode" != none ] && vars=(LD_PRELOAD="$shim" TLSTUNE_COALESCE="$mode")
	out=$(against_server "record merging, requests, $mode" "$pattern" --echo -- "${vars[@]}" -- \
		--ping "$pings" --size 500 --header 100 --cpu) || exit 1
	[[ $out =~ $pattern ]] && echo "${BASH_REMATCH[1]}"
}

# Issue 22: a header, a body, then a read must not cost more than without the shim.
record_request_rows() {
	say "## Record merging, requests of a header and a body: $pings rounds (100 B + 500 B, then the answer), client CPU in ms, $(runs_text "$runs")"
	say ""
	say "| no shim | records | records/no shim (lowest to highest of the runs) |"
	say "|---------|---------|--------------------------------------------------|"
	local i a b
	: >"$work/request.a"
	: >"$work/request.b"
	: >"$work/request.r"
	for ((i = 1; i <= runs; i++)); do
		progress "record merging: requests, run $i of $runs"
		a=$(request_cpu none) || exit 1
		b=$(request_cpu records) || exit 1
		nonzero "record merging, requests, run $i" "$a" "$b"
		echo "$a" >>"$work/request.a"
		echo "$b" >>"$work/request.b"
		awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f\n", b / a }' >>"$work/request.r"
	done
	printf '\r\033[K' >&2
	local ma mb mr lo hi
	read -r ma _ <<<"$(spread <"$work/request.a")"
	read -r mb _ <<<"$(spread <"$work/request.b")"
	read -r mr lo hi <<<"$(spread <"$work/request.r")"
	say "$(awk -v a="$ma" -v b="$mb" -v r="$mr" -v l="$lo" -v h="$hi" 'BEGIN { printf "| %.0f | %.0f | %sx (%s to %s) |", a / 1000, b / 1000, r, l, h }')"
	say ""
	say "The first two writes after a wait go out as they are (kDirectWritesAfterWait): the body is not held, and wakes no thread."
	say ""
}

# latency_once WRITES SIZE [PRELOAD] [ARGS...]: 200 requests of WRITES writes of SIZE bytes,
# each followed by a sleep the shim cannot see (write_burst --latency); prints "p50 p99" in
# microseconds, from a request's last SSL_write to the server having it whole.
latency_once() {
	local writes=$1 size=$2 preload=$3 out pattern="latency microseconds p50 (-?[0-9]+) p99 (-?[0-9]+)"
	shift 3
	out=$(against_server "write latency, $writes writes of $size B${preload:+, with the shim}" "$pattern" \
		--stamps $((writes * size)) --requests 200 -- ${preload:+LD_PRELOAD="$preload"} -- \
		--latency 200 --writes "$writes" --size "$size" "$@") || exit 1
	[[ $out =~ $pattern ]] && echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
}

# Issue 22: how long a request waits in the shim when the program then sleeps. Two writes
# go out at once (the first after a pause); a longer burst waits for the flusher, at most
# the delay (TLSTUNE_COALESCE_DELAY, 200 us by default) and its wake-up.
record_latency_rows() {
	say "## Write latency: 200 requests, each then a 2 ms sleep the shim cannot see, from the last SSL_write to the server having the request whole, in microseconds, $(runs_text "$runs")"
	say ""
	say "| requests of | p50 without | p50 with | p99 without | p99 with |"
	say "|-------------|-------------|----------|-------------|----------|"
	local row writes size args i a b
	for row in "2 300 --nodelay" "2 300" "10 60 --nodelay" "10 60"; do
		read -r writes size args <<<"$row"
		: >"$work/latency.a"
		: >"$work/latency.b"
		for ((i = 1; i <= runs; i++)); do
			progress "write latency: $writes writes of $size B ${args:-(Nagle)}, run $i of $runs"
			# shellcheck disable=SC2086 # args is one option or none
			a=$(latency_once "$writes" "$size" "" $args) || exit 1
			# shellcheck disable=SC2086
			b=$(latency_once "$writes" "$size" "$shim" $args) || exit 1
			echo "$a" >>"$work/latency.a"
			echo "$b" >>"$work/latency.b"
		done
		local p50a p50b p99a p99b
		p50a=$(awk '{ print $1 }' "$work/latency.a" | median)
		p50b=$(awk '{ print $1 }' "$work/latency.b" | median)
		p99a=$(awk '{ print $2 }' "$work/latency.a" | median)
		p99b=$(awk '{ print $2 }' "$work/latency.b" | median)
		say "| $writes writes of $size B, $([ -n "$args" ] && echo TCP_NODELAY || echo Nagle) | $p50a | $p50b | $p99a | $p99b |"
	done
	printf '\r\033[K' >&2
	say ""
	say "The clocks are the same monotonic clock in both processes; a request can reach the server before its last SSL_write returns, so a few microseconds below zero is \"at once\". The first two writes after a wait, or after a pause of the delay, go out as they are; a longer burst waits for the shim's thread, which sends it within the delay."
	say ""
}
