#include <cerrno>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "example.h"

namespace example {

int connectTo(const std::string &host, const std::string &port, int receiveBuffer)
{
	struct addrinfo hints = {};
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	struct addrinfo *result = nullptr;
	if (getaddrinfo(host.c_str(), port.c_str(), &hints, &result) != 0)
		fail("cannot resolve the server address");

	int fd = -1;
	for (struct addrinfo *ai = result; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		if (receiveBuffer > 0)
			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receiveBuffer, sizeof(receiveBuffer));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(result);
	if (fd < 0)
		fail("cannot connect");
	return fd;
}

int listenOn(int port, int *chosen)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = {};
	addr.sin_family = AF_INET;
	addr.sin_port = htons(static_cast<uint16_t>(port));
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, reinterpret_cast<struct sockaddr *>(&addr), sizeof(addr)) != 0 ||
	    listen(fd, 16) != 0)
		fail("cannot listen");
	socklen_t length = sizeof(addr);
	getsockname(fd, reinterpret_cast<struct sockaddr *>(&addr), &length);
	*chosen = ntohs(addr.sin_port);
	return fd;
}

void setNonBlocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

} /* namespace example */
