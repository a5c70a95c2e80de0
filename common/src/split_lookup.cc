#include "common/internal/split_lookup.h"

#include <unordered_map>
#include <utility>

namespace kvatlas {
namespace {

// A copy bucketed by position, its holder in the merge's dense ids.
struct MergedCopy {
  uint32_t holder;
  Tier tier;
  const std::string* location;  // null when none
};

}  // namespace

LookupResult MergeSplitLookup(uint32_t blocks_queried, std::span<const GroupCopies> parts,
                              std::string_view instance_id, bool include_locations) {
  LookupResult result;
  result.blocks_queried = blocks_queried;
  // Dense merge-wide holder ids; each part's local index maps to one.
  std::unordered_map<HolderKey, uint32_t, HolderKeyHash> ids;
  std::vector<const HolderKey*> keys;
  std::vector<std::vector<uint32_t>> global(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const HolderKey& holder : parts[p].holders) {
      auto [it, added] = ids.emplace(holder, static_cast<uint32_t>(keys.size()));
      if (added) keys.push_back(&holder);
      global[p].push_back(it->second);
    }
  }
  // Bucket the copies by position (counting sort): offsets[d]..offsets[d + 1].
  std::vector<uint32_t> offsets(size_t{blocks_queried} + 1, 0);
  for (const GroupCopies& part : parts) {
    for (const GroupCopies::Copy& c : part.copies) {
      if (c.position < blocks_queried) ++offsets[c.position + 1];
    }
  }
  for (size_t d = 0; d < blocks_queried; ++d) offsets[d + 1] += offsets[d];
  std::vector<MergedCopy> bucketed(offsets[blocks_queried]);
  {
    std::vector<uint32_t> fill(offsets.begin(), offsets.end() - 1);
    for (size_t p = 0; p < parts.size(); ++p) {
      for (const GroupCopies::Copy& c : parts[p].copies) {
        if (c.position >= blocks_queried) continue;
        const std::string* location =
            c.location < parts[p].locations.size() ? &parts[p].locations[c.location] : nullptr;
        bucketed[fill[c.position]++] = MergedCopy{global[p][c.holder], c.tier, location};
      }
    }
  }

  PrefixWalk walk;
  walk.Reset(keys.size());
  uint32_t found = 0;
  for (uint32_t depth = 0; depth < blocks_queried; ++depth) {
    for (uint32_t i = offsets[depth]; i < offsets[depth + 1]; ++i) {
      const MergedCopy& c = bucketed[i];
      // As Index::Lookup: an instance filter keeps that instance's holders (and shared
      // backends, which BuildLookupAnswer keeps); a holder not seen at depth 0 never counts.
      if (depth == 0 && !instance_id.empty() && keys[c.holder]->id != instance_id) continue;
      walk.Add(c.holder, c.tier);
    }
    if (!walk.EndDepth()) break;
    ++found;
  }
  result.blocks_found = found;

  for (const PrefixWalk::Run& r : walk.SortedRuns()) {
    if (r.disk == 0 && r.shared == 0) continue;
    HolderMatch match = PrefixWalk::MatchOf(r);
    match.holder = *keys[r.holder];
    if (include_locations && r.shared > 0) {
      match.shared_locations.reserve(r.shared);
      for (uint32_t d = 0; d < r.shared; ++d) {
        const std::string* location = nullptr;
        for (uint32_t i = offsets[d]; i < offsets[d + 1] && location == nullptr; ++i) {
          const MergedCopy& c = bucketed[i];
          if (c.holder == r.holder && c.tier == Tier::kShared) location = c.location;
        }
        match.shared_locations.push_back(location == nullptr ? std::string() : *location);
      }
    }
    result.holders.push_back(std::move(match));
  }
  return result;
}

}  // namespace kvatlas
