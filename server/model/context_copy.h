// ContextCopier: the write batches that re-create one context's copies in another group,
// the copy step of a move (docs/scaling.md §Moves).
//
// The copies come as Index::ForEachCopy and a context snapshot (GET /v1/snapshot,
// docs/feed.md) list them: blocks in creation order, a block's copies together. Each copy
// becomes part of a plain StoreCommand (KeyMode::kSequence, its block's depth as the base,
// its engine hash and location), so the receiving group applies the copy as any write and
// needs no command of its own for it:
//   - blocks are created in the order listed, so they keep their order of eviction
//     (max_entries_per_context) and of listing;
//   - a copy of refcount r is stored r times (a store adds one reference);
//   - a holder's aliases are made again from the engine hashes.
// A holder's copies in one tier of blocks that follow each other both in the listing and in
// depth share one command (a chain a holder stored is one command again). Batches are cut
// once they name `max_hashes` block hashes, and each carries the writer position (`writer`,
// sequences 1, 2, …), so that a batch sent twice is applied once (docs/api.md §Idempotent
// writes).
//
// Thread-safety: none; one copier per copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/model/command.h"

namespace kvatlas::server {

class ContextCopier {
 public:
  // `emit` gets each batch as it is cut; an error it returns stops the copy (Add and Finish
  // return it).
  ContextCopier(ContextKey context, std::string writer, size_t max_hashes,
                std::function<Status(CommandBatch)> emit);

  // The next copy: of block `key`, as listed (`copy.context` is ignored).
  [[nodiscard]] Status Add(BlockKey key, const BlockCopy& copy);
  // Emits the last batch, if any.
  [[nodiscard]] Status Finish();

  uint64_t batches() const { return sequence_; }
  uint64_t copies() const { return copies_; }

 private:
  // A holder's command in one tier that the next copy may extend.
  struct Run {
    size_t command = 0;       // its index in batch_.commands
    uint64_t last_block = 0;  // the listing ordinal of its last block
    uint32_t last_depth = 0;
  };

  // A store of `copy` of block `key` alone (no location).
  StoreCommand StoreOf(BlockKey key, const BlockCopy& copy) const;
  [[nodiscard]] Status Emit();

  const ContextKey context_;
  const std::string writer_;
  const size_t max_hashes_;
  const std::function<Status(CommandBatch)> emit_;
  CommandBatch batch_;
  size_t hashes_ = 0;  // block hashes in batch_
  // By (holder id, dp rank, tier); emptied as each batch is cut.
  std::map<std::tuple<std::string, uint32_t, Tier>, Run> runs_;
  // The listing ordinal of the block of the last copy added (1 for the first), and its key.
  uint64_t block_ = 0;
  BlockKey last_key_ = 0;
  uint64_t sequence_ = 0;
  uint64_t copies_ = 0;
};

}  // namespace kvatlas::server
