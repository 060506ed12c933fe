#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "log.h"

namespace tlstune {

/*
 * The default read buffer holds four whole TLS records. A full TLS 1.2 AES-GCM record is
 * 16,413 bytes on the wire (5 header + 8 nonce + 16,384 data + 16 tag); curl settled on
 * 4 x 0x401e and the seed (curl-openssl-readahead.txt) found 4 records fastest, 8 slower.
 * Each read of the socket asks for exactly this (SocketCache), so 4 x 16,413 takes four
 * whole records. With a round 65,536 the reads alternated 65,533 + 119 bytes: twice the
 * syscalls for the same data (measured here).
 */
constexpr std::size_t kRecordOnWire = 16413;
constexpr std::size_t kDefaultReadBuffer = 4 * kRecordOnWire;

/* As curl's CURLOPT_CA_CACHE_TIMEOUT. */
constexpr unsigned long kDefaultCaCacheTtl = 24 * 60 * 60;

/*
 * Writes at or above this many bytes are not coalesced: nbdkit found that copying large
 * writes costs more than it saves (seeds/nbdkit-gnutls-cork.txt). It is also the most a
 * connection holds, and at most one record: what the shim has acknowledged and not sent
 * is never more than one record (issue 22), so every way out can hand it over at once.
 */
constexpr std::size_t kDefaultCoalesceLimit = 16 * 1024;
/* How long a written byte may wait in the shim at most, in microseconds. */
constexpr unsigned long kDefaultCoalesceDelayUs = 200;

/*
 * What TLSTUNE_COALESCE merges. Syscalls: the records of small writes go out in few
 * sends. Records: small writes' plaintext is gathered into few records first
 * (issue 14; connections it cannot serve fall back to Syscalls).
 */
enum class CoalesceMode { Off, Syscalls, Records };

struct Config {
	bool disable = false;
	bool readAhead = true;
	std::size_t readBuffer = kDefaultReadBuffer;
	bool readBufferSet = false; /* TLSTUNE_READ_BUFFER was given: servers take it too */
	bool readiness = true;
	bool caCache = true;
	unsigned long caCacheTtl = kDefaultCaCacheTtl; /* seconds */
	bool caLazy = true;
	CoalesceMode coalesce = CoalesceMode::Records;
	std::size_t coalesceLimit = kDefaultCoalesceLimit;
	unsigned long coalesceDelayUs = kDefaultCoalesceDelayUs;
	bool verbose = false;
	bool stats = false;
	LogLevel logLevel = LogLevel::Warn;
};

/* One row per TLSTUNE_* variable: the README and the man page show this table. */
struct OptionInfo {
	const char *name;
	const char *accepted;
	const char *defaultValue;
	const char *help;
};
const std::vector<OptionInfo> &optionTable();

/* Returns the value of an environment variable, or nullptr when it is unset. */
using EnvLookup = const char *(*)(const char *name, void *context);

struct ParsedConfig {
	Config config;
	/* One line per rejected value: variable, value, accepted form, default used. */
	std::vector<std::string> errors;
};

/* Pure: reads only through lookup, so tests feed it a fake environment. */
ParsedConfig parseConfig(EnvLookup lookup, void *context);

/* "read_ahead=on read_buffer=65652 ...": what TLSTUNE_VERBOSE prints. */
std::string describeConfig(const Config &config);

/* Parsers shared with the tests; each returns false for a value it does not accept. */
bool parseBool(const std::string &text, bool *value);
bool parseSize(const std::string &text, std::size_t *value); /* a read buffer length */
bool parseSize(const std::string &text, std::size_t min, std::size_t max, std::size_t *value);
bool parseLogLevel(const std::string &text, LogLevel *value);
/* records, syscalls or off; a boolean's forms too, on meaning syscalls. */
bool parseCoalesceMode(const std::string &text, CoalesceMode *value);
bool parseDuration(const std::string &text, unsigned long *seconds);
bool parseDelay(const std::string &text, unsigned long *microseconds);

} /* namespace tlstune */
