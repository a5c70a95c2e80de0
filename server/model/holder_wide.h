// SettleHolderWide: what a move's accept does about one holder's holder-wide commands
// (docs/scaling.md §Moves), from the fan-out ids the source group A had applied for the
// holder at the fence (the last revision of A the moved copies reflect) and those the
// destination group B has applied at the accept (each group's Registry::holder_wide
// record: its last kHolderWideKept, oldest first).
//
// A command B applied and A had not by the fence never reached the moved copies (B keeps
// holder-wide commands off a context it imports; A applied it after): B applies it to them
// at the accept. A command A applied and B has not is in the copies already: B skips it
// for the moved context when it comes.
//
// A record of fewer than kHolderWideKept ids is the group's whole history for the holder. A
// full one may have forgotten old ids, so an id the other group has and it lacks is taken
// as one it applied long ago — unless the other group applied it after the newest id both
// records hold, which no group forgets first. When a full record shares no id with the
// other group's, nothing aligns them and the move must not guess.
//
// Pure function: safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvatlas/common/result.h"

namespace kvatlas::server {

struct HolderWideSettlement {
  // B applied a command A had not: B drops the holder's moved copies (every holder-wide
  // command removes all of the holder's copies, so once is enough).
  bool clear = false;
  // Ids A applied and B has not: B skips them for the moved context when they come.
  std::vector<uint64_t> skip;

  friend bool operator==(const HolderWideSettlement&, const HolderWideSettlement&) = default;
};

// `source`: A's ids at the fence; `destination`: B's at the accept (each oldest first).
// kFailedPrecondition when a full record shares no id with the other, non-empty one.
[[nodiscard]] Result<HolderWideSettlement> SettleHolderWide(std::span<const uint64_t> source,
                                                            std::span<const uint64_t> destination);

}  // namespace kvatlas::server
