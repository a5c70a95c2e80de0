// ContextTap: the blocks of one context that applied writes changed since it was last read,
// for the catch-up step of a move (docs/scaling.md §Moves). The group a context leaves copies
// it from a snapshot taken after the tap starts, then sends, round after round, the blocks
// the tap names with their copies as they are then (Index::CopiesOf) to replace them in the
// group it goes to (ReplaceCopiesCommand): a block changed several times is sent once, as it
// ends, with its refcounts, aliases and locations, which the change feed's records do not
// carry.
//
// Threading: an ApplyObserver (OnApplied/OnReset on the state machine's writing side);
// Take from any thread. Memory: one entry per changed block of the context since the last
// Take, at most the context's blocks.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/types.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

// A changed block: its key, and whether it went away (all its copies) since the last Take.
struct TappedBlock {
  BlockKey key = 0;
  bool went_away = false;

  friend bool operator==(const TappedBlock&, const TappedBlock&) = default;
};

class ContextTap final : public ApplyObserver {
 public:
  // Taps `context` of the index whose changes it is given; `index` (read under the state's
  // lock by the caller) names the context's id when it exists already.
  ContextTap(ContextKey context, const Index& index);

  // The blocks changed since the last Take (or the start): those that already existed
  // first, then those made since, in the order they were made (the order the receiving group
  // must make them in to keep the eviction order). False when the state was replaced since
  // the start (a raft snapshot restored, OnReset): the tap no longer knows what changed,
  // and the move must copy again.
  [[nodiscard]] bool Take(std::vector<TappedBlock>* blocks);

  void OnApplied(Revision revision, const MutationList& mutations) override;
  void OnReset(Revision revision, const Index& index) override;

 private:
  struct Change {
    uint64_t made = 0;  // the stamp of its last making since the last Take; 0: none
    bool went_away = false;
  };

  const ContextKey context_;
  std::mutex mu_;
  uint32_t id_ = UINT32_MAX;  // the context's interned id; UINT32_MAX: not made yet
  bool reset_ = false;
  std::unordered_map<BlockKey, Change> changed_;
};

// What a round of the catch-up sends for `blocks` (a Take's): each with its copies in
// `index` now (read under the state's lock by the caller), made anew when it went away
// since and exists again.
std::vector<MovedBlock> MovedBlocks(const Index& index, const ContextKey& context,
                                    std::span<const TappedBlock> blocks);

}  // namespace kvatlas::server
