// StreamTally: what a stream's stores and removes found in the index — stores of blocks
// its holder already held, removes of blocks it did not hold. Either count growing fast
// says the stream's report mode (docs/engine-events.md §Report modes) does not match what
// the engine means: a full-mode engine registered as incremental re-reports held blocks,
// an engine with true duplicate copies registered as full removes blocks already gone.
// Counted by the StateMachine on every replica alike, in memory, since the server started.
// Plain values: thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "server/index/index.h"
#include "server/model/command.h"

namespace kvatlas::server {

struct StreamTally {
  uint64_t stored_blocks = 0;   // blocks its stores placed (copies or reports)
  uint64_t held_stores = 0;     // of those, blocks its holder already held in that tier
  uint64_t removed_blocks = 0;  // block hashes its removes named
  uint64_t unheld_removes = 0;  // of those, hashes no copy of its holder answered to

  StreamTally& operator+=(const StreamTally& o) {
    stored_blocks += o.stored_blocks;
    held_stores += o.held_stores;
    removed_blocks += o.removed_blocks;
    unheld_removes += o.unheld_removes;
    return *this;
  }
  friend bool operator==(const StreamTally&, const StreamTally&) = default;
};

// Adds up the CommandTallies of one batch's commands in order. An engine's remove names no
// context, so the mapper sends the same hashes to each context the block may be in (a run
// of RemoveCommands with one holder, tier and hash list): a hash of that run is unheld only
// if no command of the run found it. Counting each command alone would call a block held
// in one context unheld in all the others.
class BatchTally {
 public:
  void AddStore(const CommandTally& t) {
    Flush();
    tally_.stored_blocks += t.stored_blocks;
    tally_.held_stores += t.held_stores;
  }
  void AddRemove(const RemoveCommand& c, const CommandTally& t) {
    // A fan-out names each context once: the run's first context again starts a new run
    // (the same hashes removed twice in a row).
    if (!run_ || run_->holder != c.holder || run_->tier != c.tier || run_->hashes != c.hashes ||
        run_->context == c.context) {
      Flush();
      run_ = &c;
    }
    run_found_ += t.found_removes;
  }
  // Any other command ends a run of removes.
  void AddOther() { Flush(); }

  // The batch's tally; ends the run in progress.
  const StreamTally& Finish() {
    Flush();
    return tally_;
  }

 private:
  void Flush() {
    if (!run_) return;
    const uint64_t named = run_->hashes.size();
    tally_.removed_blocks += named;
    tally_.unheld_removes += named - std::min<uint64_t>(named, run_found_);
    run_ = nullptr;
    run_found_ = 0;
  }

  StreamTally tally_;
  const RemoveCommand* run_ = nullptr;
  uint64_t run_found_ = 0;
};

}  // namespace kvatlas::server
