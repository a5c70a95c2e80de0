// The kDirectory answer (docs/protocol.md §kDirectory): round trips, every truncation, and
// each validation rule.
#include <doctest/doctest.h>

#include <string>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "tests/support/bytes_literal.h"

namespace kvatlas::protocol {
namespace {

DirectoryAnswer Sample() {
  DirectoryAnswer answer;
  answer.groups = 6;
  REQUIRE(answer.directory.AddGroup({2, {"1", "3", "5"}, true}).ok());
  REQUIRE(answer.directory.AddGroup({3, {}, false}).ok());
  REQUIRE(answer.directory.Assign({"default", "llama", "adapter-1", 16, ""}, 2).ok());
  answer.servers = {{1, "127.0.0.1:7071"}, {3, "[::1]:7073"}, {5, "host-5:7071"}};
  return answer;
}

// An answer encoded field by field as the codec would, with the given parts.
std::string Encoded(uint64_t groups, std::string_view directory,
                    const std::vector<ServerRpcAddress>& servers) {
  std::string out;
  PutVarint64(&out, groups);
  PutLengthPrefixed(&out, directory);
  PutVarint64(&out, servers.size());
  for (const ServerRpcAddress& s : servers) {
    PutFixed64(&out, s.id);
    PutLengthPrefixed(&out, s.rpc_address);
  }
  return out;
}

TEST_CASE("a directory answer round-trips, and every truncation of it is refused") {
  const DirectoryAnswer answer = Sample();
  const std::string bytes = EncodeDirectoryAnswer(answer);
  CHECK(bytes == Encoded(6, EncodePlacementDirectory(answer.directory), answer.servers));
  const Result<DirectoryAnswer> decoded = DecodeDirectoryAnswer(bytes);
  REQUIRE(decoded.has_value());
  CHECK(*decoded == answer);
  for (size_t n = 0; n < bytes.size(); ++n) {
    CHECK_FALSE(DecodeDirectoryAnswer(bytes.substr(0, n)).has_value());
  }
  CHECK_FALSE(DecodeDirectoryAnswer(bytes + "x").has_value());
  // docs/protocol.md §kDirectory's example.
  CHECK(EncodeDirectoryAnswer({1, {}, {{1, "h:1"}}}) ==
        kvatlas::testing::Bytes("\x01\x04\x01\x00\x00\x00"
                                "\x01\x01\x00\x00\x00\x00\x00\x00\x00\x03h:1"));
  // A single-group server's answer: one group, an empty directory, no addresses needed.
  const Result<DirectoryAnswer> single = DecodeDirectoryAnswer(EncodeDirectoryAnswer({}));
  REQUIRE(single.has_value());
  CHECK(single->groups == 1);
}

TEST_CASE("a directory answer breaking a rule is refused, naming the field") {
  const DirectoryAnswer sample = Sample();
  const std::string directory = EncodePlacementDirectory(sample.directory);
  const auto message = [](const std::string& bytes) {
    const Result<DirectoryAnswer> decoded = DecodeDirectoryAnswer(bytes);
    REQUIRE_FALSE(decoded.has_value());
    CHECK(decoded.error().code() == StatusCode::kInvalidArgument);
    return decoded.error().message();
  };
  CHECK(message(Encoded(0, directory, sample.servers)).find("groups") != std::string::npos);
  CHECK(message(Encoded(kMaxGroupId + 1, directory, {})).find("groups") != std::string::npos);
  CHECK(message(Encoded(6, "\x01garbage", {})).find("directory") != std::string::npos);
  CHECK(message(Encoded(6, directory, {{3, "a:1"}, {1, "b:1"}})).find("ascending") !=
        std::string::npos);
  CHECK(message(Encoded(6, directory, {{1, "a:1"}, {1, "b:1"}})).find("ascending") !=
        std::string::npos);
  CHECK(message(Encoded(6, directory, {{0, "a:1"}})).find("servers[0]") != std::string::npos);
  CHECK(message(Encoded(6, directory, {{1, ""}})).find("address") != std::string::npos);
  std::string too_many;
  PutVarint64(&too_many, 6);
  PutLengthPrefixed(&too_many, directory);
  PutVarint64(&too_many, kMaxDirectoryServers + 1);
  too_many.append((kMaxDirectoryServers + 1) * 9, '\x01');
  CHECK(message(too_many).find("servers") != std::string::npos);
}

}  // namespace
}  // namespace kvatlas::protocol
