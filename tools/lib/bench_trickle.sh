# The trickle rows of tools/tlstune-bench (sourced): relays and a server whose writes come
# further apart than the coalescing delay, so coalescing merges nothing and must cost
# nothing. 20 TLS clients each get 1000 B every 8 ms for $trickle_seconds s, through socat
# (fork mode), stunnel, or from python's threading server. Needs $work (cert.pem, key.pem),
# $shim, $runs and the bench's say, progress, median, spread and runs_text.

trickle_clients=20 trickle_seconds=2

# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_listening PORT: until something listens there (bounded: 10 s); else fails, quietly:
# the caller's one line names what did not start.
wait_listening() {
	for _ in $(seq 100); do
		[ -n "$(ss -Hltn "sport = :$1")" ] && return 0
		sleep 0.1
	done
	return 1
}

# trickle_once socat|stunnel|python [PRELOAD]: sets measured to "cpu-ms bytes" for one run,
# the CPU of the relay or server (with its children) while the clients read everything. In
# the bench's own shell: a failure stops what it started, then the bench.
trickle_once() {
	local what=$1 preload=${2:-} port backend pid="" backend_pid="" bytes cpu
	local step="trickle row, $what ${2:+with}${2:-without} the shim"
	# trickle_stop [MESSAGE]: ends this run's processes, then the bench, saying MESSAGE (none:
	# the failed step has said why).
	trickle_stop() {
		# shellcheck disable=SC2086 # the pids, one word each, or none
		kill $pid $backend_pid 2>/dev/null || true
		[ -n "${1:-}" ] && fail "$step" "$1"
		exit 1
	}
	port=$(free_port)
	if [ "$what" != python ]; then
		backend=$(free_port)
		python3 tools/lib/trickle.py backend "$backend" "$trickle_seconds" >/dev/null &
		backend_pid=$!
		wait_listening "$backend" || trickle_stop "the backend did not start"
	fi
	# Each under cpu_of.py, which writes its CPU in ns-exact ms once it has ended.
	rm -f "$work/trickle.cpu"
	local measure=(python3 tools/lib/cpu_of.py "$work/trickle.cpu" env ${preload:+LD_PRELOAD="$preload"})
	case "$what" in
	socat)
		"${measure[@]}" socat \
			"OPENSSL-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr,cert=$work/cert.pem,key=$work/key.pem,verify=0" \
			"TCP:127.0.0.1:$backend" >/dev/null &
		;;
	stunnel)
		printf 'foreground = yes\npid =\n[trickle]\naccept = 127.0.0.1:%s\nconnect = 127.0.0.1:%s\ncert = %s\nkey = %s\n' \
			"$port" "$backend" "$work/cert.pem" "$work/key.pem" >"$work/stunnel.conf"
		"${measure[@]}" stunnel4 "$work/stunnel.conf" >/dev/null 2>&1 &
		;;
	python)
		"${measure[@]}" python3 tools/lib/trickle.py tls-server "$port" \
			"$trickle_seconds" "$work/cert.pem" "$work/key.pem" >/dev/null &
		;;
	esac
	pid=$!
	wait_listening "$port" || trickle_stop "$what did not start"
	bytes=$(python3 tools/lib/trickle.py clients "$port" "$trickle_clients" | cut -d' ' -f2) ||
		trickle_stop "the clients failed"
	[[ $bytes =~ ^[1-9][0-9]*$ ]] || trickle_stop "the clients received '$bytes' bytes"
	# socat reaps each child as it ends: its CPU is in the parent's by now.
	kill "$pid" $backend_pid 2>/dev/null || true
	wait "$pid" $backend_pid 2>/dev/null || true
	read -r cpu 2>/dev/null <"$work/trickle.cpu" && [[ $cpu =~ ^[0-9.]+$ ]] ||
		trickle_stop "no CPU measured for $what (tools/lib/cpu_of.py)"
	measured="$cpu $bytes"
}

trickle_row() { # trickle_row NAME WHAT
	local name=$1 what=$2 a=() b=() r=() ba="" bb="" ms
	for ((i = 1; i <= runs; i++)); do
		progress "trickle: $name, run $i of $runs"
		trickle_once "$what"
		read -r ms ba <<<"$measured"
		a+=("$ms")
		trickle_once "$what" "$shim"
		read -r ms bb <<<"$measured"
		b+=("$ms")
		r+=("$(awk -v a="${a[-1]}" -v b="$ms" 'BEGIN { if (a > 0) printf "%.3f", b / a }')")
	done
	local ma mb mr lo hi ratio="-"
	ma=$(printf '%s\n' "${a[@]}" | median)
	mb=$(printf '%s\n' "${b[@]}" | median)
	numbers "trickle row, $name" "$ma" "$mb"
	if ! printf '%s\n' "${r[@]}" | grep -qx ''; then
		read -r mr lo hi <<<"$(printf '%s\n' "${r[@]}" | spread)"
		ratio="${mr}x ($lo to $hi)"
	fi
	say "$(awk -v n="$name" -v a="$ma" -v b="$mb" -v ratio="$ratio" -v ba="$ba" -v bb="$bb" \
		'BEGIN { printf "| %s | %.0f | %.0f | %s | %s | %s |", n, a, b, ratio, ba, bb }')"
}

trickle_rows() {
	say "## Trickle: $trickle_clients TLS clients each get 1000 B every 8 ms for $trickle_seconds s; CPU of the relay or server in ms, $(runs_text "$runs")"
	say ""
	say "| what | without: ms | with: ms | with/without (lowest to highest of the runs) | bytes received without | with |"
	say "|------|-------------|----------|-----------------------------------------------|------------------------|------|"
	trickle_row "socat, fork mode, relaying a plain backend" socat
	trickle_row "stunnel relaying a plain backend" stunnel
	trickle_row "python's threading server" python
	printf '\r\033[K' >&2
	say ""
	say "Each write comes 8 ms after the last, far beyond the coalescing delay, so there is nothing to merge: each goes out in the program's own call, and the shim's threads sleep. The shim runs in the relay or server only. The CPU is the whole process's from start to end, its threads' and its reaped children's (socat's), as the kernel counts it in ns (wait4, tools/lib/cpu_of.py), not in ticks of 10 ms."
	say ""
}
