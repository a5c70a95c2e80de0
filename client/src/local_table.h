// LocalTable: the data behind kvatlas::LocalIndex — the copies of some contexts, kept as
// the change feed describes them (kvatlas/common/feed.h), and the prefix lookup over them
// with the server's own matching code (common/internal/prefix_match.h).
//
// Layout per context (docs/feed.md §LocalIndex): one 16-byte record per block (key, the
// first copy's holder and tier packed in 32 bits, the head of a chain of further copies in
// a pool of 8-byte copies), numbered in the order blocks were created; and 8-byte hash
// slots (the key's low 32 bits, the record's number; linear probing, backward-shift
// deletion). A lookup looks for each block first in the record after its parent's, so a
// chain stored by one feed record is read as consecutive records; chains stored piecemeal
// are resolved through the slots in prefetched windows.
//
// Thread-safety: none inside. LocalIndex serialises writers and readers with a
// shared_mutex; Lookup and PrepareGrowth are const and may run concurrently with each other.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/internal/prefix_match.h"
#include "kvatlas/common/feed.h"
#include "kvatlas/common/types.h"

namespace kvatlas::client_internal {

// One copy of a block, as a snapshot lists it.
struct LocalCopy {
  BlockKey key = 0;
  HolderKey holder;
  Tier tier = Tier::kGpu;
  std::string location;  // SHARED-tier descriptor, or empty
};

class LocalTable {
 public:
  LocalTable();
  ~LocalTable();
  LocalTable(const LocalTable&) = delete;
  LocalTable& operator=(const LocalTable&) = delete;

  // Starts tracking `context` (empty) if it is not tracked yet.
  void Track(const ContextKey& context);
  bool Tracks(const ContextKey& context) const;

  // Replaces the content of `context` (tracking it) by `copies`.
  void Load(const ContextKey& context, std::span<const LocalCopy> copies);
  // Adds `copies` to `context` (tracking it): a snapshot loaded part by part, in order.
  void Append(const ContextKey& context, std::span<const LocalCopy> copies);

  // Applies one feed record. Records of contexts not tracked are ignored. kStored adds the
  // copy (a copy already present keeps its location unless the record brings one); every
  // other op removes it. Idempotent per (key, holder, tier): replaying a record is harmless.
  void Apply(const FeedRecord& record);

  // The server's prefix lookup (Index::Lookup) over `context`'s copies: at most
  // `max_blocks` keys, stops at the first block nobody holds; holders first seen below
  // block 0 do not count; `instance_id` (when not empty) keeps only that instance's ranks
  // at block 0 (shared backends are kept as the server keeps them).
  LookupResult Lookup(const ContextKey& context, std::span<const BlockKey> keys,
                      std::string_view instance_id, bool include_locations,
                      uint32_t max_blocks) const;

  // Growth outside the write lock (as the server's Index does, docs/architecture.md): the
  // replica's single writer builds a context table's grown slots, its next record segments
  // and, when removed blocks left enough holes, its compacted records while lookups go on,
  // then swaps them in under the write lock in O(1), instead of rehashing or compacting the
  // whole table (tens of ms at a million blocks) while every lookup waits.
  struct Growth;
  struct GrowthDeleter {
    void operator()(Growth* growth) const;
  };
  using PreparedGrowth = std::unique_ptr<Growth, GrowthDeleter>;
  // What `context` needs for `extra_blocks` more blocks (and the compaction it is due);
  // null when it has room or is not tracked. Reads only.
  PreparedGrowth PrepareGrowth(const ContextKey& context, size_t extra_blocks) const;
  // Swaps in `growth` if neither Apply nor Load changed its table since; false (dropping it:
  // the table then grows by itself when it fills) otherwise.
  bool AdoptGrowth(PreparedGrowth growth);

  // Totals over tracked contexts.
  uint64_t blocks() const;
  uint64_t copies() const;
  uint64_t memory_bytes() const;

 private:
  class ContextTable;
  ContextTable* Find(const ContextKey& context) const;
  uint32_t InternHolder(const HolderKey& holder);

  std::unordered_map<ContextKey, std::unique_ptr<ContextTable>, ContextKeyHash> contexts_;
  std::unordered_map<HolderKey, uint32_t, HolderKeyHash> holder_ids_;
  std::vector<HolderKey> holders_;
};

}  // namespace kvatlas::client_internal
