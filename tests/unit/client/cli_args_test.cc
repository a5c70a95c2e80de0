#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "client/cli/args.h"
#include "client/cli/help.h"

namespace kvatlas::cli {
namespace {

std::optional<Args> Parse(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "kvatlas");
  return ParseArgs(static_cast<int>(argv.size()), argv.data());
}

// Whether `name` is a flag of the CLI: global, or of some command.
bool IsCliFlag(const std::string& name) {
  const std::vector<std::string>& global = GlobalFlags();
  if (std::find(global.begin(), global.end(), name) != global.end()) return true;
  for (const CommandHelp& command : Commands()) {
    for (const FlagHelp& flag : command.flags) {
      if (flag.name == name) return true;
    }
  }
  return false;
}

// Checks that every "--flag" in `text` is followed by a value placeholder exactly when the
// parser takes a value for it ("[--json]" and "--model M", not "--json VALUE"); in prose
// (not a `synopsis`) only that no switch is shown with a value.
void CheckFlagsShown(const std::string& where, const std::string& text, bool synopsis) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  for (size_t i = 0; i < words.size(); ++i) {
    std::string w = words[i];
    w.erase(0, w.find_first_not_of("[("));
    if (!w.starts_with("--") || w.size() < 3) continue;
    std::string name = w.substr(2);
    const bool closed = name.find_first_of("])|,") != std::string::npos;
    name.erase(std::min(name.find_first_of("])|,"), name.size()));
    if (!IsCliFlag(name)) continue;  // kvatlas-server's flags, named in the text
    // A placeholder: "M", "HOST:PORT", "1,2,3", "REV|now|snapshot" (prose is lower case).
    const std::string next = i + 1 < words.size() ? words[i + 1] : "";
    const bool shown_with_value =
        !closed && !next.empty() && (std::isupper(next[0]) != 0 || std::isdigit(next[0]) != 0);
    if (!synopsis && !shown_with_value) continue;  // prose names a flag without its value
    CHECK_MESSAGE(
        shown_with_value == !IsSwitch(name),
        where << ": --" << name
              << (shown_with_value ? " is shown with " + next : " is shown without a value"));
  }
}

TEST_SUITE("CliArgs") {
  TEST_CASE("CliArgs: flags anywhere, --flag=value, switches and positionals") {
    std::optional<Args> args = Parse(
        {"--server", "h:1", "blocks", "0x7b", "--model=llama", "--json", "--block-size", "16"});
    REQUIRE(args.has_value());
    CHECK(args->command == "blocks");
    CHECK(args->positional == std::vector<std::string>{"0x7b"});
    CHECK(args->Flag("server") == "h:1");
    CHECK(args->Flag("model") == "llama");
    CHECK(args->Flag("block-size") == "16");
    CHECK(args->Has("json"));
    CHECK_FALSE(args->Has("tenant"));
    CHECK(args->CheckFlags({"model", "block-size", "json"}).ok());
    CHECK(args->CheckFlags({"json"}).message() == "blocks: unknown flag --block-size");
  }

  TEST_CASE("CliArgs: a value flag without its value is an error, after unknown flags") {
    CHECK(Parse({"lookup", "--model"})->CheckFlags({"model"}).message() ==
          "lookup: --model needs a value");
    // A value flag does not take the next flag as its value.
    std::optional<Args> args = Parse({"lookup", "--model", "--block-size", "4"});
    CHECK(args->CheckFlags({"model", "block-size"}).message() == "lookup: --model needs a value");
    CHECK(args->Flag("block-size") == "4");
    CHECK(Parse({"lookup", "--json=yes"})->CheckFlags({"json"}).message() ==
          "lookup: --json takes no value");
    // A typo'd last flag is unknown, not short of a value.
    CHECK(Parse({"lookup", "--model", "m", "--blok-size"})
              ->CheckFlags({"model", "block-size"})
              .message() == "lookup: unknown flag --blok-size");
    CHECK(Parse({"lookup", "--modle", "m", "--block-size"})
              ->CheckFlags({"model", "block-size"})
              .message() == "lookup: unknown flag --modle");
    CHECK(Parse({"--frob"})->CheckFlags({}).message() == "unknown flag --frob");
  }

  TEST_CASE("CliArgs: -h is --help, anywhere") {
    std::optional<Args> args = Parse({"lookup", "-h"});
    CHECK(args->command == "lookup");
    CHECK(args->Has("help"));
    CHECK(args->positional.empty());
    CHECK(Parse({"-h"})->Has("help"));
  }

  TEST_CASE("CliArgs: every help text shows a value exactly for the flags that take one") {
    for (const CommandHelp& command : Commands()) {
      const std::string path = command.path;
      CheckFlagsShown(path, command.synopsis, /*synopsis=*/true);
      CheckFlagsShown(path, command.text, /*synopsis=*/false);
      for (const char* example : command.examples) {
        CheckFlagsShown(path, example, /*synopsis=*/false);
      }
      for (const FlagHelp& flag : command.flags) {
        CHECK_MESSAGE((flag.value[0] == '\0') == IsSwitch(flag.name), (path + ": --" + flag.name));
      }
      const std::string help = HelpOf(command);
      CHECK(help.starts_with("usage: kvatlas " + std::string(command.path)));
      std::istringstream lines(help);
      for (std::string line; std::getline(lines, line);) {
        CHECK_MESSAGE(line.size() <= 92, (std::string(command.path) + ": " + line));
      }
    }
    for (const FlagHelp& flag : GlobalFlagHelp()) {
      CHECK_MESSAGE((flag.value[0] == '\0') == IsSwitch(flag.name),
                    (std::string("--") + flag.name));
      const std::vector<std::string>& global = GlobalFlags();
      CHECK(std::find(global.begin(), global.end(), flag.name) != global.end());
    }
    std::istringstream lines(GlobalHelp());
    for (std::string line; std::getline(lines, line);) CHECK_MESSAGE(line.size() <= 92, line);
    CHECK(GlobalHelp().find("  cluster ") != std::string::npos);
    CHECK(GlobalHelp().find("cluster status") == std::string::npos);  // subcommands apart
  }

  TEST_CASE("CliArgs: addresses are HOST:PORT, without a scheme, from the flag or variable") {
    unsetenv("KVATLAS_SERVER");
    unsetenv("KVATLAS_HTTP");
    CHECK(*ServerAddress(*Parse({"ping"})) == "127.0.0.1:7071");
    CHECK(*RestAddress(*Parse({"watch"})) == "127.0.0.1:7070");
    CHECK(*ServerAddress(*Parse({"--server", "[::1]:7", "ping"})) == "[::1]:7");
    Result<std::string> url = ServerAddress(*Parse({"--server", "http://127.0.0.1:7071", "ping"}));
    REQUIRE_FALSE(url.has_value());
    CHECK(url.error().message().starts_with("--server takes HOST:PORT without a scheme"));
    CHECK(url.error().message().find("--rpc-listen") != std::string::npos);
    url = RestAddress(*Parse({"--http", "http://127.0.0.1:7070", "watch"}));
    REQUIRE_FALSE(url.has_value());
    CHECK(url.error().message().starts_with("--http takes HOST:PORT without a scheme"));
    CHECK(ServerAddress(*Parse({"--server", "::1:7071", "ping"}))
              .status()
              .message()
              .find("needs brackets") != std::string::npos);
    CHECK(RestAddress(*Parse({"--http", "7070", "watch"}))
              .status()
              .message()
              .starts_with("--http must be HOST:PORT"));
    setenv("KVATLAS_SERVER", "https://h:1", 1);
    CHECK(ServerAddress(*Parse({"ping"}))
              .status()
              .message()
              .starts_with("KVATLAS_SERVER takes HOST:PORT without a scheme"));
    unsetenv("KVATLAS_SERVER");
  }

  TEST_CASE("CliArgs: TLS flags are global; any of them turns TLS on; --cert needs --key") {
    // The environment must not decide these cases.
    unsetenv("KVATLAS_CA");
    unsetenv("KVATLAS_CERT");
    unsetenv("KVATLAS_KEY");
    std::optional<Args> args = Parse({"ping"});
    REQUIRE(args.has_value());
    CHECK_FALSE(ParseTlsFlags(*args)->enabled);
    args = Parse({"--ca", "ca.pem", "ping"});
    REQUIRE(args.has_value());
    CHECK(args->CheckFlags({}).ok());
    Result<TlsFlags> tls = ParseTlsFlags(*args);
    REQUIRE(tls.has_value());
    CHECK(tls->enabled);
    CHECK(tls->ca_file == "ca.pem");
    args = Parse({"stats", "--tls"});
    REQUIRE(args.has_value());
    CHECK(ParseTlsFlags(*args)->enabled);
    CHECK(ParseTlsFlags(*args)->ca_file.empty());
    args = Parse({"--cert", "c.pem", "ping"});
    REQUIRE(args.has_value());
    CHECK(ParseTlsFlags(*args).status().code() == StatusCode::kInvalidArgument);
    setenv("KVATLAS_CA", "env-ca.pem", 1);
    args = Parse({"ping"});
    REQUIRE(args.has_value());
    CHECK(ParseTlsFlags(*args)->ca_file == "env-ca.pem");
    args = Parse({"--ca", "flag-ca.pem", "ping"});
    REQUIRE(args.has_value());
    CHECK(ParseTlsFlags(*args)->ca_file == "flag-ca.pem");  // the flag wins
    unsetenv("KVATLAS_CA");
  }

  TEST_CASE("CliArgs: token and hash lists") {
    CHECK(*ParseTokenList("1, 2,3") == std::vector<uint32_t>{1, 2, 3});
    CHECK(ParseTokenList("1,,3").status().message().find("--tokens[1]") != std::string::npos);
    CHECK(ParseTokenList("4294967296").status().code() == StatusCode::kInvalidArgument);
    CHECK(*ParseHashList("0x10,17,-1") == std::vector<uint64_t>{16, 17, 0xffffffffffffffffULL});
    CHECK(ParseHashList("0x10,zz").status().message().find("--hashes[1]") != std::string::npos);
    CHECK(*ParseU32("16", "--block-size") == 16u);
    CHECK(ParseU32("16x", "--block-size").status().message().find("--block-size") == 0);
  }

  TEST_CASE("CliArgs: event lines are objects or arrays; errors name the field") {
    const std::string event =
        R"({"event_type": "stored", "model_name": "m", "block_size": 2, "backend_id": "e",)"
        R"( "seq_hashes": [1, 2]})";
    Result<std::vector<BlockEvent>> one = DecodeEventLine(event);
    REQUIRE(one.has_value());
    REQUIRE(one->size() == 1);
    CHECK((*one)[0].seq_hashes == std::vector<uint64_t>{1, 2});
    Result<std::vector<BlockEvent>> two = DecodeEventLine("  [" + event + "," + event + "]\r");
    REQUIRE(two.has_value());
    CHECK(two->size() == 2);
    CHECK(DecodeEventLine("   ")->empty());
    Result<std::vector<BlockEvent>> bad =
        DecodeEventLine(R"({"event_type": "stored", "model_name": "m", "block_size": 0})");
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().message().starts_with("block_size:"));
    CHECK(DecodeEventLine("{nope").status().code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvatlas::cli
