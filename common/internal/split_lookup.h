// The lookup of a context split over several groups (docs/scaling.md §Split contexts): each
// group owning some of the query's keys answers every copy of each of them (GroupCopies,
// Index::CopiesAt), and MergeSplitLookup walks those copies in query order with the same
// PrefixWalk as Index::Lookup, so a split context answers exactly what one group holding
// all of it would have (tests/unit/server/index/split_lookup_test.cc).
//
// Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/prefix_match.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// One group's part of a split lookup: every copy of the keys it owns, naming holders by
// their index in `holders` (each holder once), so that a copy costs no string.
struct GroupCopies {
  static constexpr uint32_t kNoLocation = UINT32_MAX;
  struct Copy {
    uint32_t position = 0;  // the key's index in the query
    uint32_t holder = 0;    // index into holders
    Tier tier = Tier::kGpu;
    uint32_t location = kNoLocation;  // a SHARED copy's index into locations

    friend bool operator==(const Copy&, const Copy&) = default;
  };
  std::vector<HolderKey> holders;
  std::vector<Copy> copies;  // any order
  std::vector<std::string> locations;

  friend bool operator==(const GroupCopies&, const GroupCopies&) = default;
};

// The LookupResult of a query of `blocks_queried` keys whose copies, from every group, are
// `parts`: prefixes from position 0, the walk stopping at the first position no holder
// extends. As Index::Lookup: `instance_id` (when not empty) keeps only that instance's
// holders and the shared backends; locations are filled when `include_locations` (a SHARED
// copy without one gives ""). Copies at positions ≥ blocks_queried are ignored.
[[nodiscard]] LookupResult MergeSplitLookup(uint32_t blocks_queried,
                                            std::span<const GroupCopies> parts,
                                            std::string_view instance_id, bool include_locations);

}  // namespace kvatlas
