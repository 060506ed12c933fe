/* What libtlstune.so exports and loads: exactly the map, no OpenSSL of its own. */

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "tls_fixture.h"

using namespace testsupport;

namespace {

std::set<std::string> mapSymbols()
{
	std::ifstream in(TLSTUNE_SHIM_MAP);
	std::set<std::string> names;
	bool global = false;
	for (std::string line; std::getline(in, line);) {
		if (line.find("global:") != std::string::npos)
			global = true;
		else if (line.find("local:") != std::string::npos)
			global = false;
		/* "\tSSL_read;" */
		const std::string::size_type start = line.find_first_not_of(" \t");
		const std::string::size_type end = line.find(';');
		if (global && start != std::string::npos && end != std::string::npos &&
		    line.find(':') == std::string::npos)
			names.insert(line.substr(start, end - start));
	}
	return names;
}

std::string output(const std::vector<std::string> &argv, const std::vector<std::string> &env = {},
		   int *status = nullptr, std::string *errors = nullptr)
{
	Command command;
	command.argv = argv;
	command.env = env;
	Captured captured = runCaptured(command, 60000);
	if (status)
		*status = captured.status;
	if (errors)
		*errors = captured.err;
	return captured.out;
}

} /* namespace */

TEST(Abi, ExportsExactlyTheMap)
{
	std::set<std::string> exported;
	std::istringstream nm(output({ "nm", "-D", "--defined-only", shimPath() }));
	for (std::string address, type, name; nm >> address >> type >> name;)
		exported.insert(name);
	const std::set<std::string> expected = mapSymbols();
	ASSERT_GT(expected.size(), 20u);
	EXPECT_EQ(exported, expected);
}

/* libgcc_s: the process's own unwinder is borrowed when there is TLS work (runtime/unwinder.cpp). */
TEST(Abi, DoesNotNeedOpenSslOrTheCxxRuntime)
{
	const std::string dynamic = output({ "readelf", "-d", shimPath() });
	ASSERT_NE(dynamic.find("NEEDED"), std::string::npos);
	EXPECT_EQ(dynamic.find("libssl"), std::string::npos) << dynamic;
	EXPECT_EQ(dynamic.find("libcrypto"), std::string::npos) << dynamic;
	EXPECT_EQ(dynamic.find("libstdc++"), std::string::npos) << dynamic;
	EXPECT_EQ(dynamic.find("libgcc_s"), std::string::npos) << dynamic;
}

TEST(Abi, LoadsNeitherOpenSslNorTheCxxRuntimeIntoProgramsWithout)
{
	SKIP_IN_SANITIZER_BUILD();
	int status = -1;
	std::string errors;
	output({ "sh", "-c", "true" }, shimEnv(), &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(errors, "");

	const std::string maps = output({ "cat", "/proc/self/maps" }, shimEnv(), &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(errors, "");
	EXPECT_NE(maps.find("libtlstune.so"), std::string::npos) << "the preload took effect";
	EXPECT_EQ(maps.find("libssl"), std::string::npos);
	EXPECT_EQ(maps.find("libcrypto"), std::string::npos);
	EXPECT_EQ(maps.find("libgcc_s"), std::string::npos) << maps;
}

/*
 * Issue 24: the state is built by the first call that needs it. /bin/true makes no
 * interposed call, and cat's read and close of a file find nothing to do: neither says
 * anything at debug level. python's first OpenSSL call sets up, and says so.
 */
TEST(Abi, AProcessThatNeverCallsInSetsNothingUp)
{
	SKIP_IN_SANITIZER_BUILD();
	const std::vector<std::string> env = shimEnv({ "TLSTUNE_LOG=debug", "TLSTUNE_STATS=1" });
	int status = -1;
	std::string errors;
	output({ "/bin/true" }, env, &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(errors, "");

	output({ "/bin/cat", "/dev/null" }, env, &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(errors, "");

	output({ "/usr/bin/python3", "-c", "import ssl; ssl.create_default_context()" }, env, &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(errors.rfind("tlstune: loaded into python3 pid ", 0), 0u) << errors;
}

TEST(Abi, ABadValueIsOneLineAndTheProgramRunsOn)
{
	SKIP_IN_SANITIZER_BUILD();
	int status = -1;
	std::string errors;
	/* sh and cat load the library too; python alone uses OpenSSL, and says it once. */
	const std::string out = output({ "sh", "-c",
					 "echo ran | cat; python3 -c 'import ssl; ssl.create_default_context()'" },
				       shimEnv({ "TLSTUNE_READ_BUFFER=lots" }), &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(out, "ran\n");
	EXPECT_EQ(errors, "tlstune: TLSTUNE_READ_BUFFER=lots is not valid: expected bytes from 16KiB "
			  "to 1MiB, suffix K, KiB, M or MiB; using the default, 65652\n");
}

TEST(Abi, VerboseShowsTheEffectiveSettingsOnceInTheProcessThatUsesOpenSsl)
{
	SKIP_IN_SANITIZER_BUILD();
	int status = -1;
	std::string errors;
	/* sh loads the library too, but only python uses OpenSSL (two contexts): one line, python's. */
	output({ "sh", "-c",
		 "python3 -c 'import ssl; ssl.create_default_context(); ssl.create_default_context()'" },
	       shimEnv({ "TLSTUNE_VERBOSE=1", "TLSTUNE_READ_BUFFER=32K" }), &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(errors.rfind("tlstune: version " TLSTUNE_VERSION ", python3 pid ", 0), 0u) << errors;
	EXPECT_NE(errors.find("read_ahead=on read_buffer=32768 readiness=on"), std::string::npos) << errors;
	EXPECT_EQ(std::count(errors.begin(), errors.end(), '\n'), 1) << errors;

	output({ "sh", "-c", "true" }, shimEnv({ "TLSTUNE_VERBOSE=1" }), &status, &errors);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(errors, "") << "no OpenSSL, no settings line";
}

TEST(Abi, RealErrorsComeThroughUnchanged)
{
	SKIP_IN_SANITIZER_BUILD();
	/* poll on a closed fd reports POLLNVAL, read on it EBADF: as without the shim. */
	int status = -1;
	const std::string script =
		"import os, select\n"
		"p = select.poll(); p.register(97, select.POLLIN)\n"
		"print(p.poll(0))\n"
		"try:\n    os.read(97, 1)\nexcept OSError as e:\n    print(e.errno)\n";
	const std::string plain = output({ "/usr/bin/python3", "-c", script }, {}, &status);
	ASSERT_EQ(status, 0);
	EXPECT_EQ(output({ "/usr/bin/python3", "-c", script }, shimEnv(), &status), plain);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(plain, "[(97, 32)]\n9\n");
}
