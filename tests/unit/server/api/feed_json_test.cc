// AppendFeedRecordJson writes what nlohmann's dump() (with invalid UTF-8 replaced, as
// DumpJson does) gives for the same object, byte for byte, on random records.
#include "server/api/feed_json.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "kvatlas/common/json_codec.h"

namespace kvatlas::server {
namespace {

// The object GET /v1/watch documents, built as a JSON document.
nlohmann::json Reference(const FeedRecord& r) {
  nlohmann::json out = {{"revision", r.revision},
                        {"op", FeedOpName(r.op)},
                        {"tenant_id", r.context.tenant},
                        {"model_name", r.context.model},
                        {"lora_name", r.context.lora_name},
                        {"block_size", r.context.block_size},
                        {"additional_salt", r.context.salt},
                        {"backend_id", r.holder.id},
                        {"dp_rank", r.holder.dp_rank},
                        {"keys", r.keys}};
  // A predicted record has its expiry and no medium.
  if (r.op == FeedOp::kPredicted) {
    out["expires_at_ms"] = r.expires_at_ms;
  } else {
    out["medium"] = TierName(r.tier);
  }
  if (!r.locations.empty()) out["locations"] = r.locations;
  return out;
}

TEST_CASE("AppendFeedRecordJson: the bytes of the JSON document's dump, on random records") {
  std::mt19937_64 rng(3);
  // Plain text, JSON escapes, control characters, UTF-8, and bytes that are not UTF-8.
  const std::string pieces[] = {"m", "tenant-1", "\"",   "\\",   "\n", std::string(1, '\x01'),
                                "é", "模型",     "\xff", "\xc3", "/",  " "};
  auto text = [&] {
    std::string s;
    for (uint64_t n = rng() % 5; n > 0; --n) s += pieces[rng() % std::size(pieces)];
    return s;
  };
  for (int i = 0; i < 3'000; ++i) {
    CAPTURE(i);
    FeedRecord r;
    r.revision = i % 7 == 0 ? UINT64_MAX : rng();
    r.op = static_cast<FeedOp>(rng() % 6);
    if (r.op == FeedOp::kPredicted) r.expires_at_ms = rng() >> (rng() % 64);
    r.context = ContextKey{text(), text(), text(), static_cast<uint32_t>(rng()), text()};
    r.holder = HolderKey{text(), static_cast<uint32_t>(rng() % 9)};
    r.tier = static_cast<Tier>(rng() % kNumTiers);
    for (uint64_t n = rng() % 70; n > 0; --n) {
      const uint64_t shift = rng() % 64;
      r.keys.push_back(rng() >> shift);  // short and long numbers, 0 among them
    }
    if (rng() % 3 == 0) {
      for (size_t k = 0; k < r.keys.size(); ++k) r.locations.push_back(text());
    }
    std::string got = "prefix:";
    AppendFeedRecordJson(r, &got);
    REQUIRE(got == "prefix:" + DumpJson(Reference(r)));
  }
}

}  // namespace
}  // namespace kvatlas::server
