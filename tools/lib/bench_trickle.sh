# The trickle rows of tools/tlstune-bench (sourced): relays and a server whose writes come
# further apart than the coalescing delay, so coalescing merges nothing and must cost
# nothing. 20 TLS clients each get 1000 B every 8 ms for $trickle_seconds s, through socat
# (fork mode), stunnel, or from python's threading server. Needs $work (cert.pem, key.pem),
# $shim, $runs and the bench's say, progress, median and runs_text.

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
	case "$what" in
	socat)
		env ${preload:+LD_PRELOAD="$preload"} socat \
			"OPENSSL-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr,cert=$work/cert.pem,key=$work/key.pem,verify=0" \
			"TCP:127.0.0.1:$backend" >/dev/null &
		;;
	stunnel)
		printf 'foreground = yes\npid =\n[trickle]\naccept = 127.0.0.1:%s\nconnect = 127.0.0.1:%s\ncert = %s\nkey = %s\n' \
			"$port" "$backend" "$work/cert.pem" "$work/key.pem" >"$work/stunnel.conf"
		env ${preload:+LD_PRELOAD="$preload"} stunnel4 "$work/stunnel.conf" >/dev/null 2>&1 &
		;;
	python)
		env ${preload:+LD_PRELOAD="$preload"} python3 tools/lib/trickle.py tls-server "$port" \
			"$trickle_seconds" "$work/cert.pem" "$work/key.pem" >/dev/null &
		;;
	esac
	pid=$!
	wait_listening "$port" || trickle_stop "$what did not start"
	bytes=$(python3 tools/lib/trickle.py clients "$port" "$trickle_clients" | cut -d' ' -f2) ||
		trickle_stop "the clients failed"
	[[ $bytes =~ ^[1-9][0-9]*$ ]] || trickle_stop "the clients received '$bytes' bytes"
	# socat reaps each child as it ends: its CPU is in the parent's by now.
	cpu=$(cpu_ms "$pid" "$step" children) || trickle_stop
	kill "$pid" $backend_pid 2>/dev/null || true
	wait "$pid" $backend_pid 2>/dev/null || true
	measured="$cpu $bytes"
}

trickle_row() { # trickle_row NAME WHAT
	local name=$1 what=$2 a=() b=() ba="" bb="" ms
	for ((i = 1; i <= runs; i++)); do
		progress "trickle: $name, run $i of $runs"
		trickle_once "$what"
		read -r ms ba <<<"$measured"
		a+=("$ms")
		trickle_once "$what" "$shim"
		read -r ms bb <<<"$measured"
		b+=("$ms")
	done
	local ma mb
	ma=$(printf '%s\n' "${a[@]}" | median)
	mb=$(printf '%s\n' "${b[@]}" | median)
	numbers "trickle row, $name" "$ma" "$mb"
	say "$(awk -v n="$name" -v a="$ma" -v b="$mb" -v ba="$ba" -v bb="$bb" \
		'BEGIN { printf "| %s | %.0f | %.0f | %s | %s | %s |", n, a, b, (a > 0 ? sprintf("%.2fx", b / a) : "-"), ba, bb }')"
}

trickle_rows() {
	say "## Trickle: $trickle_clients TLS clients each get 1000 B every 8 ms for $trickle_seconds s; CPU of the relay or server in ms, $(runs_text "$runs")"
	say ""
	say "| what | without: ms | with: ms | with/without | bytes received without | with |"
	say "|------|-------------|----------|--------------|------------------------|------|"
	trickle_row "socat, fork mode, relaying a plain backend" socat
	trickle_row "stunnel relaying a plain backend" stunnel
	trickle_row "python's threading server" python
	printf '\r\033[K' >&2
	say ""
	say "Each write comes 8 ms after the last, far beyond the coalescing delay, so there is nothing to merge: each goes out in the program's own call, and the shim's threads sleep. The shim runs in the relay or server only. socat's CPU includes its children's."
	say ""
}
