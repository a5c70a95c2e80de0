// The change feed's record: one applied change to the map (docs/feed.md). Shared by the
// server's ChangeFeed, the watch codecs (SSE JSON and the binary kWatch stream) and the
// client library's watchers and LocalIndex.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/export.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

enum class FeedOp : uint8_t {
  kStored = 0,   // the holder now has these blocks in this tier (a first reference)
  kRemoved = 1,  // the holder dropped them (last reference removed)
  kCleared = 2,  // dropped by a clear of the holder (AllBlocksCleared, engine restart)
  kEvicted = 3,  // dropped by the per-context entry cap (FIFO eviction)
  kExpired = 4,  // dropped because the holder's lease expired ("holder-expired")
  // Approximate mode (docs/routing.md): a route or Client::RecordPrediction sent these blocks
  // to the holder, which is guessed to hold them until `expires_at_ms`. Soft state, sent only
  // to watchers that ask for it (FeedFilter::predicted).
  kPredicted = 5,
};
KVATLAS_EXPORT std::string_view FeedOpName(FeedOp op);

// One change: `op` on `keys` of `holder` in `tier` of `context`, applied at `revision`.
struct FeedRecord {
  Revision revision = 0;
  FeedOp op = FeedOp::kStored;
  ContextKey context;
  HolderKey holder;
  Tier tier = Tier::kGpu;
  std::vector<BlockKey> keys;
  // kStored only: empty, or one location per key (SHARED-tier descriptors).
  std::vector<std::string> locations;
  // kPredicted only (0 otherwise): when the prediction ends, ms since the Unix epoch on the
  // publishing server's clock. A predicted record's tier is kGpu and means nothing.
  uint64_t expires_at_ms = 0;

  friend bool operator==(const FeedRecord&, const FeedRecord&) = default;
};

// Which records a watcher wants; an unset field matches everything. Predicted records
// (FeedOp::kPredicted) match only a filter with `predicted` set and no `tier`.
struct KVATLAS_EXPORT FeedFilter {
  std::optional<std::string> tenant;
  std::optional<std::string> model;
  std::optional<std::string> lora_name;
  std::optional<uint32_t> block_size;
  std::optional<std::string> salt;
  std::optional<std::string> holder_id;
  std::optional<uint32_t> dp_rank;
  std::optional<Tier> tier;
  bool predicted = false;  // also the kPredicted records (opt-in: docs/feed.md)
  bool Matches(const FeedRecord& record) const;
  // The filter of exactly one context's records.
  static FeedFilter ForContext(const ContextKey& context);
  // The context whose group a watch with this filter follows on a cluster of several
  // groups, each numbering its own revisions (docs/feed.md): the one context the filter
  // names when it sets lora_name and salt, else the model's own (no LoRA, no salt: its
  // adapters and salts share its home group); an unset tenant is "default". nullopt when
  // model or block_size is unset: such a watch spans groups.
  std::optional<ContextKey> GroupContext() const;
};

}  // namespace kvatlas
