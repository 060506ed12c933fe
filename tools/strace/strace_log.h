#pragma once
/*
 * Reads `strace -f -yy` output: which read and write syscalls touched which socket, with
 * what sizes. The tests and tlstune-check share it, so both judge a trace the same way.
 */

#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <vector>

namespace tlstune {

struct Syscall {
	int pid = 0;
	std::string name;
	int fd = -1;
	/* What -yy printed for the fd: "TCP:[127.0.0.1:40000->127.0.0.1:9443]", "/dev/null". */
	std::string target;
	/* The length asked for (read, recv, recvfrom, write, send, sendto); -1 otherwise. */
	long long requested = -1;
	/* The return value; -1 for an error. */
	long long result = -1;

	bool isRead() const;
	bool isWrite() const;
};

/* Every syscall line of the log, with "<unfinished ...>" halves joined. */
std::vector<Syscall> parseStraceLog(std::istream &log);

/* The syscalls one socket saw. */
struct SocketTraffic {
	std::string target;
	uint64_t reads = 0;        /* read-family syscalls, including EAGAIN */
	uint64_t readBytes = 0;
	uint64_t headerReads = 0;  /* reads asking for exactly a 5-byte record header */
	uint64_t writes = 0;
	uint64_t writeBytes = 0;
	std::map<long long, uint64_t> readSizes;  /* result -> count */
	std::map<long long, uint64_t> writeSizes;

	double readsPerMiB() const;
};

/* Per socket whose -yy target is a TCP socket (IPv4 or IPv6), keyed by target. */
std::map<std::string, SocketTraffic> tcpTraffic(const std::vector<Syscall> &calls);

/* The traffic of the TCP sockets connected to (or accepted on) port, summed. */
SocketTraffic trafficOnPort(const std::vector<Syscall> &calls, int port);

} /* namespace tlstune */
