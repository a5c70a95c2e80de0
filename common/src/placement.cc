#include "kvatlas/common/placement.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace kvatlas {

Status ValidateGroupMembers(const std::vector<std::string>& members) {
  // No members is allowed: a group every server hosts (placement.h).
  if (members.size() > kMaxGroupMembers) {
    return Status::InvalidArgument("a group has at most " + std::to_string(kMaxGroupMembers) +
                                   " members, not " + std::to_string(members.size()));
  }
  std::set<std::string_view> seen;
  for (const std::string& member : members) {
    if (member.empty()) return Status::InvalidArgument("a group member is empty");
    if (!seen.insert(member).second) {
      return Status::InvalidArgument("group member \"" + member + "\" is named twice");
    }
  }
  return Status::Ok();
}

namespace {

// The index of the range holding `key`: the last range starting at or below it.
size_t RangeIndexOf(const std::vector<KeyRange>& ranges, BlockKey key) {
  auto after = std::upper_bound(ranges.begin(), ranges.end(), key,
                                [](BlockKey k, const KeyRange& r) { return k < r.start; });
  return static_cast<size_t>(after - ranges.begin()) - 1;
}

// Merges neighbours on the same group, keeping the invariant of ContextPlacement.
void Coalesce(std::vector<KeyRange>* ranges) {
  std::vector<KeyRange> out;
  out.reserve(ranges->size());
  for (const KeyRange& r : *ranges) {
    if (out.empty() || out.back().group != r.group) out.push_back(r);
  }
  *ranges = std::move(out);
}

}  // namespace

GroupId ContextPlacement::GroupOf(BlockKey key) const {
  if (ranges.empty()) return kNoGroup;
  return ranges[RangeIndexOf(ranges, key)].group;
}

std::vector<GroupId> ContextPlacement::Groups() const {
  std::vector<GroupId> out;
  out.reserve(ranges.size());
  for (const KeyRange& r : ranges) out.push_back(r.group);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool ContextKeyLess::operator()(const ContextKey& a, const ContextKey& b) const {
  return std::tie(a.tenant, a.model, a.lora_name, a.block_size, a.salt) <
         std::tie(b.tenant, b.model, b.lora_name, b.block_size, b.salt);
}

const ContextPlacement* PlacementDirectory::Find(const ContextKey& context) const {
  auto it = contexts_.find(context);
  return it == contexts_.end() ? nullptr : &it->second;
}

const GroupDescriptor* PlacementDirectory::FindGroup(GroupId id) const {
  auto it = groups_.find(id);
  return it == groups_.end() ? nullptr : &it->second;
}

Status PlacementDirectory::CheckGroupExists(GroupId id) const {
  if (groups_.count(id) == 0) return Status::NotFound("no group " + std::to_string(id));
  return Status::Ok();
}

Status PlacementDirectory::AddGroup(GroupDescriptor group) {
  if (group.id == kNoGroup || group.id > kMaxGroupId) {
    return Status::InvalidArgument("group id " + std::to_string(group.id) + " is not in 1.." +
                                   std::to_string(kMaxGroupId));
  }
  if (groups_.count(group.id) != 0) {
    return Status(StatusCode::kAlreadyExists, "group " + std::to_string(group.id) + " exists");
  }
  if (Status s = ValidateGroupMembers(group.members); !s.ok()) return s;
  const GroupId id = group.id;
  groups_.emplace(id, std::move(group));
  ++epoch_;
  return Status::Ok();
}

Status PlacementDirectory::SetMembers(GroupId id, std::vector<std::string> members) {
  if (Status s = CheckGroupExists(id); !s.ok()) return s;
  if (Status s = ValidateGroupMembers(members); !s.ok()) return s;
  groups_[id].members = std::move(members);
  ++epoch_;
  return Status::Ok();
}

Status PlacementDirectory::SetAccepting(GroupId id, bool accepting) {
  if (Status s = CheckGroupExists(id); !s.ok()) return s;
  groups_[id].accepting = accepting;
  ++epoch_;
  return Status::Ok();
}

Status PlacementDirectory::Assign(const ContextKey& context, GroupId group) {
  if (contexts_.count(context) != 0) {
    return Status(StatusCode::kAlreadyExists,
                  "context " + context.ToString() + " is placed already");
  }
  if (Status s = CheckGroupExists(group); !s.ok()) return s;
  if (!groups_[group].accepting) {
    return Status::FailedPrecondition("group " + std::to_string(group) + " takes no new contexts");
  }
  contexts_[context].ranges = {KeyRange{0, group}};
  ++epoch_;
  return Status::Ok();
}

Result<ContextPlacement*> PlacementDirectory::PlacementGivenTo(const ContextKey& context,
                                                               GroupId group) {
  auto it = contexts_.find(context);
  if (it == contexts_.end()) {
    return Status::NotFound("context " + context.ToString() + " is not placed");
  }
  if (Status s = CheckGroupExists(group); !s.ok()) return s;
  return &it->second;
}

Status PlacementDirectory::SplitAt(const ContextKey& context, BlockKey at, GroupId group) {
  Result<ContextPlacement*> placement = PlacementGivenTo(context, group);
  if (!placement.has_value()) return placement.status();
  std::vector<KeyRange> ranges = (*placement)->ranges;
  const size_t i = RangeIndexOf(ranges, at);
  if (ranges[i].start == at) {
    ranges[i].group = group;
  } else {
    ranges.insert(ranges.begin() + static_cast<std::ptrdiff_t>(i) + 1, KeyRange{at, group});
  }
  Coalesce(&ranges);
  if (ranges.size() > kMaxRangesPerContext) {
    return Status::InvalidArgument("context " + context.ToString() + " would have more than " +
                                   std::to_string(kMaxRangesPerContext) + " ranges");
  }
  (*placement)->ranges = std::move(ranges);
  ++epoch_;
  return Status::Ok();
}

Status PlacementDirectory::MoveRange(const ContextKey& context, BlockKey start, GroupId group) {
  Result<ContextPlacement*> placement = PlacementGivenTo(context, group);
  if (!placement.has_value()) return placement.status();
  std::vector<KeyRange>& ranges = (*placement)->ranges;
  const size_t i = RangeIndexOf(ranges, start);
  if (ranges[i].start != start) {
    return Status::NotFound("context " + context.ToString() + " has no range starting at " +
                            std::to_string(start));
  }
  if (ranges[i].group == group) {
    return Status::InvalidArgument("the range is on group " + std::to_string(group) + " already");
  }
  ranges[i].group = group;
  Coalesce(&ranges);
  ++epoch_;
  return Status::Ok();
}

Result<GroupId> PlacementDirectory::PickGroupForNewContext(
    const std::map<GroupId, uint64_t>& entries) const {
  GroupId best = kNoGroup;
  uint64_t best_entries = 0;
  for (const auto& [id, group] : groups_) {
    if (!group.accepting) continue;
    auto it = entries.find(id);
    const uint64_t n = it == entries.end() ? 0 : it->second;
    if (best == kNoGroup || n < best_entries) {
      best = id;
      best_entries = n;
    }
  }
  if (best == kNoGroup) {
    return Status::ResourceExhausted("no group takes new contexts");
  }
  return best;
}

std::vector<GroupShare> PartitionKeys(const ContextPlacement& placement,
                                      std::span<const BlockKey> keys) {
  std::map<GroupId, std::vector<uint32_t>> by_group;
  for (size_t i = 0; i < keys.size(); ++i) {
    by_group[placement.GroupOf(keys[i])].push_back(static_cast<uint32_t>(i));
  }
  std::vector<GroupShare> out;
  out.reserve(by_group.size());
  for (auto& [group, positions] : by_group) out.push_back(GroupShare{group, std::move(positions)});
  return out;
}

}  // namespace kvatlas
