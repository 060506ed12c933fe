/*
 * Python's own TLS test suite (test.test_ssl, from Debian's libpython3.11-testsuite; 3.13's
 * in the Debian 13 leg) run without the shim and with it in every coalescing mode: the
 * same number of tests run, and the same pass and skip. Its tests (185 on Debian 12) each
 * run against a server thread of their own: contexts, handshakes, post-handshake
 * authentication, shutdown, sendfile. regrtest enables none of its resources by default,
 * so the suite's network tests stay off: every connection is to 127.0.0.1.
 */

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <sys/stat.h>

#include "tls_fixture.h"

using namespace testsupport;

namespace {

/*
 * One run takes 35 to 50 s of waiting (3 s of CPU), so the four runs go at once. regrtest's
 * own timeout stops a run that hangs with every thread's traceback printed (the output
 * below shows it); kRunTimeoutMs is the backstop, inside meson's timeout for this test.
 */
constexpr const char *kSuiteTimeoutSeconds = "240";
constexpr int kRunTimeoutMs = 300000;

std::string testSuitePath()
{
	const Captured version = runProgram({ "/usr/bin/python3", "-c",
					      "import sys; print('%d.%d' % sys.version_info[:2])" },
					    false, {}, 60000);
	std::string v = version.out.substr(0, version.out.find('\n'));
	return "/usr/lib/python" + v + "/test/test_ssl.py";
}

std::string tail(const std::string &text)
{
	return text.substr(text.size() > 6000 ? text.size() - 6000 : 0);
}

/* "Ran 185 tests" and "OK (skipped=16)": unittest's summary, without its timing. */
std::string summary(const std::string &output)
{
	std::istringstream lines(output);
	std::string line, ran, result;
	while (std::getline(lines, line)) {
		if (line.rfind("Ran ", 0) == 0)
			ran = line.substr(0, line.find(" in "));
		else if (line.rfind("OK", 0) == 0 || line.rfind("FAILED", 0) == 0)
			result = line;
	}
	return ran + "; " + result;
}

} /* namespace */

TEST(PythonSslSuite, PassesAndSkipsTheSameWithTheShimInEveryMode)
{
	struct stat st;
	if (stat(testSuitePath().c_str(), &st) != 0)
		GTEST_SKIP() << testSuitePath() << " is missing (Debian's libpython3.X-testsuite)";
	const std::vector<std::string> suite = { "/usr/bin/python3", "-m", "test", "test_ssl", "-v",
						  "--timeout", kSuiteTimeoutSeconds };
	/* Started together; each writes to files of its own, read once it has ended. */
	const std::vector<std::string> modes = { "", "syscalls", "records", "off" };
	TempDir dir;
	std::vector<std::unique_ptr<Process>> runs;
	for (size_t i = 0; i < modes.size(); ++i) {
		Command command;
		command.argv = suite;
		command.env = modes[i].empty() ? std::vector<std::string>{}
					       : shimEnv({ "TLSTUNE_COALESCE=" + modes[i] });
		command.stdoutPath = dir.file(std::to_string(i) + ".out");
		command.stderrPath = dir.file(std::to_string(i) + ".err");
		runs.push_back(std::make_unique<Process>(command));
	}
	std::vector<Captured> results(modes.size());
	for (size_t i = 0; i < modes.size(); ++i) {
		results[i].status = runs[i]->wait(kRunTimeoutMs);
		results[i].out = readFile(dir.file(std::to_string(i) + ".out"));
		results[i].err = readFile(dir.file(std::to_string(i) + ".err"));
	}
	const Captured &without = results[0];
	const std::string expected = summary(without.out + without.err);
	ASSERT_EQ(without.status, 0) << tail(without.out) << tail(without.err);
	ASSERT_NE(expected.find("Ran "), std::string::npos) << without.out;
	for (size_t i = 1; i < modes.size(); ++i) {
		SCOPED_TRACE("TLSTUNE_COALESCE=" + modes[i]);
		EXPECT_EQ(results[i].status, 0) << tail(results[i].out) << tail(results[i].err);
		EXPECT_EQ(summary(results[i].out + results[i].err), expected);
	}
}
