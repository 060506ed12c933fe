#pragma once
/* A small PKI made with the openssl command once per test binary: two CAs and servers. */

#include <string>

#include "tls_fixture.h"

namespace testsupport {

struct Pki {
	std::string dir;
	std::string ca1;        /* CA certificates, PEM, one per file */
	std::string ca2;
	Certificate server;     /* localhost and 127.0.0.1, issued by ca1 */
	Certificate expired;    /* the same names, issued by ca1, expired since 2020 */
	Certificate otherHost;  /* other.example only, issued by ca1 */
	Certificate serverCa2;  /* localhost and 127.0.0.1, issued by ca2 */
};
const Pki &pki();

} /* namespace testsupport */
