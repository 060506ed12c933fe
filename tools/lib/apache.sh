# apache 2.4 (event MPM, mod_ssl) for tools/tlstune-bench's cost rows. Sourced, not run.
# Needs: $work (holding cert.pem and key.pem), the bench's fail, and free_port and
# wait_listening (tools/lib/bench_trickle.sh).

# apache_syscalls PRELOAD REQUESTS: the syscalls apache makes (strace -f -c, one process
# started with -X) while 50 keep-alive clients make REQUESTS requests of a 100-byte file
# over TLS 1.3 (h2load --h1). mod_ssl reads through a BIO of its own, 8,000 bytes at a time
# whatever OpenSSL asks: the case read-ahead must leave alone.
apache_syscalls() {
	local preload=$1 requests=$2 dir=$work/apache port tracer out
	# apache serves as www-data: its root must be one that user can reach.
	chmod 711 "$work"
	mkdir -p "$dir/run"
	chmod 755 "$dir"
	[ -f "$dir/hundred" ] || head -c 100 /dev/urandom >"$dir/hundred"
	chmod 644 "$dir/hundred"
	port=$(free_port)
	cat >"$dir/apache.conf" <<CONF
ServerRoot $dir
PidFile $dir/apache.pid
ErrorLog $dir/error.log
Mutex file:$dir
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule ssl_module /usr/lib/apache2/modules/mod_ssl.so
User www-data
Group www-data
ServerName 127.0.0.1
Listen 127.0.0.1:$port
ThreadsPerChild 64
MaxRequestWorkers 64
KeepAlive On
MaxKeepAliveRequests 0
DocumentRoot $dir
<Directory $dir>
  Require all granted
</Directory>
SSLEngine on
SSLCertificateFile $work/cert.pem
SSLCertificateKeyFile $work/key.pem
SSLProtocol TLSv1.3
CONF
	rm -f "$dir/apache.pid"
	env APACHE_RUN_DIR="$dir/run" ${preload:+LD_PRELOAD=$preload} \
		strace -f -c -o "$dir/strace.out" apache2 -X -f "$dir/apache.conf" &
	tracer=$!
	wait_listening "$port" || fail "cost row, apache" "apache did not start: $(tail -1 "$dir/error.log" 2>/dev/null)"
	out=$(h2load --h1 -n "$requests" -c 50 "https://127.0.0.1:$port/hundred" 2>&1) || true
	[ -s "$dir/apache.pid" ] && kill "$(cat "$dir/apache.pid")"
	wait "$tracer" || true
	[[ $out =~ ([0-9]+)\ succeeded ]] && [ "${BASH_REMATCH[1]}" = "$requests" ] ||
		fail "cost row, apache" "h2load: $(grep -E '^requests:' <<<"$out" || tail -1 <<<"$out"); apache: $(tail -1 "$dir/error.log" 2>/dev/null)"
	awk '$NF == "total" { print $4 }' "$dir/strace.out"
}
