/*
 * Debian's curl and python3 downloading from a local nginx over TLS through the shim:
 * same bytes and exit code as without it, the read pattern changed, no stall on a
 * keep-alive connection (curl 7.88 stalls there with read-ahead and no readiness layer).
 */

#include <gtest/gtest.h>

#include "servers.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr unsigned long long kFile = 16ull << 20;
constexpr int kFetches = 4; /* 64 MiB in one process */

struct Download {
	TracedRun run;
	std::vector<std::string> digests;
	tlstune::SocketTraffic traffic;
	size_t connections = 0;
};

std::string describe(const Download &d)
{
	return "status " + std::to_string(d.run.status) + ", connections " +
	       std::to_string(d.connections) + ", reads " + std::to_string(d.traffic.reads) +
	       ", header reads " + std::to_string(d.traffic.headerReads) + ", bytes " +
	       std::to_string(d.traffic.readBytes) + ", reads/MiB " +
	       std::to_string(d.traffic.readsPerMiB()) + "\n" + d.run.out;
}

class Downloads : public ::testing::TestWithParam<const char *> {
protected:
	void SetUp() override
	{
		expected_ = writePattern(data_.file("data"), kFile, 11);
		nginx_.reset(new Nginx(data_.path(), GetParam()));
	}

	/* Runs argv (which writes file i to out(i), or prints digests) with or without the shim. */
	Download download(const std::vector<std::string> &argv, bool withShim)
	{
		Download d;
		d.run = runTraced(argv, withShim);
		for (int i = 0; i < kFetches; i++) {
			if (access(out(i).c_str(), F_OK) == 0) {
				d.digests.push_back(fileSha256(out(i)));
				unlink(out(i).c_str());
			}
		}
		if (d.digests.empty()) {
			std::istringstream lines(d.run.out);
			for (std::string line; std::getline(lines, line);)
				d.digests.push_back(line);
		}
		d.traffic = tlstune::trafficOnPort(d.run.calls, nginx_->port());
		for (const auto &socket : tlstune::tcpTraffic(d.run.calls))
			d.connections += socket.first.find(":" + std::to_string(nginx_->port()) + "]") !=
					 std::string::npos;
		return d;
	}

	void expectSameBytesAndBetterReads(const Download &plain, const Download &tuned,
					   size_t connections)
	{
		const std::vector<std::string> all(kFetches, expected_);
		ASSERT_EQ(plain.run.status, 0) << describe(plain);
		EXPECT_EQ(plain.digests, all) << describe(plain);
		EXPECT_GT(plain.traffic.headerReads, 1000u) << describe(plain);

		ASSERT_EQ(tuned.run.status, 0) << describe(tuned);
		EXPECT_EQ(tuned.digests, all) << describe(tuned);
		EXPECT_EQ(tuned.connections, connections) << describe(tuned);
		EXPECT_LE(tuned.traffic.headerReads, handshakeHeaderReads(connections)) << describe(tuned);
		EXPECT_GE(tuned.traffic.readBytes, kFile * kFetches);
		EXPECT_LE(tuned.traffic.readsPerMiB(), maxReadsPerMiB(GetParam())) << describe(tuned);
	}

	std::string out(int i) const { return data_.file("out" + std::to_string(i)); }

	TempDir data_;
	std::string expected_;
	std::unique_ptr<Nginx> nginx_;
};

} /* namespace */

TEST_P(Downloads, CurlOnOneKeepAliveConnection)
{
	std::vector<std::string> argv = { "curl", "--silent", "--show-error", "--fail",
					  "--cacert", certificate().cert, "--max-time", "120" };
	for (int i = 0; i < kFetches; i++)
		argv.insert(argv.end(), { "--output", out(i), nginx_->url("/data") });

	Download plain = download(argv, false);
	Download tuned = download(argv, true);
	EXPECT_EQ(plain.connections, 1u) << describe(plain);
	expectSameBytesAndBetterReads(plain, tuned, 1);
}

TEST_P(Downloads, PythonUrllib)
{
	const std::string script =
		"import hashlib, ssl, sys, urllib.request\n"
		"context = ssl.create_default_context(cafile=sys.argv[1])\n"
		"for url in sys.argv[2:]:\n"
		"    digest = hashlib.sha256()\n"
		"    with urllib.request.urlopen(url, context=context, timeout=120) as response:\n"
		"        for chunk in iter(lambda: response.read(1 << 20), b''):\n"
		"            digest.update(chunk)\n"
		"    print(digest.hexdigest())\n";
	std::vector<std::string> argv = { "/usr/bin/python3", "-c", script, certificate().cert };
	for (int i = 0; i < kFetches; i++)
		argv.push_back(nginx_->url("/data"));

	expectSameBytesAndBetterReads(download(argv, false), download(argv, true), kFetches);
}

TEST_P(Downloads, PythonHttpClientKeepAlive)
{
	const std::string script =
		"import hashlib, http.client, ssl, sys\n"
		"context = ssl.create_default_context(cafile=sys.argv[1])\n"
		"connection = http.client.HTTPSConnection('127.0.0.1', int(sys.argv[2]),\n"
		"                                         context=context, timeout=120)\n"
		"for _ in range(int(sys.argv[3])):\n"
		"    connection.request('GET', '/data')\n"
		"    response = connection.getresponse()\n"
		"    digest = hashlib.sha256()\n"
		"    for chunk in iter(lambda: response.read(1 << 20), b''):\n"
		"        digest.update(chunk)\n"
		"    print(digest.hexdigest())\n";
	std::vector<std::string> argv = { "/usr/bin/python3", "-c", script, certificate().cert,
					  std::to_string(nginx_->port()), std::to_string(kFetches) };

	expectSameBytesAndBetterReads(download(argv, false), download(argv, true), 1);
}

INSTANTIATE_TEST_SUITE_P(Tls, Downloads, ::testing::Values("1.2", "1.3"));
