// Shared by the binary-protocol codec tests (protocol_test, protocol_feed_test): random
// content with a fixed seed (a failure reproduces), and the properties every payload codec
// must have — every truncation and trailing bytes rejected; garbage and bit flips never
// crash and whatever decodes re-encodes to the same value.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas::protocol::testing {

class RandomContent {
 public:
  explicit RandomContent(uint32_t seed) : rng_(seed) {}

  uint64_t U64() { return rng_(); }
  // Mostly small numbers (one-byte varints), sometimes any 32-bit value.
  uint32_t U32() {
    return Chance(4) ? static_cast<uint32_t>(rng_()) : static_cast<uint32_t>(rng_() % 200);
  }
  uint64_t Below(uint64_t n) { return rng_() % n; }
  bool Chance(uint64_t one_in) { return Below(one_in) == 0; }
  std::string Str(size_t max_len = 12) {
    std::string s(Below(max_len + 1), '\0');
    for (char& c : s) c = static_cast<char>(Below(256));  // any bytes, NUL included
    return s;
  }
  ContextKey Context() {
    return ContextKey{"t" + Str(), "m" + Str(), Str(), 1 + static_cast<uint32_t>(Below(64)), Str()};
  }
  HolderKey Holder() { return HolderKey{"h" + Str(), U32()}; }
  Tier AnyTier() { return static_cast<Tier>(Below(kNumTiers)); }

 private:
  std::mt19937_64 rng_;
};

// A payload codec under test: a random valid encoding (from a generator G), whether a
// payload decodes, and whether what decodes re-encodes to the same value (or fails).
template <typename G>
struct Codec {
  const char* name;
  std::function<std::string(G*)> sample;
  std::function<bool(std::string_view)> decodes;
  std::function<bool(std::string_view)> stable;
};

// The error a decoder gives for `payload`; kOk when it decodes.
template <typename Dec>
Status ErrorOf(Dec decode, std::string_view payload) {
  auto result = decode(payload);
  return result.has_value() ? Status::Ok() : result.error();
}

template <typename G>
void CheckRejectsEveryTruncation(const std::vector<Codec<G>>& codecs, uint32_t seed) {
  G g(seed);
  for (const Codec<G>& codec : codecs) {
    CAPTURE(codec.name);
    for (int sample = 0; sample < 20; ++sample) {
      const std::string payload = codec.sample(&g);
      REQUIRE(codec.decodes(payload));
      for (size_t n = 0; n < payload.size(); ++n) {
        CAPTURE(n);
        CHECK_FALSE(codec.decodes(std::string_view(payload).substr(0, n)));
      }
      CHECK_FALSE(codec.decodes(payload + '\0'));  // trailing bytes
    }
  }
}

template <typename G>
void CheckSurvivesGarbage(const std::vector<Codec<G>>& codecs, uint32_t seed) {
  G g(seed);
  for (const Codec<G>& codec : codecs) {
    CAPTURE(codec.name);
    for (int i = 0; i < 2000; ++i) {
      std::string input = g.Str(64);
      if (i % 2 == 0) {  // a valid payload with a few corrupted bytes reaches deeper
        input = codec.sample(&g);
        if (input.empty()) continue;
        for (int flips = 0; flips < 3; ++flips) {
          input[g.Below(input.size())] = static_cast<char>(g.Below(256));
        }
      }
      CHECK(codec.stable(input));
    }
  }
}

}  // namespace kvatlas::protocol::testing
