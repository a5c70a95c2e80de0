#include "server/model/holder_wide.h"

#include <algorithm>
#include <string>

#include "server/model/registration.h"

namespace kvatlas::server {
namespace {

bool Holds(std::span<const uint64_t> ids, uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The ids of `mine` that the group whose record is `theirs` has not applied: every one it
// lacks while `theirs` is complete (shorter than kHolderWideKept); else only those after the
// newest id of `mine` that `theirs` holds (one before it, lacking, was forgotten).
Result<std::vector<uint64_t>> NotAppliedBy(std::span<const uint64_t> mine,
                                           std::span<const uint64_t> theirs) {
  std::vector<uint64_t> missing;
  if (theirs.size() < kHolderWideKept) {
    for (uint64_t id : mine) {
      if (!Holds(theirs, id)) missing.push_back(id);
    }
    return missing;
  }
  size_t newest_common = mine.size();
  for (size_t i = mine.size(); i-- > 0;) {
    if (Holds(theirs, mine[i])) {
      newest_common = i;
      break;
    }
  }
  if (newest_common == mine.size()) {
    if (mine.empty()) return missing;
    return Status::FailedPrecondition(
        "the two groups' records of the holder's last " + std::to_string(kHolderWideKept) +
        " holder-wide commands share none: which of them each applied cannot be told");
  }
  missing.assign(mine.begin() + static_cast<std::ptrdiff_t>(newest_common) + 1, mine.end());
  return missing;
}

}  // namespace

Result<HolderWideSettlement> SettleHolderWide(std::span<const uint64_t> source,
                                              std::span<const uint64_t> destination) {
  HolderWideSettlement settlement;
  KVATLAS_ASSIGN_OR_RETURN(std::vector<uint64_t> only_destination,
                           NotAppliedBy(destination, source));
  settlement.clear = !only_destination.empty();
  KVATLAS_ASSIGN_OR_RETURN(settlement.skip, NotAppliedBy(source, destination));
  return settlement;
}

}  // namespace kvatlas::server
