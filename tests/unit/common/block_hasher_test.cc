// Test vectors were computed independently of this implementation, with Python's xxhash
// package (xxh3_64_intdigest over struct.pack('<%dI') / struct.pack('<QQ')); see
// docs/architecture.md §Hashing for the script.
#include "kvatlas/common/block_hasher.h"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

namespace kvatlas {
namespace {

std::vector<uint32_t> Iota(uint32_t first, size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST_SUITE("BlockHasher") {
  TEST_CASE("local hash matches independent XXH3-64 vectors") {
    BlockHasher h(1337);
    const std::vector<uint32_t> tokens{1, 2, 3, 4};
    CHECK(h.LocalHash(tokens) == 0xcb38e4d7fb2dca5cULL);
    CHECK(h.LocalHash({}) == 0xd1f3e77444430ab9ULL);
  }

  TEST_CASE("sequence hashes with the default seed 1337") {
    BlockHasher h;
    CHECK(h.seed() == 1337);
    const auto seq = h.SequenceHashes(Iota(1, 48), 16);
    REQUIRE(seq.size() == 3);
    CHECK(seq[0] == 0xea06fc71a5ee6e88ULL);
    CHECK(seq[1] == 0xad01835a37dd294cULL);
    CHECK(seq[2] == 0x0d55e56c2bccbd1aULL);
  }

  TEST_CASE("seed 0, large token ids, trailing partial block ignored") {
    BlockHasher h(0);
    std::vector<uint32_t> tokens(8, 7);
    tokens.insert(tokens.end(), 8, 4000000000u);
    tokens.push_back(123);
    const auto seq = h.SequenceHashes(tokens, 4);
    REQUIRE(seq.size() == 4);
    CHECK(seq[0] == 0x5946c94da02d796fULL);
    CHECK(seq[1] == 0x29d9dbcbaebdf82fULL);
    CHECK(seq[2] == 0xc1a4a66de08526fcULL);
    CHECK(seq[3] == 0x9b192d4366ed2b71ULL);
  }

  TEST_CASE("512-token blocks as in the Mooncake trace") {
    BlockHasher h(42);
    const auto seq = h.SequenceHashes(Iota(100, 1024), 512);
    REQUIRE(seq.size() == 2);
    CHECK(seq[0] == 0x41612d47c0b704b1ULL);
    CHECK(seq[1] == 0xcee0a9b183931362ULL);
  }

  TEST_CASE("continuing from a parent equals hashing the whole chain") {
    BlockHasher h;
    const auto tokens = Iota(1, 48);
    const auto whole = h.SequenceHashes(tokens, 16);
    const auto tail = h.SequenceHashes(std::span(tokens).subspan(16), 16, whole[0]);
    REQUIRE(tail.size() == 2);
    CHECK(tail[0] == whole[1]);
    CHECK(tail[1] == whole[2]);
    const auto locals = h.LocalHashes(tokens, 16);
    CHECK(h.ChainLocals(locals) == whole);
  }

  TEST_CASE("fewer tokens than a block yields no hashes") {
    BlockHasher h;
    CHECK(h.SequenceHashes(Iota(0, 15), 16).empty());
  }
}

}  // namespace
}  // namespace kvatlas
