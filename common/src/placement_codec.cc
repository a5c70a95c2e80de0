// The placement directory's binary encoding (docs/scaling.md §Directory encoding), and the
// hashes every server and client places by: a context's home group, a group's members.
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/internal/bytes.h"
#include "common/internal/key_bytes.h"
#include "kvatlas/common/placement.h"

namespace kvatlas {
namespace {

constexpr uint8_t kDirectoryVersion = 1;

Status Broken(const std::string& what) {
  return Status::Corruption("placement directory: " + what);
}

}  // namespace

GroupId HomeGroup(const ContextKey& context, uint32_t groups) {
  if (groups <= 1) return 1;
  std::string bytes;
  PutContextKey(&bytes, ContextKey{context.tenant, context.model, "", context.block_size, ""});
  return static_cast<GroupId>(1 + XXH3_64bits(bytes.data(), bytes.size()) % groups);
}

GroupId GroupOfContext(const PlacementDirectory& directory, const ContextKey& context,
                       uint32_t groups) {
  if (groups <= 1) return 1;
  if (!directory.contexts().empty()) {
    if (const ContextPlacement* placed = directory.Find(context);
        placed != nullptr && placed->ranges.front().group <= groups) {
      return placed->ranges.front().group;
    }
  }
  return HomeGroup(context, groups);
}

std::vector<uint64_t> ChooseMembers(GroupId group, std::span<const uint64_t> servers,
                                    size_t replicas) {
  std::vector<std::pair<uint64_t, uint64_t>> ranked;  // (score, id)
  ranked.reserve(servers.size());
  for (const uint64_t id : servers) {
    std::string bytes;
    PutFixed32(&bytes, group);
    PutFixed64(&bytes, id);
    ranked.emplace_back(XXH3_64bits(bytes.data(), bytes.size()), id);
  }
  if (replicas > 0 && replicas < ranked.size()) {
    // Highest score first; ties (never in practice) by id, so the choice stays total.
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(replicas),
                      ranked.end(), std::greater<>());
    ranked.resize(replicas);
  }
  std::vector<uint64_t> members;
  members.reserve(ranked.size());
  for (const auto& [score, id] : ranked) members.push_back(id);
  std::sort(members.begin(), members.end());
  return members;
}

std::string EncodePlacementDirectory(const PlacementDirectory& dir) {
  std::string out;
  out.push_back(static_cast<char>(kDirectoryVersion));
  PutVarint64(&out, dir.epoch());
  PutVarint64(&out, dir.groups().size());
  for (const auto& [id, group] : dir.groups()) {
    PutVarint64(&out, id);
    PutFlag(&out, group.accepting);
    PutVarint64(&out, group.members.size());
    for (const std::string& member : group.members) PutLengthPrefixed(&out, member);
  }
  PutVarint64(&out, dir.contexts().size());
  for (const auto& [context, placement] : dir.contexts()) {
    PutContextKey(&out, context);
    PutVarint64(&out, placement.ranges.size());
    for (const KeyRange& r : placement.ranges) {
      PutFixed64(&out, r.start);
      PutVarint64(&out, r.group);
    }
  }
  return out;
}

Result<PlacementDirectory> DecodePlacementDirectory(std::string_view bytes) {
  ByteReader in(bytes);
  if (in.U8() != kDirectoryVersion || !in.ok()) return Broken("unknown version");
  PlacementDirectory dir;
  dir.epoch_ = in.Varint64();
  const uint64_t groups = in.Count(3);
  for (uint64_t g = 0; g < groups && in.ok(); ++g) {
    GroupDescriptor group;
    group.id = in.Varint32();
    group.accepting = in.Flag();
    const uint64_t members = in.Count(1);
    if (members > kMaxGroupMembers) return Broken("a group has too many members");
    for (uint64_t m = 0; m < members && in.ok(); ++m) {
      group.members.emplace_back(in.LengthPrefixed());
    }
    if (!in.ok()) break;
    if (group.id == kNoGroup || group.id > kMaxGroupId) return Broken("a group id is out of range");
    if (!dir.groups_.empty() && group.id <= dir.groups_.rbegin()->first) {
      return Broken("group ids are not ascending");
    }
    if (Status s = ValidateGroupMembers(group.members); !s.ok()) return Broken(s.message());
    const GroupId id = group.id;
    dir.groups_.emplace(id, std::move(group));
  }
  const uint64_t contexts = in.Count(7);
  for (uint64_t c = 0; c < contexts && in.ok(); ++c) {
    ContextKey context = ReadContextKey(&in);
    const uint64_t ranges = in.Count(9);
    if (ranges == 0 || ranges > kMaxRangesPerContext) {
      if (!in.ok()) break;
      return Broken("context " + context.ToString() + " has " + std::to_string(ranges) + " ranges");
    }
    ContextPlacement placement;
    placement.ranges.reserve(ranges);
    for (uint64_t r = 0; r < ranges && in.ok(); ++r) {
      KeyRange range;
      range.start = in.Fixed64();
      range.group = in.Varint32();
      placement.ranges.push_back(range);
    }
    if (!in.ok()) break;
    for (size_t r = 0; r < placement.ranges.size(); ++r) {
      const KeyRange& range = placement.ranges[r];
      if (dir.groups_.count(range.group) == 0) {
        return Broken("context " + context.ToString() + " is placed on unknown group " +
                      std::to_string(range.group));
      }
      if (r == 0 ? range.start != 0 : range.start <= placement.ranges[r - 1].start) {
        return Broken("context " + context.ToString() + " has ranges out of order");
      }
      if (r > 0 && range.group == placement.ranges[r - 1].group) {
        return Broken("context " + context.ToString() + " has neighbour ranges on one group");
      }
    }
    if (!dir.contexts_.empty() && !ContextKeyLess()(dir.contexts_.rbegin()->first, context)) {
      return Broken("contexts are not ascending");
    }
    dir.contexts_.emplace(std::move(context), std::move(placement));
  }
  if (!in.Done()) return Broken("truncated or trailing bytes");
  return dir;
}

}  // namespace kvatlas
