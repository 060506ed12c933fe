/*
 * Lazy CA loading (issue 13, TLSTUNE_CA_LAZY=on) against eager loading and against no shim
 * at all, over PKIs that tests/programs/ca_pki.py makes: same load result, same errors,
 * same verify result and error depth, the same chain (certificate digests, not subjects),
 * the same store contents in the same order.
 */

#include <gtest/gtest.h>

#include <openssl/crypto.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "pki.h"
#include "process.h"
#include "servers.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

const std::string kSource = std::string(TLSTUNE_SOURCE_ROOT) + "/tests/programs/";

/* The differential PKI, made once per test binary; empty when python lacks cryptography. */
const TempDir *casesDir()
{
	static TempDir dir;
	static const bool made = [] {
		Command make;
		make.argv = { "/usr/bin/python3", kSource + "ca_pki.py", dir.path() };
		return runCaptured(make, 120000).status == 0;
	}();
	return made ? &dir : nullptr;
}

struct Case {
	std::string name;
	std::vector<std::string> flags;
};

std::vector<Case> cases(const TempDir &dir)
{
	std::vector<Case> out;
	std::istringstream lines(readFile(dir.file("cases")));
	std::string name, flags;
	while (lines >> name >> flags) {
		Case c{ name, {} };
		std::istringstream each(flags);
		std::string flag;
		while (std::getline(each, flag, ','))
			if (flag != "-")
				c.flags.push_back("--" + flag);
		out.push_back(c);
	}
	return out;
}

bool exists(const std::string &path) { return std::ifstream(path).good(); }

std::vector<std::string> verifyArgv(const TempDir &dir, const Case &c)
{
	std::vector<std::string> argv = { examplePath("ca_verify"), "--ca", dir.file(c.name + ".pem") };
	for (int i = 1; exists(dir.file(c.name + ".add" + std::to_string(i) + ".pem")); i++)
		argv.insert(argv.end(), { "--add", dir.file(c.name + ".add" + std::to_string(i) + ".pem") });
	if (exists(dir.file(c.name + ".untrusted.pem")))
		argv.insert(argv.end(), { "--untrusted", dir.file(c.name + ".untrusted.pem") });
	for (int i = 1; exists(dir.file(c.name + ".leaf" + std::to_string(i) + ".pem")); i++)
		argv.insert(argv.end(), { "--leaf", dir.file(c.name + ".leaf" + std::to_string(i) + ".pem") });
	if (exists(dir.file(c.name + ".then.pem")))
		argv.insert(argv.end(), { "--then-ca", dir.file(c.name + ".then.pem") });
	argv.insert(argv.end(), c.flags.begin(), c.flags.end());
	return argv;
}

/* "ca_certs_indexed=5 ca_certs_parsed=2" from the shim's stats line. */
std::string certCounts(const std::string &err)
{
	const std::string::size_type start = err.find("ca_certs_indexed=");
	if (start == std::string::npos)
		return "no stats line in: " + err;
	const std::string::size_type parsed = err.find("ca_certs_parsed=", start);
	return err.substr(start, err.find_first_not_of("0123456789", parsed + 16) - start);
}

/* Certificates the run indexed: 0 when it loaded eagerly (or nothing, and so printed no stats). */
int indexed(const std::string &err)
{
	const std::string::size_type at = err.find("ca_certs_indexed=");
	return at == std::string::npos ? 0 : std::atoi(err.c_str() + at + 17);
}

const std::vector<std::string> kLazy = { "TLSTUNE_CA_LAZY=on", "TLSTUNE_STATS=1" };

/*
 * Lazy loading runs where the OpenSSL the programs load is 3.0 (Debian 12) or 3.5 (the
 * Debian 13 leg); elsewhere (1.1.1) files load eagerly, and what must hold is the same output.
 */
bool lazyHere()
{
	const unsigned long version = OpenSSL_version_num() >> 20;
	return version == 0x300 || version == 0x305;
}
const std::vector<std::string> kEager = { "TLSTUNE_CA_LAZY=off" };

} /* namespace */

TEST(CaLazy, VerifiesAndEnumeratesAsEagerLoadingAndAsNoShim)
{
	RecordProperty("fault", "same-subject roots (wrong key first), cross-signed roots, the program "
				"adding a bundle subject, PARTIAL_CHAIN, TRUSTED_FIRST off, expired and "
				"future CAs, name constraints, path length, unknown CA, duplicates, CRLs, "
				"file order, a certificate malformed deep inside, twins apart in the file "
				"(3.5's duplicate check), a second file loaded after a verification");
	const TempDir *dir = casesDir();
	if (!dir)
		GTEST_SKIP() << "python3-cryptography is missing";
	int lazyCases = 0;
	for (const Case &c : cases(*dir)) {
		for (bool enumerateFirst : { false, true }) {
			std::vector<std::string> argv = verifyArgv(*dir, c);
			if (enumerateFirst)
				argv.push_back("--enumerate-first");
			const Captured plain = runProgram(argv, false);
			const Captured eager = runProgram(argv, true, kEager);
			const Captured lazy = runProgram(argv, true, kLazy);
			const std::string what = c.name + (c.flags.empty() ? "" : " " + c.flags[0]) +
						 (enumerateFirst ? " enumerated first" : "");
			ASSERT_EQ(plain.status, 0) << what << plain.err;
			EXPECT_EQ(eager.out, plain.out) << what;
			EXPECT_EQ(lazy.out, plain.out) << what;
			EXPECT_EQ(lazy.status, 0) << what;
			lazyCases += indexed(lazy.err) > 0;
		}
	}
	/* Every case but the file with CRLs and the one that does not load loads lazily. */
	EXPECT_EQ(lazyCases, lazyHere() ? 2 * (static_cast<int>(cases(*dir).size()) - 2) : 0);
}

TEST(CaLazy, ACapathLookedUpBeforeTheFileDoesNotAnswerForIt)
{
	RecordProperty("fault", "a CApath whose same-subject root (the other key) is looked up first");
	const TempDir *dir = casesDir();
	if (!dir)
		GTEST_SKIP() << "python3-cryptography is missing";
	/* The directory holds the twin with the first key; the file the one with the second. */
	TempDir hashed;
	writeFile(hashed.file("twin1.pem"), readFile(dir->file("added-after.add1.pem")));
	Command rehash;
	rehash.argv = { "openssl", "rehash", hashed.path() };
	ASSERT_EQ(runCaptured(rehash, 60000).status, 0);
	std::vector<std::string> argv = verifyArgv(*dir, { "added-after", {} });
	argv.erase(argv.begin() + 3, argv.begin() + 5); /* no --add: the directory has it */
	argv.insert(argv.end(), { "--capath", hashed.path() });
	const Captured plain = runProgram(argv, false);
	const Captured eager = runProgram(argv, true, kEager);
	const Captured lazy = runProgram(argv, true, kLazy);
	EXPECT_EQ(eager.out, plain.out);
	EXPECT_EQ(lazy.out, plain.out);
	EXPECT_EQ(indexed(lazy.err) > 0, lazyHere()) << lazy.err;
}

TEST(CaLazy, AVerificationParsesOnlyWhatItNeeds)
{
	if (!lazyHere())
		GTEST_SKIP() << "lazy loading is for OpenSSL 3.0 and 3.5";
	const TempDir *dir = casesDir();
	if (!dir)
		GTEST_SKIP() << "python3-cryptography is missing";
	/* Root, intermediate, a repeat of each and the twin root: the chain needs the root. */
	const Captured run = runProgram({ examplePath("ca_verify"), "--ca", dir->file("duplicates.pem"),
					  "--leaf", dir->file("duplicates.leaf2.pem"), "--partial" },
					true, kLazy);
	EXPECT_NE(run.out.find("verify 1 0 ok depth 0\n"), std::string::npos) << run.out;
	/*
	 * The listing at the end parses all five; the verification alone took one. 3.5's store
	 * model tells the two repeats by their bytes, and never parses them.
	 */
	const bool model = OpenSSL_version_num() >> 20 == 0x305;
	EXPECT_EQ(certCounts(run.err), model ? "ca_certs_indexed=5 ca_certs_parsed=3"
					     : "ca_certs_indexed=5 ca_certs_parsed=5");
	const Captured bundle = runProgram({ examplePath("ca_client"), "--loader", "ctx-default",
					     "--contexts", "1", "--quiet" }, true, kLazy);
	EXPECT_EQ(bundle.status, 0) << bundle.err;
	EXPECT_NE(certCounts(bundle.err).find("ca_certs_parsed="), std::string::npos);
	/* Every certificate of the bundle: 144 in Debian 12's, 148 in Debian 13's. */
	const std::string system = readFile("/etc/ssl/certs/ca-certificates.crt");
	int blocks = 0;
	for (std::string::size_type at = 0; (at = system.find("-----BEGIN CERTIFICATE-----", at)) != std::string::npos; at++)
		blocks++;
	EXPECT_EQ(indexed(bundle.err), blocks) << "the system bundle should load lazily: " << bundle.err;
}

TEST(CaLazy, PythonSeesTheSameStore)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir bad;
	writeFile(bad.file("garbage.pem"), "this is not a certificate\n");
	const std::vector<std::string> store = { "/usr/bin/python3", kSource + "ca_checks.py", "store",
						 bad.file("missing.pem"), bad.file("garbage.pem") };
	/* The system bundle, then files out of subject order, with twins and repeats. */
	std::vector<std::vector<std::string>> environments = { {} };
	if (const TempDir *dir = casesDir()) {
		for (const char *name : { "order", "order-repeat", "twins", "duplicates", "timed" })
			environments.push_back({ "SSL_CERT_FILE=" + dir->file(std::string(name) + ".pem") });
	}
	for (const std::vector<std::string> &env : environments) {
		const Captured plain = runProgram(store, false, env);
		std::vector<std::string> lazyEnv = env;
		lazyEnv.insert(lazyEnv.end(), kLazy.begin(), kLazy.end());
		const Captured lazy = runProgram(store, true, lazyEnv);
		const std::string what = env.empty() ? "system bundle" : env[0];
		EXPECT_EQ(plain.status, 0) << what << plain.err;
		EXPECT_EQ(lazy.out, plain.out) << what;
		EXPECT_EQ(indexed(lazy.err) > 0, lazyHere()) << lazy.err;
	}
}

TEST(CaLazy, PythonMixingFilesAndItsOwnCertificatesSeesTheSameStore)
{
	RecordProperty("fault", "cadata and CA files mixed, twins and repeats (issue 13's 3.5 counts)");
	SKIP_IN_SANITIZER_BUILD();
	const TempDir *dir = casesDir();
	if (!dir)
		GTEST_SKIP() << "python3-cryptography is missing";
	auto file = [&](const char *name) { return std::string("file:") + dir->file(name); };
	auto data = [&](const char *name) { return std::string("data:") + dir->file(name); };
	/* twins.pem is Twin Root (key 1) then its twin (key 2); added-after.add1.pem the first. */
	const std::vector<std::vector<std::string>> mixes = {
		{ data("cross.pem"), file("twins.pem"), data("added-same.add1.pem") },
		{ data("cross.pem"), file("duplicates.pem"), data("added-after.add1.pem") },
		{ data("added-after.add1.pem"), file("order-repeat.pem"), file("crls.pem") },
		{ file("order.pem"), file("order.pem"), data("twins.pem") },
		{ file("crls.pem"), file("timed.pem"), data("timed.pem") },
		/* 3.5's duplicate check meets twins apart, from the program and from another file. */
		{ file("twins-apart.pem"), data("twins.pem") },
		{ data("added-after.add1.pem"), file("twins-apart.pem"), file("then-load.then.pem") },
	};
	for (const std::vector<std::string> &loads : mixes) {
		std::vector<std::string> argv = { "/usr/bin/python3", kSource + "ca_checks.py", "mix" };
		argv.insert(argv.end(), loads.begin(), loads.end());
		const Captured plain = runProgram(argv, false);
		const Captured eager = runProgram(argv, true, kEager);
		const Captured lazy = runProgram(argv, true, kLazy);
		EXPECT_EQ(plain.status, 0) << plain.err;
		EXPECT_EQ(eager.out, plain.out) << loads[1];
		EXPECT_EQ(lazy.out, plain.out) << loads[1];
	}
}

TEST(CaLazy, CurlAnswersTheSame)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir dir;
	writeFile(dir.file("bundle.pem"), readFile("/etc/ssl/certs/ca-certificates.crt") + readFile(pki().ca1));
	for (const Certificate *identity : { &pki().server, &pki().expired, &pki().serverCa2 }) {
		Captured runs[2];
		for (bool lazy : { false, true }) {
			ExampleServer server({ "--send", "5" }, {}, *identity);
			const std::string port = server.portText();
			const std::vector<std::string> argv = { "curl", "-sS", "--max-time", "60", "--cacert",
								dir.file("bundle.pem"), "--resolve",
								"localhost:" + port + ":127.0.0.1",
								"https://localhost:" + port + "/" };
			runs[lazy] = lazy ? runProgram(argv, true, kLazy) : runProgram(argv, false);
		}
		EXPECT_EQ(runs[1].status, runs[0].status) << runs[1].err;
		EXPECT_EQ(runs[1].err.substr(0, runs[1].err.find("tlstune:")), runs[0].err);
		/* The bundle indexed, and parsed only where the chain needs it. */
		EXPECT_EQ(indexed(runs[1].err) > 0, lazyHere()) << runs[1].err;
	}
}

TEST(CaLazy, ClientLoadersAndBadFilesAnswerAsWithoutTheShim)
{
	TempDir dir;
	const std::string ca = readFile(pki().ca1);
	writeFile(dir.file("truncated.pem"), ca.substr(0, ca.size() / 2));
	writeFile(dir.file("good-then-broken.pem"), ca + ca.substr(0, ca.size() / 2));
	writeFile(dir.file("crlf.pem"), [&] {
		std::string out;
		for (char ch : ca)
			out += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
		return out;
	}());
	for (const std::string &file : { pki().ca1, dir.file("truncated.pem"), dir.file("good-then-broken.pem"),
					 dir.file("crlf.pem"), dir.file("missing.pem") }) {
		for (const char *loader : { "ctx-locations", "store-file" }) {
			const std::vector<std::string> argv = { examplePath("ca_client"), "--loader", loader,
								"--ca", file, "--contexts", "2" };
			const Captured plain = runProgram(argv, false);
			const Captured lazy = runProgram(argv, true, kLazy);
			EXPECT_EQ(lazy.out, plain.out) << loader << " " << file;
		}
	}
}

TEST(CaLazy, ThreadsVerifyingAgainstOneLazyStoreAgree)
{
	/* Under ThreadSanitizer in that build: the store's lazy fill and the shared index. */
	const TempDir *dir = casesDir();
	if (!dir)
		GTEST_SKIP() << "python3-cryptography is missing";
	for (const char *name : { "duplicates", "twins", "timed" }) {
		std::vector<std::string> argv = verifyArgv(*dir, { name, {} });
		argv.insert(argv.end(), { "--threads", "4" });
		const Captured lazy = runProgram(argv, true, kLazy);
		EXPECT_EQ(lazy.status, 0) << lazy.err;
		EXPECT_NE(lazy.out.find("threads ok "), std::string::npos) << name << "\n" << lazy.out;
		EXPECT_EQ(lazy.err.find("ThreadSanitizer"), std::string::npos) << lazy.err;
	}
	/* Many stores, one index: ca_client's contexts each verify a handshake. */
	const Captured stress = runProgram({ examplePath("ca_client"), "--stress", "--threads", "8",
					     "--contexts", "200", "--ca", pki().ca1, "--server-cert",
					     pki().server.cert, "--server-key", pki().server.key },
					   true, kLazy);
	EXPECT_EQ(stress.status, 0) << stress.err;
	EXPECT_EQ(stress.out, "stress ok 1600 handshakes\n");
}

/*
 * socat serving its own self-signed certificate builds that certificate's chain: a lookup
 * of an issuer the bundle lacks, which goes on to the CApath directory, whose lookup
 * searches the store through X509_STORE_get0_objects. That is a search by one subject,
 * not an enumeration: the bundle stays unparsed (it was parsed whole, and socat in fork
 * mode took three times the CPU of no shim at all).
 */
TEST(CaLazy, AnUnknownIssuerLooksInTheDirectoryWithoutParsingTheBundle)
{
	SKIP_IN_SANITIZER_BUILD();
	if (!lazyHere())
		GTEST_SKIP() << "lazy loading is for OpenSSL 3.0 and 3.5";
	const int port = freePort();
	Command server;
	server.argv = { "socat", "-d", "-d",
			"OPENSSL-LISTEN:" + std::to_string(port) + ",bind=127.0.0.1,reuseaddr,verify=0,cert=" +
				certificate().cert + ",key=" + certificate().key,
			"EXEC:echo served" };
	server.env = shimEnv(kLazy);
	Daemon socat(server, "listening on");
	const Captured client = runProgram({ "socat", "-u", "OPENSSL:127.0.0.1:" + std::to_string(port) +
						 ",verify=0", "-" }, false);
	EXPECT_EQ(client.out, "served\n") << client.err;
	/* socat without fork ends after its one connection: the log is all there by then. */
	const std::string log = socat.stop();
	const std::string counts = certCounts(log);
	ASSERT_NE(counts.find("ca_certs_parsed="), std::string::npos) << log;
	EXPECT_GT(indexed(log), 100) << counts;
	EXPECT_LT(std::atoi(counts.c_str() + counts.find("ca_certs_parsed=") + 16), 10)
		<< counts << ": a handful, not the bundle";
}
