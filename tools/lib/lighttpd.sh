# lighttpd 1.4 (mod_openssl) for tools/tlstune-bench's full-record rows. Sourced, not run.
# Needs: $work (holding cert.pem and key.pem), the bench's fail, free_port and
# wait_listening (tools/lib/bench_trickle.sh) and cpu_ms (tools/lib/nginx.sh).
# lighttpd corks each response (TCP_CORK), writes it in records of 16 KiB and uncorks.

# lighttpd_load PRELOAD cpu|syscalls LOAD COUNT: lighttpd's CPU in ms (cpu), or the syscalls
# it makes (syscalls: under strace -f -c), while LOAD runs: "download" (curl fetches a
# 64 MiB file COUNT times, one connection each) or "requests" (h2load --h1: COUNT
# keep-alive requests of a 20,000-byte file, 50 clients). TLS 1.3.
lighttpd_load() {
	local preload=$1 metric=$2 load=$3 count=$4 dir=$work/lighttpd port pid tracer i before after out step="full-record row, lighttpd $3"
	mkdir -p "$dir"
	[ -f "$dir/large" ] || head -c $((64 << 20)) /dev/urandom >"$dir/large"
	[ -f "$dir/page" ] || head -c 20000 /dev/urandom >"$dir/page"
	[ -f "$dir/both.pem" ] || cat "$work/cert.pem" "$work/key.pem" >"$dir/both.pem"
	port=$(free_port)
	cat >"$dir/lighttpd.conf" <<CONF
server.document-root = "$dir"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$dir/error.log"
server.pid-file = "$dir/lighttpd.pid"
server.max-keep-alive-requests = 65535
server.modules += ("mod_openssl")
ssl.engine = "enable"
ssl.pemfile = "$dir/both.pem"
ssl.openssl.ssl-conf-cmd = ("MinProtocol" => "TLSv1.3")
CONF
	rm -f "$dir/strace.out" "$dir/lighttpd.pid"
	if [ "$metric" = syscalls ]; then
		env ${preload:+LD_PRELOAD=$preload} strace -f -c -o "$dir/strace.out" lighttpd -D -f "$dir/lighttpd.conf" &
	else
		env ${preload:+LD_PRELOAD=$preload} lighttpd -D -f "$dir/lighttpd.conf" &
	fi
	tracer=$!
	wait_listening "$port" && [ -s "$dir/lighttpd.pid" ] ||
		fail "$step" "lighttpd did not start: $(tail -1 "$dir/error.log" 2>/dev/null)"
	# lighttpd itself, also under strace (which ends with it).
	pid=$(cat "$dir/lighttpd.pid")
	[ "$metric" = cpu ] && { before=$(cpu_ms "$pid" "$step") || exit 1; }
	if [ "$load" = download ]; then
		for ((i = 0; i < count; i++)); do
			curl -s --fail --cacert "$work/cert.pem" -o /dev/null "https://127.0.0.1:$port/large" ||
				{ kill "$pid"; fail "$step" "curl failed"; }
		done
	else
		out=$(h2load --h1 -n "$count" -c 50 "https://127.0.0.1:$port/page" 2>&1) || true
		[[ $out =~ ([0-9]+)\ succeeded ]] && [ "${BASH_REMATCH[1]}" = "$count" ] ||
			{ kill "$pid"; fail "$step" "h2load: $(grep -E '^requests:' <<<"$out" || tail -1 <<<"$out")"; }
	fi
	[ "$metric" = cpu ] && { after=$(cpu_ms "$pid" "$step") || exit 1; }
	kill "$pid"
	wait "$tracer" 2>/dev/null || true
	if [ "$metric" = cpu ]; then
		awk -v a="$after" -v b="$before" 'BEGIN { printf "%.0f\n", a - b }'
	else
		awk '$NF == "total" { print $4 }' "$dir/strace.out"
	fi
}

# full_record_rows: lighttpd's CPU and syscalls, without and with the shim, interleaved
# $runs times (interleaved_row, tools/lib/bench_cost.sh).
full_record_rows() {
	# The CPU in ticks of 10 ms: loads of a second or so. Syscalls are counted exactly, and
	# strace slows what it traces: smaller loads.
	local downloads=20 requests=20000 traced_downloads=5 traced_requests=4000
	[ -n "${quick:-}" ] && downloads=2 requests=2000 traced_downloads=1 traced_requests=400
	say "## A server writing full records: lighttpd 1.4 (mod_openssl, one process) over TLS 1.3, $(runs_text "$runs")"
	say ""
	say "| what | without | with | with/without (lowest to highest of the runs) |"
	say "|------|---------|------|-----------------------------------------------|"
	interleaved_row "CPU in ms, $downloads downloads of 64 MiB (curl)" lighttpd_load cpu download "$downloads"
	interleaved_row "syscalls, $traced_downloads downloads of 64 MiB (strace -f -c)" lighttpd_load syscalls download "$traced_downloads"
	interleaved_row "CPU in ms, $requests keep-alive requests of a 20,000-byte file, 50 clients (h2load --h1)" lighttpd_load cpu requests "$requests"
	interleaved_row "syscalls, $traced_requests such requests (strace -f -c)" lighttpd_load syscalls requests "$traced_requests"
	say ""
	say "lighttpd corks each response (\`TCP_CORK\`), writes its header and the file's records of 16 KiB with \`SSL_write\`, and uncorks; the shim is preloaded into lighttpd only. CPU from /proc (10 ms ticks); the syscall rows count every call of the process, its start-up included."
	say ""
}
