#include "servers.h"

#include <cstdlib>
#include <signal.h>
#include <stdexcept>

#include "tls_fixture.h"

namespace testsupport {

HttpsServer::HttpsServer() : port_(freePort()) {}

std::string HttpsServer::url(const std::string &path) const
{
	return "https://127.0.0.1:" + std::to_string(port_) + path;
}

Nginx::Nginx(const std::string &root, const std::string &tls, const std::vector<std::string> &env,
	     const std::string &server, int connections)
{
	const std::string d = dir_.path();
	const std::string protocols = tls == "1.2"
		? "ssl_protocols TLSv1.2; ssl_ciphers ECDHE-RSA-AES256-GCM-SHA384;"
		: "ssl_protocols TLSv1.3;";
	writeFile(dir_.file("nginx.conf"),
		  "daemon off; master_process on; worker_processes 1; user root;\n"
		  "error_log stderr notice; pid " + d + "/nginx.pid;\n"
		  "worker_rlimit_nofile " + std::to_string(connections * 2 + 64) + ";\n"
		  "events { worker_connections " + std::to_string(connections) + "; }\n"
		  "http {\n"
		  "  access_log off; sendfile on; tcp_nodelay on;\n"
		  /* Longer than any test: a client stalled on a keep-alive connection fails by its
		   * own --max-time instead of being rescued when nginx closes the idle connection. */
		  "  keepalive_timeout 600s; keepalive_requests 10000;\n"
		  "  client_body_temp_path " + d + "/body; proxy_temp_path " + d + "/proxy;\n"
		  "  fastcgi_temp_path " + d + "/fastcgi; uwsgi_temp_path " + d + "/uwsgi;\n"
		  "  scgi_temp_path " + d + "/scgi;\n"
		  "  server {\n"
		  "    listen 127.0.0.1:" + std::to_string(port_) + " ssl;\n"
		  "    ssl_certificate " + certificate().cert + ";\n"
		  "    ssl_certificate_key " + certificate().key + ";\n"
		  "    " + protocols + "\n"
		  "    root " + root + ";\n"
		  /* PUT /uploads/NAME stores the body as root/uploads/NAME. */
		  "    location /uploads/ { dav_methods PUT; create_full_put_path on; client_max_body_size 0; }\n"
		  "    " + server + "\n"
		  "  }\n"
		  "}\n");

	Command command;
	command.argv = { "nginx", "-p", d, "-c", dir_.file("nginx.conf"), "-e", "stderr" };
	command.env = env;
	daemon_.reset(new Daemon(command, "start worker process"));
	daemon_->drainLog();
}

pid_t Nginx::worker() const
{
	const pid_t master = daemon_->process().pid();
	const std::string children = readFile("/proc/" + std::to_string(master) + "/task/" +
					      std::to_string(master) + "/children");
	return static_cast<pid_t>(std::atoi(children.c_str()));
}

Lighttpd::Lighttpd(const std::string &root, const std::vector<std::string> &env)
{
	/* One PEM file with the certificate and its key, as lighttpd takes them. */
	writeFile(dir_.file("both.pem"), readFile(certificate().cert) + readFile(certificate().key));
	writeFile(dir_.file("lighttpd.conf"),
		  "server.document-root = \"" + root + "\"\n"
		  "server.bind = \"127.0.0.1\"\n"
		  "server.port = " + std::to_string(port_) + "\n"
		  "server.max-keep-alive-requests = 1000\n" /* lighttpd 1.4.79 takes at most 65,535 */
		  "server.modules += (\"mod_openssl\")\n"
		  "ssl.engine = \"enable\"\n"
		  "ssl.pemfile = \"" + dir_.file("both.pem") + "\"\n"
		  "ssl.openssl.ssl-conf-cmd = (\"MinProtocol\" => \"TLSv1.3\")\n");
	Command command;
	command.argv = { "lighttpd", "-D", "-f", dir_.file("lighttpd.conf") };
	command.env = env;
	/* Its log goes to stderr without server.errorlog. */
	daemon_.reset(new Daemon(command, "server started"));
	daemon_->drainLog();
}

Daemon::Daemon(const Command &command, const std::string &ready)
{
	Command withLog = command;
	withLog.stderrToStdout = true;
	process_.reset(new Process(withLog));
	const std::string log = process_->readUntil(ready, 30000);
	if (log.find(ready) == std::string::npos)
		throw std::runtime_error(command.argv[0] + " did not start:\n" + log);
}

void Daemon::drainLog()
{
	/* Until the daemon's end (EOF), bounded by the longest test. */
	drain_ = std::thread([this] { log_ = process_->readAll(3600 * 1000); });
}

Daemon::~Daemon()
{
	stop();
}

std::string Daemon::stop()
{
	process_->kill(SIGTERM);
	if (drain_.joinable())
		drain_.join();
	else
		log_ += process_->readAll(30000);
	process_->wait(30000);
	return std::move(log_);
}

} /* namespace testsupport */
