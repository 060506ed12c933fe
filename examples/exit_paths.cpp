/*
 * Ten short SSL_writes, then the process leaves without closing its connection, in one
 * of the ways a program can. Without tlstune the kernel has every byte before the process
 * image goes; with it the shim must send what it holds first.
 * Usage: exit_paths PORT HOW, against tls_server --sink. HOW:
 *   exit     exit(0)
 *   _exit    _exit(0)
 *   _Exit    _Exit(0)
 *   quick_exit  quick_exit(0)
 *   exit_group  syscall(SYS_exit_group, 0), past glibc's _exit
 *   execl    execl("/bin/true", ...)
 *   execv    execv("/bin/true", ...)
 *   execvp   execvp("true", ...)
 *   abort    abort()
 *   assert   a failed assert(), whose abort glibc calls from inside itself
 *   atexit   an atexit handler registered before the first TLS call writes the lines
 *   vfork    a vfork child closes fds 3-63 and execs /bin/true; then the parent writes
 *            ten more lines and ends with close_notify
 * The server prints what it received.
 */

#include <cassert>
#include <cstdlib>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

SSL *g_ssl = nullptr;

void writeLines(int first)
{
	for (int i = first; i < first + 10; i++) {
		const std::string line = "line " + std::to_string(i) + "\n";
		if (SSL_write(g_ssl, line.data(), static_cast<int>(line.size())) <= 0)
			fail("SSL_write");
	}
}

void writeAtExit()
{
	writeLines(0);
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: exit_paths PORT exit|_exit|_Exit|quick_exit|exit_group|execl|execv|execvp|atexit|vfork");
	const std::string how = argv[2];
	if (how == "atexit")
		std::atexit(writeAtExit);

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	/*
	 * TLS 1.2: a TLS 1.3 server's session tickets would sit unread in the socket, and a
	 * process leaving with unread data resets the connection (RST), which can cost the
	 * server the lines it had not read yet, with or without tlstune.
	 */
	SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
	int fd = connectTo("127.0.0.1", argv[1]);
	g_ssl = SSL_new(ctx);
	SSL_set_fd(g_ssl, fd);
	if (SSL_connect(g_ssl) != 1)
		fail("SSL_connect");
	char *const trueArgv[] = { const_cast<char *>("true"), nullptr };

	if (how == "atexit")
		std::exit(0);
	if (how == "vfork") {
		writeLines(0);
		pid_t child = vfork();
		if (child == 0) {
			for (int other = 3; other < 64; other++)
				close(other);
			execv("/bin/true", trueArgv);
			_exit(127);
		}
		int status = 0;
		waitpid(child, &status, 0);
		writeLines(10);
		SSL_shutdown(g_ssl);
		SSL_free(g_ssl);
		close(fd);
		SSL_CTX_free(ctx);
		return 0;
	}
	writeLines(0);
	if (how == "exit")
		std::exit(0);
	if (how == "_exit")
		_exit(0);
	if (how == "_Exit")
		_Exit(0);
	if (how == "quick_exit")
		std::quick_exit(0);
	if (how == "exit_group")
		syscall(SYS_exit_group, 0);
	if (how == "abort")
		std::abort();
	if (how == "assert")
		assert(how == "not assert");
	if (how == "execl")
		execl("/bin/true", "true", static_cast<char *>(nullptr));
	if (how == "execv")
		execv("/bin/true", trueArgv);
	if (how == "execvp")
		execvp("true", trueArgv);
	fail("unknown way out, or the exec failed");
}
