# A local nginx for tools/demo and tools/tlstune-bench. Sourced, not run.
# Needs: $work (a private directory holding cert.pem, key.pem and the files to serve).

nginx_pid=""

# start_nginx TLS: serves $work over TLS 1.2 (the seed's cipher) or 1.3 on a free port of
# 127.0.0.1; sets port and nginx_pid. Set before the call: nginx_env (VAR=value words for
# nginx's environment, e.g. LD_PRELOAD), nginx_server (more lines for the server block),
# nginx_connections (worker_connections, default 1024).
start_nginx() {
	local protocols="ssl_protocols TLSv1.3;"
	[ "$1" = 1.2 ] && protocols="ssl_protocols TLSv1.2; ssl_ciphers ECDHE-RSA-AES256-GCM-SHA384;"
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	cat >"$work/nginx.conf" <<CONF
daemon off; master_process on; worker_processes 1; user root;
error_log stderr notice; pid $work/nginx.pid;
worker_rlimit_nofile $((${nginx_connections:-1024} + 512));
events { worker_connections ${nginx_connections:-1024}; }
http {
  access_log off; sendfile on; tcp_nodelay on; keepalive_timeout 600s; keepalive_requests 100000;
  client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fcgi;
  uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
  server {
    listen 127.0.0.1:$port ssl; $protocols
    ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem; root $work;
    ${nginx_server:-}
  }
}
CONF
	# The log exists before tail looks for it: the background job may open it later.
	: >"$work/nginx.log"
	# shellcheck disable=SC2086
	env ${nginx_env:-} nginx -p "$work" -c "$work/nginx.conf" -e stderr 2>>"$work/nginx.log" &
	nginx_pid=$!
	# "start worker processes" comes first, before the fork: wait for the line with the pid.
	timeout 30 grep -q -m1 -E "start worker process [0-9]+" <(tail -f "$work/nginx.log")
}

# nginx_worker: the pid of the worker (worker_processes 1), whose CPU a row reads. From the
# log line start_nginx waited for: the master writes it as it forks, so the worker may not
# be among its children yet (the children file was then empty and cpu_ms read /proc/stat).
# start_nginx once waited for the line before it, "start worker processes", and the pid
# was then missing when the machine was busy.
nginx_worker() {
	sed -n 's/.*start worker process \([0-9][0-9]*\).*/\1/p' "$work/nginx.log" | tail -1
}

# cpu_ms PID: the CPU time (user + system) PID has used, in ms.
cpu_ms() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) * 1000 / hz }' "/proc/$1/stat"
}

stop_nginx() {
	if [ -n "$nginx_pid" ]; then
		kill "$nginx_pid" 2>/dev/null || true
		wait "$nginx_pid" 2>/dev/null || true
		nginx_pid=""
	fi
}

# make_certificate: a self-signed certificate for 127.0.0.1 in $work.
make_certificate() {
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
		-days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 2>/dev/null
}
