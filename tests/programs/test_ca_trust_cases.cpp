/*
 * Programs that look at or change what a CA file put into their stores (issue 21):
 * examples/ca_trust_cases run with and without the shim print the same. Each case once
 * widened trust, served a removed root, hung or was killed with the shim: the line it
 * must print (what OpenSSL alone prints) is checked too, so a case that stopped testing
 * what it names fails. Where the CA cache runs (OpenSSL 3.0 and 3.5), the stats line says
 * whether the file went the lazy way, as each case intends.
 */

#include <gtest/gtest.h>

#include <openssl/crypto.h>

#include <cstdlib>

#include "process.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr int kTimeoutMs = 60000;

struct TrustCase {
	const char *name;
	const char *mustPrint;
	/* Where the cache runs: 1 the file is indexed, 0 OpenSSL loads it alone, -1 either. */
	int indexed;
	/* About 3.0's providers: run on make-pki's files, which it writes in a process of its own. */
	bool providers = false;
};

const TrustCase kCases[] = {
	{ "reject-add", "context 2 verify 1 code 0 (ok)", 1 },
	{ "trust-add", "context 2 verify 1 code 0 (ok)", 1 },
	{ "reject-clear", "context 2 verify 0 code 28 (certificate rejected)", 0 },
	{ "alias", "context 2 objects 3\n", 1 },
	{ "chain-reject", "context 2 verify 1 code 0 (ok)", 1 },
	{ "rewrite-mmap", "after verify 0 code 7 (certificate signature failure)", 1 },
	{ "base-provider", "loaded under base alone verify 0 code 20", 1, true },
	{ "properties", "loaded under unmatched properties verify", -1, true },
	{ "properties-later", "loaded under unmatched properties verify", -1, true },
	/* Loaded lazily, then what decodes changes before the store is looked up, then back. */
	{ "unload-default", "changed back verify 1 code 0 (ok)", 1, true },
	{ "properties-after", "changed back verify 1 code 0 (ok)", 1, true },
	{ "fips-after", "changed back verify 1 code 0 (ok)", 1, true },
	/* On 3.5 the verify after the switch back fails too, with and without (code 7). */
	{ "default-context", "changed back verify", 1, true },
	{ "config-after", "changed back verify 1 code 0 (ok)", 1, true },
	{ "fifo", "fifo verify 1 code 0 (ok)", 0 },
	/* It leaves by _exit, confined: no stats line. */
	{ "seccomp", "confined verify 1 code 0 (ok)", -1 },
	{ "own-lookup", "own lookup verify 1 code 0 (ok)", 1 },
	{ "check-issued", "check_issued sees 3 objects", 1 },
	{ "check-issued-walk", "walk verify 1 code 0 (ok)\nwalk found the valid root A", 1 },
	{ "kept-list", "kept after two loads 3", 1 },
	/* 1.1.1 takes no notice of the lock's failure, and loads. */
	{ "locked-load", "locked load", -1 },
	{ "trailing-bytes", "trailing verify", 0 },
	/*
	 * On 3.0 the second load's comparison cannot make the fingerprints, and leaves its
	 * errors at that load; 3.5's load leaves none, with and without.
	 */
	{ "twins-after", "twins verify", 1 },
};

bool cacheRunsHere()
{
	const unsigned long version = OpenSSL_version_num() >> 20;
	return version == 0x300 || version == 0x305;
}

int indexedCount(const std::string &err)
{
	const std::string::size_type at = err.find("ca_certs_indexed=");
	return at == std::string::npos ? 0 : std::atoi(err.c_str() + at + 17);
}

} /* namespace */

class TrustCases : public ::testing::TestWithParam<TrustCase> {};

TEST_P(TrustCases, PrintTheSameWithAndWithoutTheShim)
{
	const TrustCase &c = GetParam();
	RecordProperty("fault", std::string("ca_trust_cases ") + c.name);
	if (std::string(c.name) == "seccomp")
		SKIP_IN_SANITIZER_BUILD();
	if (c.providers && OpenSSL_version_num() < 0x30000000L)
		GTEST_SKIP() << "providers are 3.0's";
	Captured runs[2];
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		TempDir dir;
		if (c.providers) {
			const Captured made = runProgram({ examplePath("ca_trust_cases"), dir.path(), "make-pki" },
							 false, {}, kTimeoutMs);
			ASSERT_EQ(made.status, 0) << made.err;
		}
		runs[withShim] = runProgram({ examplePath("ca_trust_cases"), dir.path(), c.name }, withShim,
					    withShim ? std::vector<std::string>{ "TLSTUNE_STATS=1" }
						     : std::vector<std::string>{},
					    kTimeoutMs);
	}
	EXPECT_EQ(runs[0].status, 0) << runs[0].err;
	EXPECT_NE(runs[0].out.find(c.mustPrint), std::string::npos) << runs[0].out;
	EXPECT_EQ(runs[1].status, runs[0].status) << runs[1].err;
	EXPECT_EQ(runs[1].out, runs[0].out);
	if (cacheRunsHere() && c.indexed >= 0) {
		EXPECT_EQ(indexedCount(runs[1].err) > 0, c.indexed == 1) << runs[1].err;
	}
}

INSTANTIATE_TEST_SUITE_P(CaCache, TrustCases, ::testing::ValuesIn(kCases),
			 [](const ::testing::TestParamInfo<TrustCase> &info) {
				 std::string name = info.param.name;
				 for (char &ch : name)
					 if (ch == '-')
						 ch = '_';
				 return name;
			 });
