#include "client/cli/args.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "kvatlas/common/json_codec.h"

namespace kvatlas::cli {
namespace {

// Flags every command takes, and flags that take no value.
const std::vector<std::string> kGlobalFlags = {"server", "timeout-ms", "token", "help", "version",
                                               "ca",     "cert",       "key",   "tls"};
const std::vector<std::string_view> kSwitches = {"json", "conductor", "help",
                                                 "tls",  "version",   "progress"};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Calls `item` on every comma-separated, trimmed item of `text`.
template <typename F>
Status ForEachItem(std::string_view text, F&& item) {
  size_t index = 0;
  while (true) {
    const size_t comma = text.find(',');
    KVATLAS_RETURN_IF_ERROR(item(Trim(text.substr(0, comma)), index++));
    if (comma == std::string_view::npos) return Status::Ok();
    text.remove_prefix(comma + 1);
  }
}

// Checks an address flag's value (or its variable's): HOST:PORT or [IPv6]:PORT, no scheme.
// `source` names where it came from, `expected` what it should be.
Result<std::string> CheckAddress(std::string address, const std::string& source,
                                 std::string_view expected) {
  if (address.find("://") != std::string::npos) {
    return Status::InvalidArgument(source + " takes HOST:PORT without a scheme: " +
                                   std::string(expected) + "; got \"" + address + "\"");
  }
  const std::optional<std::pair<std::string, int>> split = SplitHostPort(address);
  if (!split || split->first.empty()) {
    return Status::InvalidArgument(source + " must be HOST:PORT or [IPv6]:PORT (" +
                                   std::string(expected) + "); got \"" + address + "\"");
  }
  if (split->first.find(':') != std::string::npos && address.front() != '[') {
    return Status::InvalidArgument(source + ": an IPv6 address needs brackets, as in [" +
                                   split->first + "]:" + std::to_string(split->second) +
                                   "; got \"" + address + "\"");
  }
  return address;
}

// The flag, else the environment variable (unset or empty: none), else `fallback`.
Result<std::string> AddressFrom(const Args& args, const char* flag, const char* env,
                                const char* fallback, std::string_view expected) {
  if (std::optional<std::string> value = args.Flag(flag)) {
    return CheckAddress(*value, std::string("--") + flag, expected);
  }
  if (const char* from_env = std::getenv(env); from_env != nullptr && from_env[0] != '\0') {
    return CheckAddress(from_env, env, expected);
  }
  return std::string(fallback);
}

}  // namespace

bool IsSwitch(std::string_view name) {
  return std::find(kSwitches.begin(), kSwitches.end(), name) != kSwitches.end();
}

const std::vector<std::string>& GlobalFlags() { return kGlobalFlags; }

std::optional<std::string> Args::Flag(const std::string& name) const {
  const auto it = flags.find(name);
  if (it == flags.end()) return std::nullopt;
  return it->second;
}

Status Args::CheckFlags(const std::vector<std::string>& allowed) const {
  const std::string prefix = command.empty() ? "" : command + ": ";
  for (const auto& [name, value] : flags) {
    if (std::find(kGlobalFlags.begin(), kGlobalFlags.end(), name) == kGlobalFlags.end() &&
        std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return Status::InvalidArgument(prefix + "unknown flag --" + name);
    }
  }
  if (switch_with_value) {
    return Status::InvalidArgument(prefix + "--" + *switch_with_value + " takes no value");
  }
  if (missing_value) {
    return Status::InvalidArgument(prefix + "--" + *missing_value + " needs a value");
  }
  return Status::Ok();
}

Args ParseArgs(int argc, const char* const* argv) {
  Args args;
  const auto is_flag = [](std::string_view arg) { return arg.size() > 2 && arg.starts_with("--"); };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h") {
      args.flags["help"] = "";
    } else if (is_flag(arg)) {
      std::string name(arg.substr(2));
      std::optional<std::string> value;
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
      }
      if (IsSwitch(name)) {
        if (value && !args.switch_with_value) args.switch_with_value = name;
        args.flags[name] = "";
        continue;
      }
      if (!value) {
        if (i + 1 >= argc || is_flag(argv[i + 1])) {
          if (!args.missing_value) args.missing_value = name;
          args.flags[name] = "";
          continue;
        }
        value = argv[++i];
      }
      args.flags[name] = *value;
    } else if (args.command.empty()) {
      args.command = std::string(arg);
    } else {
      args.positional.emplace_back(arg);
    }
  }
  return args;
}

std::string TokenFrom(const Args& args) {
  if (std::optional<std::string> token = args.Flag("token")) return *token;
  const char* env = std::getenv("KVATLAS_TOKEN");
  return env != nullptr ? std::string(env) : std::string();
}

std::vector<std::pair<std::string, std::string>> AuthHeaders(const std::string& token) {
  if (token.empty()) return {};
  return {{"Authorization", "Bearer " + token}};
}

Result<TlsFlags> ParseTlsFlags(const Args& args) {
  // The flag, else the environment variable (unset or empty: none).
  const auto setting = [&args](const char* flag, const char* env) {
    if (std::optional<std::string> value = args.Flag(flag)) return *value;
    const char* from_env = std::getenv(env);
    return std::string(from_env != nullptr ? from_env : "");
  };
  TlsFlags tls;
  tls.ca_file = setting("ca", "KVATLAS_CA");
  tls.cert_file = setting("cert", "KVATLAS_CERT");
  tls.key_file = setting("key", "KVATLAS_KEY");
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Status::InvalidArgument(
        "--cert and --key (KVATLAS_CERT, KVATLAS_KEY) go together: give both or neither");
  }
  tls.enabled = args.Has("tls") || !tls.ca_file.empty() || !tls.cert_file.empty();
  return tls;
}

Result<std::string> ServerAddress(const Args& args) {
  return AddressFrom(args, "server", "KVATLAS_SERVER", "127.0.0.1:7071",
                     "the binary protocol port (kvatlas-server --rpc-listen), e.g. 127.0.0.1:7071");
}

Result<std::string> RestAddress(const Args& args) {
  return AddressFrom(args, "http", "KVATLAS_HTTP", "127.0.0.1:7070",
                     "the REST port (kvatlas-server --http-listen), e.g. 127.0.0.1:7070; "
                     "HTTPS is --tls or --ca FILE");
}

std::optional<std::pair<std::string, int>> SplitHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  int port = 0;
  const std::string_view port_text = address.substr(colon + 1);
  const auto [ptr, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() ||
      port < 1 || port > 65535) {
    return std::nullopt;
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::pair{std::string(host), port};
}

Result<uint32_t> ParseU32(std::string_view text, std::string_view what) {
  uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(std::string(what) + ": \"" + std::string(text) +
                                   "\" is not an integer from 0 to 4294967295");
  }
  return value;
}

Result<std::vector<uint32_t>> ParseTokenList(std::string_view text) {
  std::vector<uint32_t> tokens;
  KVATLAS_RETURN_IF_ERROR(ForEachItem(text, [&](std::string_view item, size_t i) {
    Result<uint32_t> token = ParseU32(item, "--tokens[" + std::to_string(i) + "]");
    if (!token) return token.error();
    tokens.push_back(*token);
    return Status::Ok();
  }));
  return tokens;
}

Result<std::vector<uint64_t>> ParseHashList(std::string_view text) {
  std::vector<uint64_t> hashes;
  KVATLAS_RETURN_IF_ERROR(ForEachItem(text, [&](std::string_view item, size_t i) {
    Result<uint64_t> hash = ParseHashText(item);
    if (!hash) {
      return Status::InvalidArgument("--hashes[" + std::to_string(i) +
                                     "]: " + hash.error().message());
    }
    hashes.push_back(*hash);
    return Status::Ok();
  }));
  return hashes;
}

Result<std::vector<BlockEvent>> DecodeEventLine(std::string_view line) {
  line = Trim(line);
  if (line.empty()) return std::vector<BlockEvent>();
  if (line.front() == '[') return DecodeEventBatch(line);
  Result<std::vector<BlockEvent>> events = DecodeEventBatch("[" + std::string(line) + "]");
  if (events) return events;
  // The batch decoder names "events[0].field"; within one line, "field" says it all.
  std::string message = events.error().message();
  for (const std::string_view prefix : {"events[0].", "events[0]"}) {
    if (message.starts_with(prefix)) {
      message.erase(0, prefix.size());
      break;
    }
  }
  return Status::InvalidArgument(std::move(message));
}

}  // namespace kvatlas::cli
