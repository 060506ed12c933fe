/*
 * The CA cache seen from programs: every loader parses a file once per process and answers
 * exactly as OpenSSL does without the shim (return values, error queue, store contents and
 * order, verify results), from examples/ca_client, python's ssl module and curl.
 */

#include <gtest/gtest.h>

#include <openssl/opensslv.h>

#include <algorithm>
#include <cctype>

#include <sys/stat.h>
#include <unistd.h>

#include "pki.h"
#include "process.h"
#include "servers.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

const std::string kChecks = std::string(TLSTUNE_SOURCE_ROOT) + "/tests/programs/ca_checks.py";

/* Runs argv with or without the shim; with it, TLSTUNE_STATS=1 reports the cache's counts. */
Captured runWith(bool withShim, const std::vector<std::string> &argv,
		 std::vector<std::string> env = {})
{
	if (withShim)
		env.push_back("TLSTUNE_STATS=1");
	return runProgram(argv, withShim, env);
}

/*
 * What the examples (built against the OpenSSL of this tree) count where the CA cache runs;
 * elsewhere (1.1.1) OpenSSL loads every file itself. Debian's python, curl, socat and stunnel
 * load the system's OpenSSL, whatever this tree was built against: their counts stay as they are.
 */
std::string counts(const std::string &expected)
{
	return caCacheRunsHere() ? expected : "ca_hits=0 ca_misses=0 ca_reloads=0";
}

/* "ca_hits=2 ca_misses=1 ca_reloads=0" from the shim's stats line. */
std::string caCounts(const std::string &err)
{
	const std::string::size_type start = err.find("ca_hits=");
	const std::string::size_type reloads = err.find("ca_reloads=", start);
	if (start == std::string::npos || reloads == std::string::npos)
		return "no stats line in: " + err;
	return err.substr(start, err.find_first_not_of("0123456789", reloads + 11) - start);
}

std::vector<std::string> caClient(std::vector<std::string> arguments)
{
	arguments.insert(arguments.begin(), examplePath("ca_client"));
	return arguments;
}

/* The same program, without and with the shim: same stdout; the cache's counts returned. */
std::string expectSameOutput(const std::vector<std::string> &argv,
			     const std::vector<std::string> &env = {}, std::string *out = nullptr)
{
	const Captured plain = runWith(false, argv, env);
	const Captured tuned = runWith(true, argv, env);
	EXPECT_EQ(plain.status, 0) << plain.err;
	EXPECT_EQ(tuned.status, plain.status) << tuned.err;
	EXPECT_EQ(tuned.out, plain.out);
	if (out)
		*out = plain.out;
	return caCounts(tuned.err);
}

/* Files a loader must fail on, exactly as OpenSSL fails without the shim. */
std::vector<std::string> badFiles(const TempDir &dir)
{
	const std::string ca = readFile(pki().ca1);
	writeFile(dir.file("empty.pem"), "");
	writeFile(dir.file("garbage.pem"), "this is not a certificate\n");
	writeFile(dir.file("truncated.pem"), ca.substr(0, ca.size() / 2));
	writeFile(dir.file("good-then-broken.pem"), ca + ca.substr(0, ca.size() / 2));
	writeFile(dir.file("key-only.pem"), readFile(pki().server.key));
	mkdir(dir.file("directory.pem").c_str(), 0700);
	return { dir.file("missing.pem"), dir.file("empty.pem"), dir.file("garbage.pem"),
		 dir.file("truncated.pem"), dir.file("good-then-broken.pem"), dir.file("key-only.pem"),
		 dir.file("directory.pem") };
}

} /* namespace */

TEST(CaCache, EveryLoaderAnswersAsOpenSslDoesAndParsesOnce)
{
	for (const char *loader : { "ctx-locations", "ctx-file", "store-file", "store-locations" }) {
		std::string out;
		EXPECT_EQ(expectSameOutput(caClient({ "--loader", loader, "--ca", pki().ca1, "--contexts", "3" }),
					   {}, &out),
			  counts("ca_hits=2 ca_misses=1 ca_reloads=0")) << loader;
		EXPECT_NE(out.find("load 1\nobjects 1 "), std::string::npos) << loader << "\n" << out;
	}
	/* The default paths, resolved by OpenSSL: SSL_CERT_FILE, else the system bundle. */
	for (const char *loader : { "ctx-default", "store-default" }) {
		EXPECT_EQ(expectSameOutput(caClient({ "--loader", loader, "--contexts", "3" }),
					   { "SSL_CERT_FILE=" + pki().ca2 }),
			  counts("ca_hits=2 ca_misses=1 ca_reloads=0")) << loader;
		std::string out;
		EXPECT_EQ(expectSameOutput(caClient({ "--loader", loader, "--contexts", "3" }), {}, &out),
			  counts("ca_hits=2 ca_misses=1 ca_reloads=0")) << loader;
		EXPECT_EQ(out.find("objects 0 "), std::string::npos) << "the system bundle is empty?\n" << out;
	}
}

TEST(CaCache, FailuresAreOpenSslsOwn)
{
	RecordProperty("fault", "CA files missing, empty, garbage, truncated, key-only, a directory");
	TempDir dir;
	for (const std::string &file : badFiles(dir)) {
		for (const char *loader : { "ctx-locations", "store-file" }) {
			std::string out;
			EXPECT_EQ(expectSameOutput(caClient({ "--loader", loader, "--ca", file, "--contexts", "2" }),
						   {}, &out),
				  counts("ca_hits=0 ca_misses=0 ca_reloads=0")) << loader << " " << file;
			EXPECT_NE(out.find("load 0\nerror "), std::string::npos) << loader << " " << file << "\n" << out;
		}
		/* The default loader clears its errors and answers 1 whatever the file holds. */
		EXPECT_EQ(expectSameOutput(caClient({ "--loader", "ctx-default", "--contexts", "2" }),
					   { "SSL_CERT_FILE=" + file }),
			  counts("ca_hits=0 ca_misses=0 ca_reloads=0")) << file;
	}
}

TEST(CaCache, AProcessThatCanNoLongerReadTheFileGetsNothingFromTheCache)
{
	RecordProperty("fault", "a root-only CA file loaded, then the process drops to nobody");
	if (geteuid() != 0)
		GTEST_SKIP() << "needs root to drop to nobody";
	TempDir dir;
	const std::string file = dir.file("root-only.pem");
	writeFile(file, readFile(pki().ca1));
	chmod(dir.path().c_str(), 0755);
	chmod(file.c_str(), 0600);
	for (const char *loader : { "ctx-locations", "store-file" }) {
		std::string out;
		EXPECT_EQ(expectSameOutput(caClient({ "--loader", loader, "--ca", file, "--contexts", "2",
						      "--drop-after", "1" }), {}, &out),
			  counts("ca_hits=0 ca_misses=1 ca_reloads=0")) << loader;
		EXPECT_EQ(out.substr(0, out.find("load", 1)).find("load 1\nobjects 1 "), 0u) << out;
		/* 3.0 says "system library::BIO_new_file", 1.1.1 "BIO routines:system lib:BIO_new_file". */
		const std::string::size_type failed = out.find("load 0\nerror ");
		EXPECT_NE(failed, std::string::npos) << out;
		EXPECT_NE(out.find(":BIO_new_file:", failed), std::string::npos) << out;
		EXPECT_NE(out.find("objects 0 "), std::string::npos) << out;
	}
}

TEST(CaCache, ACertificateWithAnInvalidExtensionLeavesItsErrorsAsWithoutTheShim)
{
	RecordProperty("fault", "a CA file whose certificate has an undecodable extension, twice");
	TempDir dir;
	Command openssl;
	openssl.argv = { "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
			 "-nodes", "-keyout", dir.file("key.pem"), "-out", dir.file("bad.pem"), "-days", "2",
			 "-subj", "/CN=invalid extension", "-addext", "basicConstraints=DER:01:02" };
	ASSERT_EQ(runCaptured(openssl, 60000).status, 0);
	/* Twice: OpenSSL compares the twins, decodes the extension and complains, per store. */
	const std::string bad = readFile(dir.file("bad.pem"));
	writeFile(dir.file("twice.pem"), bad + bad);
	for (const char *loader : { "ctx-locations", "store-file" }) {
		std::string out;
		expectSameOutput(caClient({ "--loader", loader, "--ca", dir.file("twice.pem"), "--contexts", "2" }),
				 {}, &out);
		/* 3.0 reports the certificate invalid; 1.1.1 the extension's ASN.1 that would not decode. */
		EXPECT_TRUE(out.find("load 1\nerror X509 V3 routines:invalid certificate:") != std::string::npos ||
			    (OPENSSL_VERSION_NUMBER < 0x30000000L &&
			     out.find("load 1\nerror asn1 encoding routines:") != std::string::npos))
			<< out;
	}
}

TEST(CaCache, VerificationIsTheSame)
{
	struct Case {
		const Certificate &identity;
		const std::string &ca;
		const char *expected;
	};
	const Case cases[] = {
		{ pki().server, pki().ca1, "verify 0 ok handshake ok" },
		{ pki().expired, pki().ca1, "verify 10 certificate has expired handshake failed" },
		{ pki().otherHost, pki().ca1, "verify 62 hostname mismatch handshake failed" },
		{ pki().server, pki().ca2, "verify 20 unable to get local issuer certificate handshake failed" },
	};
	for (const Case &c : cases) {
		/* Two runs (without and with the shim) of two contexts each. */
		ExampleServer server({ "--connections", "4", "--send", "5" }, {}, c.identity);
		std::string out;
		EXPECT_EQ(expectSameOutput(caClient({ "--ca", c.ca, "--contexts", "2", "--port",
						      server.portText() }), {}, &out),
			  counts("ca_hits=1 ca_misses=1 ca_reloads=0"));
		/* OpenSSL 1.1.1 says "Hostname mismatch", 3.x "hostname mismatch". */
		std::string lowered = out;
		std::transform(lowered.begin(), lowered.end(), lowered.begin(),
			       [](unsigned char ch) { return std::tolower(ch); });
		EXPECT_NE(lowered.find(std::string(c.expected) + "\n"), std::string::npos) << out;
		EXPECT_EQ(server.process().wait(60000), 0);
	}
}

TEST(CaCache, TtlZeroParsesEveryTimeAndOffNever)
{
	const auto argv = caClient({ "--ca", pki().ca1, "--contexts", "3" });
	EXPECT_EQ(expectSameOutput(argv, { "TLSTUNE_CA_CACHE_TTL=0" }), counts("ca_hits=0 ca_misses=1 ca_reloads=2"));
	EXPECT_EQ(expectSameOutput(argv, { "TLSTUNE_CA_CACHE=off" }), counts("ca_hits=0 ca_misses=0 ca_reloads=0"));
}

TEST(CaCache, ThreadsCreatingContextsAtOnceParseOnce)
{
	/* 8 threads x 500 contexts, each verifying a handshake; under TSan in that build. */
	const Captured run = runWith(true, caClient({ "--stress", "--threads", "8", "--contexts", "500",
						      "--ca", pki().ca1, "--server-cert", pki().server.cert,
						      "--server-key", pki().server.key }));
	EXPECT_EQ(run.status, 0) << run.err;
	EXPECT_EQ(run.out, "stress ok 4000 handshakes\n");
	EXPECT_EQ(caCounts(run.err), counts("ca_hits=3999 ca_misses=1 ca_reloads=0"));
}

TEST(CaCache, PythonSeesTheSameStoreAndErrors)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir dir;
	std::vector<std::string> argv = { "/usr/bin/python3", kChecks, "store" };
	for (const std::string &file : badFiles(dir))
		argv.push_back(file);
	std::string out;
	EXPECT_EQ(expectSameOutput(argv, {}, &out), "ca_hits=0 ca_misses=1 ca_reloads=0");
	EXPECT_NE(out.find("missing.pem FileNotFoundError"), std::string::npos) << out;
	EXPECT_NE(out.find("garbage.pem SSLError"), std::string::npos) << out;
}

TEST(CaCache, PythonVerifiesTheSame)
{
	SKIP_IN_SANITIZER_BUILD();
	ExampleServer good({ "--connections", "4", "--send", "5" }, {}, pki().server);
	ExampleServer expired({ "--connections", "4", "--send", "5" }, {}, pki().expired);
	ExampleServer other({ "--connections", "4", "--send", "5" }, {}, pki().otherHost);
	const std::vector<std::string> ports = { good.portText(), expired.portText(), other.portText() };
	for (const std::string &ca : { pki().ca1, pki().ca2 }) {
		std::vector<std::string> argv = { "/usr/bin/python3", kChecks, "verify", ca };
		argv.insert(argv.end(), ports.begin(), ports.end());
		std::string out;
		EXPECT_EQ(expectSameOutput(argv, {}, &out), "ca_hits=2 ca_misses=1 ca_reloads=0");
		if (ca == pki().ca1) {
			EXPECT_NE(out.find(good.portText() + " ok\n"), std::string::npos) << out;
			EXPECT_NE(out.find(expired.portText() + " rejected 10 certificate has expired"),
				  std::string::npos) << out;
			EXPECT_NE(out.find(other.portText() + " rejected 62 Hostname mismatch"),
				  std::string::npos) << out;
		} else {
			EXPECT_NE(out.find(good.portText() + " rejected 20 unable to get local issuer"),
				  std::string::npos) << out;
		}
	}
}

TEST(CaCache, ARewrittenFileIsParsedAgainEvenWithItsOldMtime)
{
	RecordProperty("fault", "the CA file rewritten in place, its old mtime restored");
	SKIP_IN_SANITIZER_BUILD();
	/* Both CA files padded to one size (PEM skips text after the block): only ctime moves. */
	std::string first = readFile(pki().ca1), second = readFile(pki().ca2);
	const size_t size = std::max(first.size(), second.size()) + 16;
	first += std::string(size - first.size() - 1, '#') + "\n";
	second += std::string(size - second.size() - 1, '#') + "\n";

	ExampleServer byCa1({ "--connections", "4", "--send", "5" }, {}, pki().server);
	ExampleServer byCa2({ "--connections", "4", "--send", "5" }, {}, pki().serverCa2);
	std::string outputs[2];
	for (bool withShim : { false, true }) {
		TempDir dir;
		writeFile(dir.file("ca.pem"), first);
		writeFile(dir.file("new.pem"), second);
		const Captured run = runWith(withShim, { "/usr/bin/python3", kChecks, "rewrite", dir.file("ca.pem"),
							 dir.file("new.pem"), byCa1.portText(), byCa2.portText() });
		EXPECT_EQ(run.status, 0) << run.err;
		if (withShim) {
			/* The bytes decide: the rewritten file is new bytes, indexed as a file of its own. */
			EXPECT_EQ(caCounts(run.err), "ca_hits=2 ca_misses=2 ca_reloads=0");
		}
		outputs[withShim] = run.out;
	}
	EXPECT_EQ(outputs[1], outputs[0]);
	EXPECT_EQ(outputs[1],
		  "before ok / rejected 20 unable to get local issuer certificate\n"
		  "same inode, size, mtime: True True True\n"
		  "after rejected 20 unable to get local issuer certificate / ok\n");
}

TEST(CaCache, AFileTruncatedOrRemovedBetweenLoadsFailsAsWithoutTheShim)
{
	RecordProperty("fault", "the CA file truncated, then removed, between loads");
	SKIP_IN_SANITIZER_BUILD();
	ExampleServer server({ "--connections", "4", "--send", "5" }, {}, pki().server);
	std::string outputs[2];
	for (bool withShim : { false, true }) {
		TempDir dir;
		writeFile(dir.file("ca.pem"), readFile(pki().ca1));
		const Captured run = runWith(withShim, { "/usr/bin/python3", kChecks, "vanish",
							 dir.file("ca.pem"), server.portText() });
		EXPECT_EQ(run.status, 0) << run.err;
		if (withShim) {
			/*
			 * The half file is not indexable and the missing one not read: OpenSSL
			 * loads both. The restored file has the first bytes again: a hit.
			 */
			EXPECT_EQ(caCounts(run.err), "ca_hits=1 ca_misses=1 ca_reloads=0");
		}
		outputs[withShim] = run.out;
	}
	EXPECT_EQ(outputs[1], outputs[0]);
	/* python's texts carry its own source lines: the shape is what is checked here. */
	EXPECT_EQ(outputs[0].substr(0, 28), "whole ok\ntruncated SSLError ") << outputs[0];
	EXPECT_NE(outputs[0].find("\nremoved FileNotFoundError [Errno 2] No such file or directory\n"
				  "restored ok\n"), std::string::npos) << outputs[0];
}

TEST(CaCache, CurlAnswersTheSame)
{
	SKIP_IN_SANITIZER_BUILD();
	struct Case {
		const Certificate &identity;
		const std::string &ca;
	};
	const Case cases[] = {
		{ pki().server, pki().ca1 }, { pki().expired, pki().ca1 },
		{ pki().otherHost, pki().ca1 }, { pki().server, pki().ca2 },
	};
	for (const Case &c : cases) {
		Captured runs[2];
		for (bool withShim : { false, true }) {
			/*
			 * One server per run: it answers with 5 bytes that are not HTTP, and dies
			 * of SIGPIPE when curl has hung up first (curl checks the host name after
			 * the handshake).
			 */
			ExampleServer server({ "--send", "5" }, {}, c.identity);
			const std::string port = server.portText();
			runs[withShim] = runWith(withShim, { "curl", "-sS", "--max-time", "60", "--cacert", c.ca,
							     "--resolve", "localhost:" + port + ":127.0.0.1",
							     "https://localhost:" + port + "/" });
		}
		const Captured &plain = runs[0], &tuned = runs[1];
		EXPECT_NE(plain.status, 0);
		EXPECT_EQ(tuned.status, plain.status) << tuned.err;
		EXPECT_EQ(tuned.err.substr(0, tuned.err.find("tlstune:")), plain.err);
		EXPECT_EQ(caCounts(tuned.err), "ca_hits=0 ca_misses=1 ca_reloads=0");
	}
}

TEST(CaCache, SocatAndStunnelVerifyTheSame)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir dir;
	const std::string out = dir.file("out");
	for (const std::string &ca : { pki().ca1, pki().ca2 }) {
		const bool trusted = ca == pki().ca1;
		/* socat as a one-shot client: verifies, then copies what the server sends. */
		Captured socat[2];
		for (bool withShim : { false, true }) {
			ExampleServer server({ "--send", "1000" }, {}, pki().server);
			socat[withShim] = runWith(withShim, { "socat", "-u",
				"OPENSSL:127.0.0.1:" + server.portText() + ",cafile=" + ca + ",commonname=localhost",
				"CREATE:" + out });
			EXPECT_EQ(readFile(out).size(), trusted ? 1000u : 0u) << socat[withShim].err;
			unlink(out.c_str());
		}
		/* A failed verify is exit 1 from socat 1.7 (Debian 12), 255 from 1.8 (Debian 13). */
		EXPECT_EQ(socat[0].status != 0, !trusted) << socat[0].err;
		EXPECT_EQ(socat[1].status, socat[0].status) << socat[1].err;
		EXPECT_EQ(caCounts(socat[1].err), "ca_hits=0 ca_misses=1 ca_reloads=0");

		/* stunnel as a client relay: a plain reader gets the bytes only through a trusted chain. */
		int readerStatus[2] = { -1, -1 };
		for (bool withShim : { false, true }) {
			ExampleServer server({ "--send", "1000" }, {}, pki().server);
			const int relayPort = freePort();
			writeFile(dir.file("stunnel.conf"),
				  "foreground = yes\npid =\ndebug = notice\n[relay]\nclient = yes\n"
				  "accept = 127.0.0.1:" + std::to_string(relayPort) + "\nconnect = 127.0.0.1:" +
				  server.portText() + "\nCAfile = " + ca + "\nverifyChain = yes\ncheckHost = localhost\n");
			Command command;
			command.argv = { "stunnel4", dir.file("stunnel.conf") };
			if (withShim)
				command.env = shimEnv({ "TLSTUNE_STATS=1" });
			Daemon stunnel(command, "Configuration successful");
			Command reader;
			reader.argv = { "socat", "-u", "TCP:127.0.0.1:" + std::to_string(relayPort), "CREATE:" + out };
			/* socat 1.8 fails where stunnel hangs up on it; 1.7 ended quietly. */
			readerStatus[withShim] = runCaptured(reader, 60000).status;
			if (trusted) {
				EXPECT_EQ(readerStatus[withShim], 0);
			}
			EXPECT_EQ(readFile(out).size(), trusted ? 1000u : 0u) << withShim;
			unlink(out.c_str());
			const std::string log = stunnel.stop();
			if (withShim) {
				EXPECT_EQ(caCounts(log), "ca_hits=0 ca_misses=1 ca_reloads=0");
			}
		}
		EXPECT_EQ(readerStatus[1], readerStatus[0]);
	}
}
