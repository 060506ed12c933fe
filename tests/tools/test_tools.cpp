/* The user's tools: the tlstune wrapper, tlstune-check, the bench and tools/evidence. */

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "core/config.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

const std::string kWrapper = std::string(TLSTUNE_TOOLS_DIR) + "/tlstune";
const std::string kCheck = std::string(TLSTUNE_TOOLS_DIR) + "/tlstune-check";

Captured wrapper(const std::vector<std::string> &args, const std::vector<std::string> &env = {})
{
	Command command;
	command.argv = { kWrapper };
	command.argv.insert(command.argv.end(), args.begin(), args.end());
	command.env = env;
	return runCaptured(command, 60000);
}

} /* namespace */

TEST(Wrapper, HelpAndVersion)
{
	Captured version = wrapper({ "--version" });
	EXPECT_EQ(version.status, 0);
	EXPECT_EQ(version.out, "tlstune " TLSTUNE_VERSION "\n");
	Captured help = wrapper({ "--help" });
	EXPECT_EQ(help.status, 0);
	EXPECT_NE(help.out.find("Usage: tlstune [OPTION]... [--] COMMAND [ARG]..."), std::string::npos);
}

TEST(Wrapper, ItsOwnErrorsAre125AndTheCommandsAre126And127)
{
	Captured none = wrapper({});
	EXPECT_EQ(none.status, 125);
	EXPECT_NE(none.err.find("tlstune: no command given"), std::string::npos) << none.err;

	Captured unknown = wrapper({ "--frobnicate", "true" });
	EXPECT_EQ(unknown.status, 125);
	EXPECT_NE(unknown.err.find("unknown option '--frobnicate'"), std::string::npos) << unknown.err;

	Captured missing = wrapper({ "tlstune-no-such-command" });
	EXPECT_EQ(missing.status, 127);
	EXPECT_EQ(missing.err, "tlstune: tlstune-no-such-command: command not found\n");

	Captured notExecutable = wrapper({ TLSTUNE_SHIM_MAP });
	EXPECT_EQ(notExecutable.status, 126);
	EXPECT_NE(notExecutable.err.find("not an executable file"), std::string::npos);
}

TEST(Wrapper, OptionsBecomeVariablesAndTheStatusPassesThrough)
{
	SKIP_IN_SANITIZER_BUILD();
	Captured r = wrapper({ "--read-buffer=32K", "--no-read-ahead", "--no-ca-cache", "--no-coalesce",
			     "--stats", "--log=debug", "--", "sh", "-c",
			     "env | grep ^TLSTUNE_ | sort; exit 3" });
	EXPECT_EQ(r.status, 3);
	EXPECT_EQ(r.out, "TLSTUNE_CA_CACHE=off\nTLSTUNE_COALESCE=off\nTLSTUNE_LOG=debug\n"
			 "TLSTUNE_READ_AHEAD=off\nTLSTUNE_READ_BUFFER=32K\nTLSTUNE_STATS=1\n");

	Captured verbose = wrapper({ "--verbose", "true" });
	EXPECT_EQ(verbose.status, 0);
	EXPECT_NE(verbose.err.find("tlstune: version " TLSTUNE_VERSION), std::string::npos)
		<< "the library is really loaded: " << verbose.err;
}

TEST(Wrapper, AddsTheLibraryToLdPreloadOnceAndLast)
{
	SKIP_IN_SANITIZER_BUILD();
	const std::string print = "echo \"$LD_PRELOAD\"";
	EXPECT_EQ(wrapper({ "sh", "-c", print }).out, shimPath() + "\n");
	/* The loader complains about the missing other library on stderr; the order is ours. */
	EXPECT_EQ(wrapper({ "sh", "-c", print }, { "LD_PRELOAD=libother.so" }).out,
		  "libother.so:" + shimPath() + "\n");
	EXPECT_EQ(wrapper({ "sh", "-c", print }, { "LD_PRELOAD=libother.so " + shimPath() }).out,
		  "libother.so " + shimPath() + "\n");
	EXPECT_EQ(wrapper({ "sh", "-c", print }, { "LD_PRELOAD=" + shimPath() + ":libother.so" }).out,
		  shimPath() + ":libother.so\n");
}

TEST(Check, ShowsTheHeaderReadsGoAway)
{
	ExampleServer server({ "--send", std::to_string(4ull << 20), "--tls", "1.2", "--connections", "2" });
	Command command;
	command.argv = { kCheck, "--library", preloadValue(), "--", examplePath("bulk_download"),
			 "127.0.0.1", server.portText() };
	if (sanitizerBuild())
		command.env.push_back("ASAN_OPTIONS=detect_leaks=0");
	std::string out;
	ASSERT_EQ(run(command, 120000, &out), 0) << out;

	EXPECT_NE(out.find("TCP peer 127.0.0.1:" + server.portText()), std::string::npos) << out;
	std::string::size_type headers = out.find("5-byte header reads");
	ASSERT_NE(headers, std::string::npos) << out;
	const std::string line = out.substr(headers, out.find('\n', headers) - headers);
	std::istringstream fields(line.substr(std::string("5-byte header reads").size()));
	unsigned long without = 0, with = 1;
	fields >> without >> with;
	EXPECT_GT(without, 200u) << line;
	EXPECT_LE(with, handshakeHeaderReads(1)) << line;
	EXPECT_NE(line.find("<- record header, then body"), std::string::npos) << line;
	EXPECT_NE(out.find("65652 x"), std::string::npos) << "four whole records per read\n" << out;
}

TEST(Install, PutsTheLibraryToolsAndManPageInPlace)
{
	TempDir dest;
	Command install;
	install.argv = { "meson", "install", "-C", TLSTUNE_BUILD_ROOT, "--destdir", dest.path(),
			 "--no-rebuild", "--quiet" };
	install.stderrPath = dest.file("install.log");
	ASSERT_EQ(run(install, 120000), 0) << readFile(install.stderrPath);

	std::string found;
	Command list;
	list.argv = { "find", dest.path(), "-type", "f", "-printf", "%P\n" };
	run(list, 60000, &found);
	for (const char *file : { "bin/tlstune", "bin/tlstune-check", "/libtlstune.so", "man1/tlstune.1" })
		EXPECT_NE(found.find(file), std::string::npos) << file << " not in\n" << found;
	EXPECT_EQ(found.find("test-"), std::string::npos) << "tests are not installed\n" << found;

	/* The page names every variable the library reads. */
	std::string page;
	Command man;
	man.argv = { "find", dest.path(), "-name", "tlstune.1", "-exec", "cat", "{}", ";" };
	run(man, 60000, &page);
	for (const tlstune::OptionInfo &option : tlstune::optionTable())
		EXPECT_NE(page.find(std::string(".B ") + option.name + "\n"), std::string::npos) << option.name;
}

TEST(Bench, HelpIsUsageOnStdoutAndSuccess)
{
	Command bench;
	bench.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/tlstune-bench", "--help" };
	const Captured help = runCaptured(bench, 30000);
	EXPECT_EQ(help.status, 0);
	EXPECT_EQ(help.out.rfind("usage: tools/tlstune-bench", 0), 0u) << help.out;
	EXPECT_EQ(help.err, "");

	bench.argv[1] = "--no-such-option";
	const Captured wrong = runCaptured(bench, 30000);
	EXPECT_EQ(wrong.status, 2);
	EXPECT_EQ(wrong.out, "");
	EXPECT_EQ(wrong.err.rfind("usage: tools/tlstune-bench", 0), 0u) << wrong.err;
}

TEST(Bench, QuickRunsEndToEnd)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir out;
	Command bench;
	bench.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/tlstune-bench", "--quick", "--out",
		       out.path(), "--build", TLSTUNE_BUILD_ROOT };
	bench.stderrPath = out.file("progress");
	std::string report;
	ASSERT_EQ(run(bench, 300000, &report), 0) << readFile(bench.stderrPath);

	EXPECT_EQ(readFile(out.file("report.md")), report);
	for (const char *part : { "## Download time", "### TLS 1.2", "### TLS 1.3", "x without-1.3",
				  "+ with-1.3", "Per pair, with/without: median ratio",
				  "## Read buffer sweep", "| off (no read-ahead) |", "| 4 x 16,413 + 3 |",
				  "| 8 x 16,413 + 3 |", "## CA cache",
				  "| python ssl.create_default_context() | 10 |",
				  "| C: GET, new context and connection | 10 |",
				  "## Write coalescing", "encrypted and dropped (null BIO, no shim)",
				  "## Event-driven server", "| 500 idle TLS connections, 100 clients upload",
				  "| reverse proxy, upstream stalled for 3 s mid-upload" })
		EXPECT_NE(report.find(part), std::string::npos) << part << " not in\n" << report;
	for (const char *chart : { "ab.svg", "sweep.svg" })
		EXPECT_NE(readFile(out.file(chart)).find("<svg"), std::string::npos) << chart;
}

TEST(Evidence, SumsUpCasesFaultsBytesAndFuzzRunsFromTheLogs)
{
	/* Logs shaped as meson writes them: gtest's suites renamed "project.project:suite / test.Suite". */
	TempDir root;
	std::filesystem::create_directories(root.file("build/meson-logs"));
	std::filesystem::create_directories(root.file("build-fuzz/meson-logs"));
	writeFile(root.file("build/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune.tlstune:programs / programs-faults.Faults\" "
		  "timestamp=\"2026-01-02T03:04:05\">"
		  "<testcase name=\"Reset\" status=\"run\"><properties>"
		  "<property name=\"fault\" value=\"the peer resets\"/>"
		  "<property name=\"bytes_checked\" value=\"3145728\"/></properties></testcase>"
		  "<testcase name=\"Skipped\" status=\"run\"><skipped/></testcase>"
		  "<testcase name=\"Broken\" status=\"run\"><failure/><properties>"
		  "<property name=\"bytes_checked\" value=\"5\"/></properties></testcase>"
		  "</testsuite></testsuites>");
	writeFile(root.file("build-fuzz/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune\"><testcase name=\"fuzz-config\">"
		  "<system-err>#2 INITED\nDone 1234567 runs in 31 second(s)</system-err></testcase>"
		  "</testsuite></testsuites>");
	writeFile(root.file("README.md"), "before\n<!-- evidence: begin -->\nold\n<!-- evidence: end -->\nafter\n");

	Command evidence;
	evidence.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/evidence", "--root", root.path(),
			  "--update", root.file("README.md") };
	const Captured run = runCaptured(evidence, 60000);
	ASSERT_EQ(run.status, 0) << run.err;
	const std::string readme = readFile(root.file("README.md"));
	for (const char *part :
	     { "before\n<!-- evidence: begin -->\nRun of 2026-01-02, cases per test binary and build tree:\n",
	       "| `programs-faults` | signals, fds above FD_SETSIZE, fork, library constructors, resets, exit paths | "
	       "1 passed, 1 failed, 1 skipped | not run | not run |",
	       "3 MiB in 1 passing cases; bytes lost, duplicated or reordered: 5 ",
	       "| the peer resets | `programs-faults` Faults.Reset | passed |",
	       "| `fuzz-config` | 1,234,567 in 31 s | passed |",
	       "<!-- evidence: end -->\nafter\n" })
		EXPECT_NE(readme.find(part), std::string::npos) << part << " not in\n" << readme;
	EXPECT_EQ(readme.find("old"), std::string::npos) << readme;
}

TEST(Evidence, WritesWhatPassedAgainstEachOpenSslVersion)
{
	TempDir root;
	for (const char *tree : { "build", "build-trixie" })
		std::filesystem::create_directories(root.file(std::string(tree) + "/meson-logs"));
	writeFile(root.file("build/meson-logs/meson-log.txt"),
		  "Run-time dependency openssl found: YES 3.0.19\n");
	writeFile(root.file("build/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune.tlstune:unit / unit-ca-cache.Cache\">"
		  "<testcase name=\"Parses\" status=\"run\"/></testsuite></testsuites>");
	writeFile(root.file("build-trixie/meson-logs/meson-log.txt"),
		  "Run-time dependency openssl found: YES 3.5.9\n");
	writeFile(root.file("build-trixie/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune.tlstune:programs / programs-ca-cache.CaCache\">"
		  "<testcase name=\"CurlAnswersTheSame\" status=\"run\"/>"
		  "<testcase name=\"SocatAndStunnelVerifyTheSame\" status=\"run\"><failure/></testcase>"
		  "</testsuite></testsuites>");
	writeFile(root.file("README.md"), "<!-- evidence: begin -->\n<!-- evidence: end -->\n"
		  "<!-- compatibility: begin -->\nold\n<!-- compatibility: end -->\nafter\n");

	Command evidence;
	evidence.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/evidence", "--root", root.path(),
			  "--update", root.file("README.md") };
	const Captured run = runCaptured(evidence, 60000);
	ASSERT_EQ(run.status, 0) << run.err;
	const std::string readme = readFile(root.file("README.md"));
	for (const char *part :
	     { "| ? | Debian 11's libssl1.1 and libssl-dev (`build-openssl-1.1.1`) | not run | not run |",
	       "| 3.0.19 | Debian 12 (`build`) | - | 1 passed | - | - | - | - | - | - |\n",
	       "| 3.5.9 | Debian 13 (a debootstrap root) (`build-trixie`) | - | 1 passed, 1 failed | - | "
	       "1 passed | - | - | 1 failed | 1 failed |\n",
	       "<!-- compatibility: end -->\nafter\n" })
		EXPECT_NE(readme.find(part), std::string::npos) << part << " not in\n" << readme;
	EXPECT_EQ(readme.find("old"), std::string::npos) << readme;
}
