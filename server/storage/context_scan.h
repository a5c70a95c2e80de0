// One context's copies read from a Storage::Capture (docs/feed.md §Snapshots): a pinned
// RocksDB snapshot is the state after exactly one applied revision, so a scan of it lists
// the context as it was at that revision with no lock of the Index held, whatever the
// number of copies, in constant memory.
//
// Free function; any thread (as Capture::ForEachRecord).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/storage/storage.h"

namespace kvatlas::server {

// What a context scan hands over, in order: the group's stream positions and holder-wide
// ids (to a visitor that wants them: a move's source, docs/scaling.md §Moves), the revision
// once (before any copy), then every copy of the context, blocks in creation order
// (ascending stamp) and each block's copies together — all of one revision. A non-OK Status
// from any of them stops the scan and is returned by it.
class ContextScanVisitor {
 public:
  virtual ~ContextScanVisitor() = default;
  // Every stream position (Registry::positions) and every holder's holder-wide ids
  // (Registry::holder_wide), when the visitor wants them (they are few).
  [[nodiscard]] virtual bool WantsRegistry() const { return false; }
  [[nodiscard]] virtual Status OnStreamPosition(std::string_view /*stream*/,
                                                uint64_t /*sequence*/) {
    return Status::Ok();
  }
  // `ids` oldest first.
  [[nodiscard]] virtual Status OnHolderWide(const HolderKey& /*holder*/,
                                            const std::vector<uint64_t>& /*ids*/) {
    return Status::Ok();
  }
  [[nodiscard]] virtual Status OnRevision(Revision revision) = 0;
  // `holder` and `location` are valid during the call only.
  [[nodiscard]] virtual Status OnCopy(BlockKey key, const HolderKey& holder, Tier tier,
                                      uint32_t depth, uint32_t refcount, uint64_t engine_hash,
                                      std::string_view location) = 0;
  // Asked every few thousand records (most may be other contexts'): true ends the scan
  // with kCancelled.
  [[nodiscard]] virtual bool Cancelled() const { return false; }
};

// Scans `capture` for `context`'s copies. The whole entries family is read (entry records
// are keyed by stamp, then context: one context's records are not adjacent), but only the
// context's are decoded; an unknown context has no copies and ends the scan at the first
// entry record. kCorruption on a record that does not decode.
[[nodiscard]] Status ScanContext(const Storage::Capture& capture, const ContextKey& context,
                                 ContextScanVisitor* visitor);

}  // namespace kvatlas::server
