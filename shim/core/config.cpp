#include "config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

namespace tlstune {

namespace {

constexpr std::size_t kMinReadBuffer = 16 * 1024;
constexpr std::size_t kMaxReadBuffer = 1024 * 1024;
constexpr unsigned long kMaxDuration = 365ul * 24 * 60 * 60;
constexpr std::size_t kMinCoalesceLimit = 1024;
constexpr std::size_t kMaxCoalesceLimit = kDefaultCoalesceLimit;
constexpr unsigned long kMinDelayUs = 10;
constexpr unsigned long kMaxDelayUs = 100 * 1000;

enum class Kind { Bool, Size, Limit, Level, Duration, Delay, Coalesce };

struct Option {
	OptionInfo info;
	Kind kind;
	bool Config::*flag;
	std::size_t Config::*size;
	LogLevel Config::*level;
	unsigned long Config::*seconds; /* or microseconds, for a Delay */
};

const Option kOptions[] = {
	{ { "TLSTUNE_DISABLE", "1/true/yes/on or 0/false/no/off", "off",
	    "Turn every feature off: each call goes straight to OpenSSL or libc." },
	  Kind::Bool, &Config::disable, nullptr, nullptr, nullptr },
	{ { "TLSTUNE_READ_AHEAD", "1/true/yes/on or 0/false/no/off", "on",
	    "Read ahead of each connection tlstune follows (made through its SSL_new, read through "
	    "its SSL_read): one read of the socket takes several records." },
	  Kind::Bool, &Config::readAhead, nullptr, nullptr, nullptr },
	{ { "TLSTUNE_READ_BUFFER", "bytes from 16KiB to 1MiB, suffix K, KiB, M or MiB", "65652",
	    "How much one read of a client's socket takes: the default is four whole 16 KiB TLS records "
	    "(a server's takes one unless this is set)." },
	  Kind::Size, nullptr, &Config::readBuffer, nullptr, nullptr },
	{ { "TLSTUNE_READINESS", "1/true/yes/on or 0/false/no/off", "on",
	    "Make poll/select/epoll report a connection readable while tlstune holds bytes it read "
	    "ahead. Turning it off brings back the read-ahead stalls; it exists to show them." },
	  Kind::Bool, &Config::readiness, nullptr, nullptr, nullptr },
	{ { "TLSTUNE_CA_CACHE", "1/true/yes/on or 0/false/no/off", "on",
	    "Index each CA file once per process (its bytes decide: a file whose bytes changed "
	    "is indexed again) and give every store certificates of its own from that index, "
	    "parsed when the store first needs them. OpenSSL 3.0 and 3.5; elsewhere OpenSSL "
	    "loads CA files itself." },
	  Kind::Bool, &Config::caCache, nullptr, nullptr, nullptr },
	{ { "TLSTUNE_CA_CACHE_TTL", "seconds from 0 to 365 days, suffix s, m, h or d", "24h",
	    "Index a cached CA file again once its entry is this old; 0 indexes every time." },
	  Kind::Duration, nullptr, nullptr, nullptr, &Config::caCacheTtl },
	{ { "TLSTUNE_CA_LAZY", "1/true/yes/on or 0/false/no/off", "on",
	    "Off turns the CA cache off as TLSTUNE_CA_CACHE=off does (kept for older settings: "
	    "the cache has no eager mode any more)." },
	  Kind::Bool, &Config::caLazy, nullptr, nullptr, nullptr },
	{ { "TLSTUNE_COALESCE", "records, syscalls or off; 1/true/yes/on mean records, 0/false/no/off off",
	    "records",
	    "records: gather the plaintext of small SSL_write calls into few records, sent in "
	    "few syscalls; syscalls: only send their records in few syscalls. Each byte goes "
	    "out within TLSTUNE_COALESCE_DELAY." },
	  Kind::Coalesce, nullptr, nullptr, nullptr, nullptr },
	{ { "TLSTUNE_COALESCE_LIMIT", "bytes from 1KiB to 16KiB (one record), suffix K or KiB", "16K",
	    "Bytes held per connection at most; a write this large goes out directly." },
	  Kind::Limit, nullptr, &Config::coalesceLimit, nullptr, nullptr },
	{ { "TLSTUNE_COALESCE_DELAY", "microseconds from 10 to 100000, suffix us or ms", "200us",
	    "How long a written byte may wait in the shim at most, whatever the program does." },
	  Kind::Delay, nullptr, nullptr, nullptr, &Config::coalesceDelayUs },
	{ { "TLSTUNE_VERBOSE", "1/true/yes/on or 0/false/no/off", "off",
	    "Print the effective settings once on stderr, at the process's first OpenSSL call." },
	  Kind::Bool, &Config::verbose, nullptr, nullptr, nullptr },
	{ { "TLSTUNE_LOG", "off, error, warn, info or debug", "warn",
	    "Which messages reach stderr: info adds contexts tuned and connections followed, debug more." },
	  Kind::Level, nullptr, nullptr, &Config::logLevel, nullptr },
	{ { "TLSTUNE_STATS", "1/true/yes/on or 0/false/no/off", "off",
	    "Print one summary line on stderr at exit." },
	  Kind::Bool, &Config::stats, nullptr, nullptr, nullptr },
};

std::string lower(std::string text)
{
	std::transform(text.begin(), text.end(), text.begin(),
		       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
	return text;
}

const char *levelName(LogLevel level)
{
	switch (level) {
	case LogLevel::Off: return "off";
	case LogLevel::Error: return "error";
	case LogLevel::Warn: return "warn";
	case LogLevel::Info: return "info";
	case LogLevel::Debug: return "debug";
	}
	return "?";
}

struct Unit {
	const char *suffix; /* lower case; "" for none */
	unsigned long long multiplier;
};

/* Up to 12 digits and one of units' suffixes, any case; false for anything else. */
bool parseScaled(const std::string &text, std::initializer_list<Unit> units,
		 unsigned long long *value)
{
	std::size_t digits = 0;
	while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
		digits++;
	if (digits == 0 || digits > 12)
		return false;
	const std::string suffix = lower(text.substr(digits));
	for (const Unit &unit : units) {
		if (suffix != unit.suffix)
			continue;
		/* 12 digits times 2^20 stays far below 2^64. */
		*value = std::strtoull(text.substr(0, digits).c_str(), nullptr, 10) * unit.multiplier;
		return true;
	}
	return false;
}

/*
 * A value as the one-line error shows it: control and non-ASCII bytes as \xNN, and at
 * most 64 bytes of it, so that whatever is in the environment stays one short line.
 */
std::string printable(const std::string &value)
{
	constexpr std::size_t kShown = 64;
	std::string out;
	for (std::size_t i = 0; i < value.size() && i < kShown; i++) {
		const unsigned char c = static_cast<unsigned char>(value[i]);
		if (c >= 0x20 && c < 0x7f) {
			out += static_cast<char>(c);
			continue;
		}
		static const char kHex[] = "0123456789abcdef";
		out += "\\x";
		out += kHex[c >> 4];
		out += kHex[c & 15];
	}
	if (value.size() > kShown)
		out += "...";
	return out;
}

} /* namespace */

const std::vector<OptionInfo> &optionTable()
{
	static const std::vector<OptionInfo> table = [] {
		std::vector<OptionInfo> rows;
		for (const Option &option : kOptions)
			rows.push_back(option.info);
		return rows;
	}();
	return table;
}

bool parseBool(const std::string &text, bool *value)
{
	const std::string word = lower(text);
	if (word == "1" || word == "true" || word == "yes" || word == "on") {
		*value = true;
		return true;
	}
	if (word == "0" || word == "false" || word == "no" || word == "off") {
		*value = false;
		return true;
	}
	return false;
}

bool parseSize(const std::string &text, std::size_t *value)
{
	return parseSize(text, kMinReadBuffer, kMaxReadBuffer, value);
}

bool parseSize(const std::string &text, std::size_t min, std::size_t max, std::size_t *value)
{
	unsigned long long bytes = 0;
	if (!parseScaled(text, { { "", 1 }, { "b", 1 }, { "k", 1024 }, { "kib", 1024 },
				 { "m", 1024 * 1024 }, { "mib", 1024 * 1024 } }, &bytes) ||
	    bytes < min || bytes > max)
		return false;
	*value = static_cast<std::size_t>(bytes);
	return true;
}

bool parseDuration(const std::string &text, unsigned long *seconds)
{
	unsigned long long value = 0;
	if (!parseScaled(text, { { "", 1 }, { "s", 1 }, { "m", 60 }, { "h", 3600 }, { "d", 86400 } },
			 &value) ||
	    value > kMaxDuration)
		return false;
	*seconds = static_cast<unsigned long>(value);
	return true;
}

bool parseDelay(const std::string &text, unsigned long *microseconds)
{
	unsigned long long value = 0;
	if (!parseScaled(text, { { "", 1 }, { "us", 1 }, { "ms", 1000 } }, &value) ||
	    value < kMinDelayUs || value > kMaxDelayUs)
		return false;
	*microseconds = static_cast<unsigned long>(value);
	return true;
}

bool parseCoalesceMode(const std::string &text, CoalesceMode *value)
{
	const std::string word = lower(text);
	bool on = false;
	if (word == "records")
		*value = CoalesceMode::Records;
	else if (word == "syscalls")
		*value = CoalesceMode::Syscalls;
	else if (parseBool(word, &on))
		*value = on ? CoalesceMode::Records : CoalesceMode::Off;
	else
		return false;
	return true;
}

bool parseLogLevel(const std::string &text, LogLevel *value)
{
	static const LogLevel levels[] = { LogLevel::Off, LogLevel::Error, LogLevel::Warn,
					   LogLevel::Info, LogLevel::Debug };
	const std::string word = lower(text);
	for (LogLevel level : levels) {
		if (word == levelName(level)) {
			*value = level;
			return true;
		}
	}
	return false;
}

ParsedConfig parseConfig(EnvLookup lookup, void *context)
{
	ParsedConfig parsed;
	Config &config = parsed.config;

	for (const Option &option : kOptions) {
		const char *raw = lookup(option.info.name, context);
		/* Set but empty counts as unset, as for most Unix tools. */
		if (!raw || !*raw)
			continue;

		const std::string text = raw;
		bool ok = false;
		switch (option.kind) {
		case Kind::Bool:
			ok = parseBool(text, &(config.*option.flag));
			break;
		case Kind::Size:
			ok = parseSize(text, &(config.*option.size));
			break;
		case Kind::Limit:
			ok = parseSize(text, kMinCoalesceLimit, kMaxCoalesceLimit, &(config.*option.size));
			break;
		case Kind::Level:
			ok = parseLogLevel(text, &(config.*option.level));
			break;
		case Kind::Duration:
			ok = parseDuration(text, &(config.*option.seconds));
			break;
		case Kind::Delay:
			ok = parseDelay(text, &(config.*option.seconds));
			break;
		case Kind::Coalesce:
			ok = parseCoalesceMode(text, &config.coalesce);
			break;
		}
		if (ok && option.kind == Kind::Size && option.size == &Config::readBuffer)
			config.readBufferSet = true;
		if (!ok)
			parsed.errors.push_back(std::string(option.info.name) + "=" + printable(text) +
						" is not valid: expected " + option.info.accepted +
						"; using the default, " + option.info.defaultValue);
	}
	return parsed;
}

std::string describeConfig(const Config &config)
{
	auto onOff = [](bool on) { return on ? "on" : "off"; };
	auto mode = [](CoalesceMode m) {
		return m == CoalesceMode::Records ? "records" : m == CoalesceMode::Syscalls ? "syscalls" : "off";
	};
	if (config.disable)
		return "disabled";
	return std::string("read_ahead=") + onOff(config.readAhead) +
	       " read_buffer=" + std::to_string(config.readBuffer) +
	       " readiness=" + onOff(config.readiness) +
	       " ca_cache=" + onOff(config.caCache) +
	       " ca_cache_ttl=" + std::to_string(config.caCacheTtl) +
	       " ca_lazy=" + onOff(config.caLazy) +
	       " coalesce=" + mode(config.coalesce) +
	       " coalesce_limit=" + std::to_string(config.coalesceLimit) +
	       " coalesce_delay_us=" + std::to_string(config.coalesceDelayUs) +
	       " stats=" + onOff(config.stats) +
	       " log=" + levelName(config.logLevel);
}

} /* namespace tlstune */
