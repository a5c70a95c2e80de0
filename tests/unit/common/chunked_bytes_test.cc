#include "common/internal/chunked_bytes.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace kvatlas {
namespace {

std::string Joined(const ChunkedBytes& bytes) {
  std::string out;
  for (const ChunkedBytes::Chunk& chunk : bytes.chunks()) out.append(chunk.data, chunk.size);
  return out;
}

// Allocates at most `budget` chunks, then fails.
int budget = 0;
void* Limited(size_t n) { return budget-- > 0 ? std::malloc(n) : nullptr; }

TEST_CASE("ChunkedBytes: appends fill whole chunks in order; patches land across chunks") {
  ChunkedBytes bytes(4);
  bytes.Append("");
  CHECK(bytes.chunks().empty());
  bytes.Append("abcdef");
  bytes.Append("gh");
  bytes.Append("ijklmnopq");
  CHECK(bytes.size() == 17);
  REQUIRE(bytes.chunks().size() == 5);
  for (size_t i = 0; i + 1 < bytes.chunks().size(); ++i) CHECK(bytes.chunks()[i].size == 4);
  CHECK(bytes.chunks().back().size == 1);
  CHECK(Joined(bytes) == "abcdefghijklmnopq");
  CHECK(bytes.Patch(3, "XYZUV"));
  CHECK(Joined(bytes) == "abcXYZUVijklmnopq");
  CHECK(bytes.Patch(16, "Q"));
  CHECK_FALSE(bytes.Patch(16, "QR"));  // past the end: nothing written
  CHECK_FALSE(bytes.Patch(18, ""));
  CHECK(Joined(bytes) == "abcXYZUVijklmnopQ");
  CHECK(bytes.ok());
}

TEST_CASE("ChunkedBytes: Take hands the chunks over; a failed allocation is sticky") {
  std::vector<ChunkedBytes::Chunk> taken;
  {
    ChunkedBytes bytes(3);
    bytes.Append("hello");
    taken = bytes.Take();
    CHECK(bytes.size() == 0);
    CHECK(bytes.chunks().empty());
  }  // the destructor frees nothing taken
  REQUIRE(taken.size() == 2);
  CHECK(std::string(taken[0].data, taken[0].size) + std::string(taken[1].data, taken[1].size) ==
        "hello");
  for (const ChunkedBytes::Chunk& chunk : taken) std::free(chunk.data);

  budget = 2;
  ChunkedBytes limited(2, &Limited, &std::free);
  limited.Append("abcde");
  CHECK_FALSE(limited.ok());
  CHECK(limited.size() == 4);
  limited.Append("f");
  CHECK(limited.size() == 4);
  CHECK(Joined(limited) == "abcd");
}

}  // namespace
}  // namespace kvatlas
