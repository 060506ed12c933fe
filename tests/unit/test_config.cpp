#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/config.h"
#include "environment.h"

using namespace tlstune;

using testsupport::parseEnvironment;

TEST(Config, DefaultsWhenNothingIsSet)
{
	ParsedConfig parsed = parseEnvironment({});
	EXPECT_TRUE(parsed.errors.empty());
	EXPECT_FALSE(parsed.config.disable);
	EXPECT_TRUE(parsed.config.readAhead);
	EXPECT_TRUE(parsed.config.readiness);
	EXPECT_FALSE(parsed.config.stats);
	EXPECT_FALSE(parsed.config.verbose);
	EXPECT_EQ(parsed.config.logLevel, LogLevel::Warn);
	EXPECT_EQ(parsed.config.readBuffer, 4u * 16413u);
}

TEST(Config, TableDefaultsMatchTheConfig)
{
	/* The table is what users read (README, --help): it must say what the code does. */
	const Config defaults;
	for (const OptionInfo &option : optionTable()) {
		ParsedConfig parsed = parseEnvironment({ { option.name, option.defaultValue } });
		EXPECT_TRUE(parsed.errors.empty()) << option.name;
		EXPECT_EQ(describeConfig(parsed.config), describeConfig(defaults)) << option.name;
	}
}

TEST(Config, BooleansTakeTheUsualWords)
{
	for (const char *yes : { "1", "true", "yes", "on", "ON", "True" }) {
		ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_STATS", yes } });
		EXPECT_TRUE(parsed.errors.empty()) << yes;
		EXPECT_TRUE(parsed.config.stats) << yes;
	}
	for (const char *no : { "0", "false", "no", "off", "OFF" }) {
		ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_READ_AHEAD", no } });
		EXPECT_TRUE(parsed.errors.empty()) << no;
		EXPECT_FALSE(parsed.config.readAhead) << no;
	}
}

TEST(Config, SizesTakeBinarySuffixes)
{
	const std::pair<const char *, size_t> cases[] = {
		{ "65536", 65536 }, { "64K", 65536 }, { "64k", 65536 }, { "64KiB", 65536 },
		{ "1M", 1048576 },  { "1MiB", 1048576 }, { "16K", 16384 }, { "20000b", 20000 },
	};
	for (const auto &c : cases) {
		ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_READ_BUFFER", c.first } });
		EXPECT_TRUE(parsed.errors.empty()) << c.first;
		EXPECT_EQ(parsed.config.readBuffer, c.second) << c.first;
	}
}

TEST(Config, DurationsTakeSecondsOrAUnit)
{
	const std::pair<const char *, unsigned long> cases[] = {
		{ "0", 0 }, { "90", 90 }, { "90s", 90 }, { "30m", 1800 },
		{ "24h", 86400 }, { "2D", 172800 }, { "365d", 31536000 },
	};
	for (const auto &c : cases) {
		ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_CA_CACHE_TTL", c.first } });
		EXPECT_TRUE(parsed.errors.empty()) << c.first;
		EXPECT_EQ(parsed.config.caCacheTtl, c.second) << c.first;
	}
	EXPECT_EQ(parseEnvironment({}).config.caCacheTtl, 86400u);
	EXPECT_TRUE(parseEnvironment({}).config.caCache);
}

TEST(Config, CoalescingTakesALimitAndADelay)
{
	ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_COALESCE_LIMIT", "16K" },
						{ "TLSTUNE_COALESCE_DELAY", "1ms" } });
	EXPECT_TRUE(parsed.errors.empty());
	EXPECT_EQ(parsed.config.coalesceLimit, 16384u);
	EXPECT_EQ(parsed.config.coalesceDelayUs, 1000u);
	parsed = parseEnvironment({ { "TLSTUNE_COALESCE_LIMIT", "1K" },
				   { "TLSTUNE_COALESCE_DELAY", "50" } });
	EXPECT_TRUE(parsed.errors.empty());
	EXPECT_EQ(parsed.config.coalesceLimit, 1024u);
	EXPECT_EQ(parsed.config.coalesceDelayUs, 50u);
	EXPECT_EQ(parseEnvironment({}).config.coalesce, CoalesceMode::Records);
}

TEST(Config, CoalescingTakesAModeOrTheOldBooleans)
{
	const std::pair<const char *, CoalesceMode> cases[] = {
		{ "records", CoalesceMode::Records }, { "RECORDS", CoalesceMode::Records },
		{ "syscalls", CoalesceMode::Syscalls }, { "off", CoalesceMode::Off },
		{ "on", CoalesceMode::Records }, { "1", CoalesceMode::Records },
		{ "yes", CoalesceMode::Records }, { "true", CoalesceMode::Records },
		{ "0", CoalesceMode::Off }, { "no", CoalesceMode::Off }, { "false", CoalesceMode::Off },
	};
	for (const auto &c : cases) {
		ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_COALESCE", c.first } });
		EXPECT_TRUE(parsed.errors.empty()) << c.first;
		EXPECT_EQ(parsed.config.coalesce, c.second) << c.first;
	}
}

TEST(Config, EveryKindOfBadValueGetsOneLineAndTheDefault)
{
	RecordProperty("fault", "every kind of bad TLSTUNE_* value");
	const std::pair<const char *, const char *> cases[] = {
		{ "TLSTUNE_READ_BUFFER", "abc" },
		{ "TLSTUNE_READ_BUFFER", "-1" },
		{ "TLSTUNE_READ_BUFFER", "15K" },        /* below the range */
		{ "TLSTUNE_READ_BUFFER", "2M" },         /* above the range */
		{ "TLSTUNE_READ_BUFFER", "64KB" },       /* not a binary suffix */
		{ "TLSTUNE_READ_BUFFER", "64 K" },
		{ "TLSTUNE_READ_BUFFER", "1.5M" },
		{ "TLSTUNE_READ_BUFFER", "99999999999999999999" },
		{ "TLSTUNE_READ_BUFFER", "18446744073709551616K" },
		{ "TLSTUNE_STATS", "maybe" },
		{ "TLSTUNE_STATS", "2" },
		{ "TLSTUNE_DISABLE", "enabled" },
		{ "TLSTUNE_LOG", "loud" },
		{ "TLSTUNE_LOG", "3" },
		{ "TLSTUNE_CA_CACHE", "sometimes" },
		{ "TLSTUNE_CA_CACHE_TTL", "1w" },
		{ "TLSTUNE_CA_CACHE_TTL", "-5" },
		{ "TLSTUNE_CA_CACHE_TTL", "366d" },
		{ "TLSTUNE_CA_CACHE_TTL", "1.5h" },
		{ "TLSTUNE_CA_CACHE_TTL", "9999999999" },
		{ "TLSTUNE_COALESCE", "later" },
		{ "TLSTUNE_COALESCE", "record" },
		{ "TLSTUNE_COALESCE_LIMIT", "512" },      /* below the range */
		{ "TLSTUNE_COALESCE_LIMIT", "2M" },       /* above the range */
		{ "TLSTUNE_COALESCE_DELAY", "5us" },      /* below the range */
		{ "TLSTUNE_COALESCE_DELAY", "1s" },
		{ "TLSTUNE_COALESCE_DELAY", "200 us" },
		{ "TLSTUNE_COALESCE_DELAY", "101ms" },
	};
	const Config defaults;
	for (const auto &c : cases) {
		ParsedConfig parsed = parseEnvironment({ { c.first, c.second } });
		ASSERT_EQ(parsed.errors.size(), 1u) << c.first << "=" << c.second;
		const std::string &error = parsed.errors[0];
		EXPECT_NE(error.find(std::string(c.first) + "=" + c.second), std::string::npos) << error;
		EXPECT_NE(error.find("expected"), std::string::npos) << error;
		EXPECT_NE(error.find("using the default"), std::string::npos) << error;
		EXPECT_EQ(error.find('\n'), std::string::npos) << error;
		EXPECT_EQ(describeConfig(parsed.config), describeConfig(defaults)) << error;
	}
}

TEST(Config, ABadValueIsShownOnOneShortLine)
{
	ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_STATS", "on\nTLSTUNE_FAKE=1\x1b[2J" } });
	ASSERT_EQ(parsed.errors.size(), 1u);
	EXPECT_NE(parsed.errors[0].find("TLSTUNE_STATS=on\\x0aTLSTUNE_FAKE=1\\x1b[2J is not valid"),
		  std::string::npos) << parsed.errors[0];
	parsed = parseEnvironment({ { "TLSTUNE_READ_BUFFER", std::string(10000, '9') } });
	ASSERT_EQ(parsed.errors.size(), 1u);
	EXPECT_LT(parsed.errors[0].size(), 300u);
	EXPECT_NE(parsed.errors[0].find(std::string(64, '9') + "... is not valid"), std::string::npos);
}

TEST(Config, OneBadValueLeavesTheOthersAlone)
{
	ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_READ_BUFFER", "huge" },
						{ "TLSTUNE_STATS", "on" },
						{ "TLSTUNE_LOG", "debug" } });
	EXPECT_EQ(parsed.errors.size(), 1u);
	EXPECT_TRUE(parsed.config.stats);
	EXPECT_EQ(parsed.config.logLevel, LogLevel::Debug);
	EXPECT_EQ(parsed.config.readBuffer, kDefaultReadBuffer);
	EXPECT_FALSE(parsed.config.readBufferSet) << "an invalid value is the default's";
}

/* A server keeps OpenSSL's buffer unless the variable is given, even as the default's value. */
TEST(Config, AReadBufferGivenIsKnownAsGivenEvenAtTheDefault)
{
	EXPECT_FALSE(parseEnvironment({}).config.readBufferSet);
	ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_READ_BUFFER", "65652" } });
	EXPECT_TRUE(parsed.config.readBufferSet);
	EXPECT_EQ(parsed.config.readBuffer, kDefaultReadBuffer);
}

TEST(Config, EmptyMeansUnset)
{
	ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_READ_AHEAD", "" },
						{ "TLSTUNE_READ_BUFFER", "" } });
	EXPECT_TRUE(parsed.errors.empty());
	EXPECT_TRUE(parsed.config.readAhead);
	EXPECT_EQ(parsed.config.readBuffer, kDefaultReadBuffer);
	EXPECT_FALSE(parsed.config.readBufferSet);
}

TEST(Config, DescribeShowsEffectiveSettings)
{
	ParsedConfig parsed = parseEnvironment({ { "TLSTUNE_READ_BUFFER", "32K" },
						{ "TLSTUNE_READINESS", "off" } });
	EXPECT_EQ(describeConfig(parsed.config),
		  "read_ahead=on read_buffer=32768 readiness=off ca_cache=on ca_cache_ttl=86400 ca_lazy=on "
		  "coalesce=records coalesce_limit=16384 coalesce_delay_us=200 stats=off log=warn");
	EXPECT_EQ(describeConfig(parseEnvironment({ { "TLSTUNE_DISABLE", "1" } }).config), "disabled");
}

TEST(Config, TheReadmeShowsTheTable)
{
	std::ifstream in(TLSTUNE_README);
	std::stringstream readme;
	readme << in.rdbuf();
	for (const OptionInfo &option : optionTable()) {
		const std::string row = std::string("| `") + option.name + "` | " + option.accepted + " | " +
					option.defaultValue + " | " + option.help + " |";
		EXPECT_NE(readme.str().find(row), std::string::npos) << "README.md lacks the row\n" << row;
	}
}
