#include <doctest/doctest.h>

#include <cstdlib>

#include "client/cli/args.h"

namespace kvatlas::cli {
namespace {

Result<Args> Parse(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "kvatlas");
  return ParseArgs(static_cast<int>(argv.size()), argv.data());
}

TEST_SUITE("CliArgs") {
  TEST_CASE("CliArgs: flags anywhere, --flag=value, switches and positionals") {
    Result<Args> args = Parse(
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

  TEST_CASE("CliArgs: a value flag without its value is an error") {
    CHECK(Parse({"lookup", "--model"}).status().message() == "--model needs a value");
    CHECK(Parse({"lookup", "--json=yes"}).status().code() == StatusCode::kInvalidArgument);
  }

  TEST_CASE("CliArgs: TLS flags are global; any of them turns TLS on; --cert needs --key") {
    // The environment must not decide these cases.
    unsetenv("KVATLAS_CA");
    unsetenv("KVATLAS_CERT");
    unsetenv("KVATLAS_KEY");
    Result<Args> args = Parse({"ping"});
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
