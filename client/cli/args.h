// Command-line parsing of the kvatlas CLI, kept apart from main.cc so that it is unit
// tested: flags, lists of tokens and hashes, and JSONL event lines. Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvatlas/common/events.h"
#include "kvatlas/common/result.h"

namespace kvatlas::cli {

struct Args {
  std::string command;                  // the first non-flag argument
  std::vector<std::string> positional;  // the non-flag arguments after it
  std::map<std::string, std::string> flags;
  // Problems ParseArgs met, reported by CheckFlags once the command's flags are known (a
  // typo'd last flag is "unknown", not "short of a value"): the first value flag given
  // without its value, and the first switch given one ("--json=yes").
  std::optional<std::string> missing_value;
  std::optional<std::string> switch_with_value;

  std::optional<std::string> Flag(const std::string& name) const;
  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  // kInvalidArgument naming, in this order: the first flag that is neither global nor in
  // `allowed` ("lookup: unknown flag --modle"), a switch given a value, a flag without its
  // value.
  [[nodiscard]] Status CheckFlags(const std::vector<std::string>& allowed) const;
};

// Whether the flag `name` is a switch (takes no value): --json, --conductor, --tls,
// --progress, --help, --version. Every other flag takes one.
[[nodiscard]] bool IsSwitch(std::string_view name);
// The flags every command takes (--server, --timeout-ms, --token, the TLS flags, --help).
[[nodiscard]] const std::vector<std::string>& GlobalFlags();

// "--name value", "--name=value", the switches (IsSwitch) and -h (--help), anywhere on the
// line. A value flag takes the next argument unless that is another "--flag"; problems
// are recorded in the Args (see there), not reported here.
[[nodiscard]] Args ParseArgs(int argc, const char* const* argv);

// The access token: --token, else $KVATLAS_TOKEN, else "" (none).
[[nodiscard]] std::string TokenFrom(const Args& args);

// The Authorization header of REST requests carrying `token` (none when it is empty).
[[nodiscard]] std::vector<std::pair<std::string, std::string>> AuthHeaders(
    const std::string& token);

// TLS of the CLI's connections (both protocols): --ca FILE, --cert FILE, --key FILE, each
// else $KVATLAS_CA, $KVATLAS_CERT, $KVATLAS_KEY, and the --tls switch. TLS is on when any of
// them is given; without a CA file the system's trust store verifies the server.
struct TlsFlags {
  bool enabled = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};
// Reads the flags and the environment. kInvalidArgument for --cert without --key or the
// reverse.
[[nodiscard]] Result<TlsFlags> ParseTlsFlags(const Args& args);

// "host:port" or "[v6]:port" → (host, port); nullopt when malformed.
[[nodiscard]] std::optional<std::pair<std::string, int>> SplitHostPort(std::string_view address);

// The address of the binary protocol: --server, else $KVATLAS_SERVER, else 127.0.0.1:7071.
// The address of the REST API: --http, else $KVATLAS_HTTP, else 127.0.0.1:7070.
// Both are HOST:PORT or [IPv6]:PORT; kInvalidArgument naming the flag or variable for
// anything else, and saying so for a URL ("http://...": no scheme).
[[nodiscard]] Result<std::string> ServerAddress(const Args& args);
[[nodiscard]] Result<std::string> RestAddress(const Args& args);

// A decimal u32; kInvalidArgument naming `what` otherwise.
[[nodiscard]] Result<uint32_t> ParseU32(std::string_view text, std::string_view what);
// "1,2,3" (spaces allowed); kInvalidArgument naming the bad item.
[[nodiscard]] Result<std::vector<uint32_t>> ParseTokenList(std::string_view text);
// "h1,h2" with each hash decimal, negative decimal or 0x-hex (as in the REST API).
[[nodiscard]] Result<std::vector<uint64_t>> ParseHashList(std::string_view text);

// One line of a JSONL event file: an event object, or an array of them. Empty lines give no
// events. kInvalidArgument with the field path inside the line ("block_size: ...").
[[nodiscard]] Result<std::vector<BlockEvent>> DecodeEventLine(std::string_view line);

}  // namespace kvatlas::cli
