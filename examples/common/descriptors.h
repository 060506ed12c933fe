#pragma once
/* Sending a descriptor to another process (or to oneself) over a unix socket: SCM_RIGHTS. */

#include <cstring>
#include <sys/socket.h>

#include "example.h"

namespace example {

/* One byte with fd attached (received) or to attach (sent). */
struct DescriptorMessage {
	DescriptorMessage()
	{
		message.msg_iov = &iov;
		message.msg_iovlen = 1;
		message.msg_control = control;
		message.msg_controllen = sizeof(control);
	}
	DescriptorMessage(const DescriptorMessage &) = delete;
	DescriptorMessage &operator=(const DescriptorMessage &) = delete;

	char byte = 'f';
	struct iovec iov = { &byte, 1 };
	alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
	struct msghdr message = {};
};

inline void sendDescriptor(int channel, int fd)
{
	DescriptorMessage m;
	struct cmsghdr *header = CMSG_FIRSTHDR(&m.message);
	header->cmsg_level = SOL_SOCKET;
	header->cmsg_type = SCM_RIGHTS;
	header->cmsg_len = CMSG_LEN(sizeof(int));
	std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
	if (sendmsg(channel, &m.message, 0) != 1)
		fail("sendmsg");
}

/* byMany: received with recvmmsg, a vector of one message. */
inline int receiveDescriptor(int channel, bool byMany = false)
{
	DescriptorMessage m;
	struct cmsghdr *header;
	struct mmsghdr one = {};
	one.msg_hdr = m.message;
	const bool ok = byMany ? recvmmsg(channel, &one, 1, MSG_CMSG_CLOEXEC, nullptr) == 1 && one.msg_len == 1
				     : recvmsg(channel, &m.message, MSG_CMSG_CLOEXEC) == 1;
	if (byMany)
		m.message = one.msg_hdr;
	if (!ok || !(header = CMSG_FIRSTHDR(&m.message)) || header->cmsg_type != SCM_RIGHTS)
		fail("recvmsg");
	int received = -1;
	std::memcpy(&received, CMSG_DATA(header), sizeof(int));
	return received;
}

} /* namespace example */
