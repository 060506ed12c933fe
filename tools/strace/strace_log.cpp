#include "strace_log.h"

#include <cctype>
#include <cstdlib>

namespace tlstune {

namespace {

const char *const kReads[] = { "read", "recv", "recvfrom", "recvmsg", "readv", "pread64", "preadv2" };
const char *const kWrites[] = { "write", "send", "sendto", "sendmsg", "writev", "pwrite64" };
/* Calls whose third argument is the length. */
const char *const kSized[] = { "read", "recv", "recvfrom", "write", "send", "sendto" };

template <size_t N>
bool among(const std::string &name, const char *const (&names)[N])
{
	for (const char *candidate : names) {
		if (name == candidate)
			return true;
	}
	return false;
}

/* "name(fd<target>, ..." with the leading "pid " already removed. */
bool parseCall(const std::string &text, Syscall *call)
{
	std::string::size_type at = 0;
	while (at < text.size() && (std::islower(static_cast<unsigned char>(text[at])) ||
				    std::isdigit(static_cast<unsigned char>(text[at])) || text[at] == '_'))
		at++;
	if (at == 0 || at >= text.size() || text[at] != '(')
		return false;
	call->name = text.substr(0, at++);

	const std::string::size_type digits = at;
	while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])))
		at++;
	if (at == digits)
		return false;
	call->fd = std::atoi(text.c_str() + digits);

	/* -yy: "<TCP:[127.0.0.1:1->127.0.0.1:2]>", which may itself hold "->". */
	if (at < text.size() && text[at] == '<') {
		const std::string::size_type end = text.find(">, ", at);
		if (end == std::string::npos)
			return false;
		call->target = text.substr(at + 1, end - at - 1);
		at = end + 1;
	}
	if (text.compare(at, 2, ", ") != 0)
		return false;
	at += 2;

	/*
	 * The result: the last ") = N" on the line (a buffer could contain the text). A
	 * resumed call's is padded to strace's column: "<... read resumed>..., 5)       = 5".
	 */
	const std::string::size_type equals = text.rfind(" = ");
	const std::string::size_type close = equals == std::string::npos ? equals : text.find_last_not_of(' ', equals);
	if (close == std::string::npos || text[close] != ')')
		return false;
	call->result = std::strtoll(text.c_str() + equals + 3, nullptr, 10);

	if (among(call->name, kSized)) {
		/*
		 * Third argument, after the buffer: a string ("" with -s 0, perhaps followed by
		 * ...) when the call moved data, an address when it failed.
		 */
		if (at < text.size() && text[at] == '"')
			at = text.find('"', at + 1);
		std::string::size_type comma = text.find(", ", at);
		if (comma != std::string::npos)
			call->requested = std::strtoll(text.c_str() + comma + 2, nullptr, 10);
	}
	return true;
}

} /* namespace */

bool Syscall::isRead() const
{
	return among(name, kReads);
}

bool Syscall::isWrite() const
{
	return among(name, kWrites);
}

std::vector<Syscall> parseStraceLog(std::istream &log)
{
	std::vector<Syscall> calls;
	std::map<int, std::string> unfinished;
	std::string line;
	while (std::getline(log, line)) {
		/* With -f every line starts with the pid; without it there is none. */
		int pid = 0;
		std::string::size_type start = 0;
		if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) {
			pid = std::atoi(line.c_str());
			start = line.find(' ');
			if (start == std::string::npos)
				continue;
			start = line.find_first_not_of(' ', start);
			if (start == std::string::npos)
				continue;
		}
		std::string text = line.substr(start);

		const std::string cut = " <unfinished ...>";
		if (text.size() >= cut.size() && text.compare(text.size() - cut.size(), cut.size(), cut) == 0) {
			unfinished[pid] = text.substr(0, text.size() - cut.size());
			continue;
		}
		if (text.rfind("<... ", 0) == 0) {
			std::string::size_type resumed = text.find(" resumed>");
			auto it = unfinished.find(pid);
			if (resumed == std::string::npos || it == unfinished.end())
				continue;
			text = it->second + text.substr(resumed + 9);
			unfinished.erase(it);
		}

		Syscall call;
		call.pid = pid;
		if (parseCall(text, &call))
			calls.push_back(call);
	}
	return calls;
}

double SocketTraffic::readsPerMiB() const
{
	return readBytes ? static_cast<double>(reads) * 1048576.0 / static_cast<double>(readBytes) : 0.0;
}

namespace {

void add(SocketTraffic &traffic, const Syscall &call)
{
	if (call.isRead()) {
		traffic.reads++;
		if (call.requested == 5)
			traffic.headerReads++;
		if (call.result > 0) {
			traffic.readBytes += static_cast<uint64_t>(call.result);
			traffic.readSizes[call.result]++;
		}
	} else if (call.isWrite()) {
		traffic.writes++;
		if (call.result > 0) {
			traffic.writeBytes += static_cast<uint64_t>(call.result);
			traffic.writeSizes[call.result]++;
		}
	}
}

bool isTcp(const std::string &target)
{
	return target.rfind("TCP:", 0) == 0 || target.rfind("TCPv6:", 0) == 0;
}

} /* namespace */

std::map<std::string, SocketTraffic> tcpTraffic(const std::vector<Syscall> &calls)
{
	std::map<std::string, SocketTraffic> sockets;
	for (const Syscall &call : calls) {
		if (!isTcp(call.target))
			continue;
		SocketTraffic &traffic = sockets[call.target];
		traffic.target = call.target;
		add(traffic, call);
	}
	return sockets;
}

SocketTraffic trafficOnPort(const std::vector<Syscall> &calls, int port)
{
	/* "TCP:[127.0.0.1:41442->127.0.0.1:18443]": either end may be the port. */
	const std::string remote = ":" + std::to_string(port) + "]";
	const std::string local = ":" + std::to_string(port) + "->";
	SocketTraffic total;
	for (const Syscall &call : calls) {
		if (!isTcp(call.target))
			continue;
		if (call.target.find(remote) == std::string::npos &&
		    call.target.find(local) == std::string::npos)
			continue;
		total.target = call.target;
		add(total, call);
	}
	return total;
}

} /* namespace tlstune */
