# A local nginx for tools/demo and tools/tlstune-bench. Sourced, not run.
# Needs: $work (a private directory holding cert.pem, key.pem and the files to serve).

nginx_pid=""

# start_nginx TLS: serves $work over TLS 1.2 (the seed's cipher) or 1.3 on a free port of
# 127.0.0.1; sets port and nginx_pid. Set before the call: nginx_env (VAR=value words for
# nginx's environment, e.g. LD_PRELOAD), nginx_server (more lines for the server block),
# nginx_connections (worker_connections, default 1024), nginx_listen (more words for the
# listen line, e.g. http2).
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
    listen 127.0.0.1:$port ssl ${nginx_listen:-}; $protocols
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
	# Fails if nginx has not started its worker in 30 s: why is in the log's last line.
	# "start worker processes" comes first, before the fork: wait for the line with the pid.
	timeout 30 grep -q -m1 -E "start worker process [0-9]+" <(tail -f "$work/nginx.log")
}

# nginx_worker STEP: the pid of the worker (worker_processes 1), whose CPU STEP reads. From
# the log line start_nginx waited for: the master writes it as it forks, so the worker may
# not be among its children yet (the children file was then empty and cpu_ms read
# /proc/stat). start_nginx once waited for the line before it, "start worker processes",
# and the pid was then missing when the machine was busy. No such line: STEP fails, saying so.
nginx_worker() {
	local pid
	pid=$(sed -n 's/.*start worker process \([0-9][0-9]*\).*/\1/p' "$work/nginx.log" | tail -1)
	if [ -z "$pid" ]; then
		echo "${prog:-tlstune}: $1: no nginx worker pid in its log" >&2
		return 1
	fi
	echo "$pid"
}

# cpu_ms PID STEP [children]: the CPU time (user + system) PID has used, in ms; with
# "children", its reaped children's too. An empty PID, or one that is no live process (gone,
# or a zombie), has no CPU to read: STEP fails, saying so, and prints no number. A process
# alone is read from the scheduler's counts in ns, one per thread (/proc/PID/task/*/schedstat),
# where the kernel keeps them: /proc/PID/stat counts in ticks of 10 ms, 4 % of an nginx row
# of 260 ms, and that row read 1.08x where the same runs read in ns said 1.03x. The servers
# measured so keep their threads (the shim's among them) until they stop; a thread that
# ended between two readings would take its time out of the second.
cpu_ms() {
	local pid=$1 step=$2 stat
	if ! [[ $pid =~ ^[0-9]+$ ]]; then
		echo "${prog:-tlstune}: $step: no pid to read the CPU of" >&2
		return 1
	fi
	# The state follows the command's closing parenthesis: Z is a process that has ended.
	if ! stat=$(cat "/proc/$pid/stat" 2>/dev/null) || [[ ${stat##*) } == Z* ]]; then
		echo "${prog:-tlstune}: $step: process $pid has ended, no CPU to read" >&2
		return 1
	fi
	local ns
	if [ -z "${3:-}" ] && ns=$(cat "/proc/$pid"/task/*/schedstat 2>/dev/null) && [ -n "$ns" ]; then
		awk '{ ns += $1 } END { printf "%.3f\n", ns / 1e6 }' <<<"$ns"
		return 0
	fi
	awk -v hz="$(getconf CLK_TCK)" -v children="${3:+1}" '{ sub(/.*\) /, "")
		print ($12 + $13 + (children ? $14 + $15 : 0)) * 1000 / hz }' <<<"$stat"
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
