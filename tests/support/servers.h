#pragma once
/* Real servers from Debian packages, started and stopped by the test that needs them. */

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace testsupport {

/*
 * A long-running program (socat, stunnel, nginx) that logs a line containing `ready` once it
 * listens; killed by its pid at the end of the test.
 */
class Daemon {
public:
	Daemon(const Command &command, const std::string &ready);
	~Daemon();
	Process &process() { return *process_; }
	/* Stops it (SIGTERM) and returns what it logged since it became ready. */
	std::string stop();
	/*
	 * Reads the log as it comes, from now on (process() is then not to be read): a daemon
	 * whose log pipe fills up blocks in write(2). nginx with a thousand clients did, and
	 * stopped accepting.
	 */
	void drainLog();

private:
	std::unique_ptr<Process> process_;
	std::thread drain_;
	std::string log_;
};

/* A web server the test started on a free port of 127.0.0.1, serving HTTPS. */
class HttpsServer {
public:
	/* Stops it (SIGTERM) and returns what it logged since it started. */
	std::string stop() { return daemon_->stop(); }
	std::string url(const std::string &path) const;

protected:
	HttpsServer();
	TempDir dir_;
	int port_ = 0;
	std::unique_ptr<Daemon> daemon_;
};

/*
 * nginx serving root over HTTPS on 127.0.0.1 with the test certificate; a PUT to
 * /uploads/NAME stores the body in root/uploads/NAME.
 */
class Nginx : public HttpsServer {
public:
	/*
	 * tls: "1.2" (the seed's ECDHE-RSA-AES256-GCM-SHA384) or "1.3". server: more lines for
	 * the server block (locations); connections: worker_connections.
	 */
	Nginx(const std::string &root, const std::string &tls, const std::vector<std::string> &env = {},
	      const std::string &server = "", int connections = 64);
	int port() const { return port_; }
	/* The worker's pid (worker_processes 1): the process whose CPU a test reads. */
	pid_t worker() const;
};

/*
 * lighttpd 1.4 (mod_openssl) serving root over HTTPS (TLS 1.3) on 127.0.0.1 with the test
 * certificate, in the foreground. It corks each response (TCP_CORK) and writes it in
 * records of 16 KiB.
 */
class Lighttpd : public HttpsServer {
public:
	Lighttpd(const std::string &root, const std::vector<std::string> &env = {});
};

} /* namespace testsupport */
