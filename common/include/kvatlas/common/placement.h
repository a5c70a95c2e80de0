// The placement directory of a multi-group cluster (docs/scaling.md): which raft group owns
// each context, or — for a context split because it outgrew one group — each range of its
// block-key space. Every change makes a new version with the next epoch; servers and clients
// hold a copy, and a request sent with an older epoch than the owner knows is answered with
// the current epoch so that the sender refreshes its copy and retries.
//
// A context that is not in the directory has never been written: no group holds any of it.
// Its first write assigns it (Assign) to a group that takes new contexts.
//
// Plain values: thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/export.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

using GroupId = uint32_t;
using Epoch = uint64_t;

// Group ids are 1..kMaxGroupId (0 names no group).
inline constexpr GroupId kNoGroup = 0;
inline constexpr GroupId kMaxGroupId = 65'535;
// Bounds that keep a directory (and so every client's copy) small.
inline constexpr size_t kMaxGroupMembers = 15;
inline constexpr size_t kMaxRangesPerContext = 1'024;

// One data group: its replicas (server ids, e.g. "10.0.0.5:7000") and whether the directory
// may assign new contexts to it (a group near its snapshot bound stops taking them). No
// members (an empty list, encoded as a member count of 0) names a group that every server of
// the cluster hosts (docs/scaling.md §Groups on every server): the directory group adds a
// group it is told of that way (PlaceContextCommand, SetGroupAcceptingCommand).
struct GroupDescriptor {
  GroupId id = kNoGroup;
  std::vector<std::string> members;
  bool accepting = true;

  friend bool operator==(const GroupDescriptor&, const GroupDescriptor&) = default;
};

// kInvalidArgument for more than kMaxGroupMembers, an empty or repeated member. No members
// is valid: a group on every server (GroupDescriptor).
[[nodiscard]] KVATLAS_EXPORT Status ValidateGroupMembers(const std::vector<std::string>& members);

// A range of a context's block-key space: from `start` (inclusive) to the next range's start
// (or to the end of the space), owned by `group`.
struct KeyRange {
  BlockKey start = 0;
  GroupId group = kNoGroup;

  friend bool operator==(const KeyRange&, const KeyRange&) = default;
};

// Where one context lives: ranges ascending by start, the first starting at 0, neighbours on
// different groups (equal neighbours are merged). An unsplit context has one range.
struct ContextPlacement {
  std::vector<KeyRange> ranges;

  bool split() const { return ranges.size() > 1; }
  // The group owning `key`.
  KVATLAS_EXPORT GroupId GroupOf(BlockKey key) const;
  // The distinct groups, ascending.
  KVATLAS_EXPORT std::vector<GroupId> Groups() const;

  friend bool operator==(const ContextPlacement&, const ContextPlacement&) = default;
};

// Orders contexts field by field (the directory's map, and its encoding, are sorted by it).
struct KVATLAS_EXPORT ContextKeyLess {
  bool operator()(const ContextKey& a, const ContextKey& b) const;
};

class KVATLAS_EXPORT PlacementDirectory {
 public:
  using Contexts = std::map<ContextKey, ContextPlacement, ContextKeyLess>;

  // Epoch 0, no groups, no contexts.
  PlacementDirectory() = default;

  Epoch epoch() const { return epoch_; }
  const std::map<GroupId, GroupDescriptor>& groups() const { return groups_; }
  const Contexts& contexts() const { return contexts_; }

  // The context's placement; null when it was never assigned.
  const ContextPlacement* Find(const ContextKey& context) const;
  const GroupDescriptor* FindGroup(GroupId id) const;

  // Each change below validates, applies and advances the epoch by one, or fails and
  // changes nothing.
  //
  // A new group. kInvalidArgument for an id out of 1..kMaxGroupId, more than
  // kMaxGroupMembers, an empty or repeated member (no members: a group on every server);
  // kAlreadyExists for a known id.
  [[nodiscard]] Status AddGroup(GroupDescriptor group);
  // Replaces a group's members (a replica added, removed or replaced). Errors as AddGroup;
  // kNotFound for an unknown group.
  [[nodiscard]] Status SetMembers(GroupId id, std::vector<std::string> members);
  // Whether the group takes new contexts. kNotFound for an unknown group.
  [[nodiscard]] Status SetAccepting(GroupId id, bool accepting);
  // Places a context never placed before wholly on `group`. kAlreadyExists when the context
  // is placed; kNotFound for an unknown group; kFailedPrecondition when it does not accept.
  [[nodiscard]] Status Assign(const ContextKey& context, GroupId group);
  // Cuts the range holding `at` at `at` (no-op cut when `at` starts a range already) and
  // gives the part from `at` to the next range's start to `group`. The data move is the
  // caller's: the directory only records the result. kNotFound for an unplaced context or an
  // unknown group; kInvalidArgument when the context would pass kMaxRangesPerContext.
  [[nodiscard]] Status SplitAt(const ContextKey& context, BlockKey at, GroupId group);
  // Gives the range starting exactly at `start` (the whole context for 0 on an unsplit one)
  // to `group`. kNotFound for an unplaced context, an unknown group or no range starting at
  // `start`; kInvalidArgument when the range already is on `group`.
  [[nodiscard]] Status MoveRange(const ContextKey& context, BlockKey start, GroupId group);

  // The group a new context goes to: among accepting groups, the one with the fewest
  // `entries` (a group absent from `entries` counts 0), lowest id on ties.
  // kResourceExhausted when no group accepts.
  [[nodiscard]] Result<GroupId> PickGroupForNewContext(
      const std::map<GroupId, uint64_t>& entries) const;

  friend bool operator==(const PlacementDirectory&, const PlacementDirectory&) = default;

 private:
  friend Result<PlacementDirectory> DecodePlacementDirectory(std::string_view bytes);
  Status CheckGroupExists(GroupId id) const;
  // The placement of a placed `context` that a change gives (part of) to existing `group`;
  // kNotFound otherwise.
  Result<ContextPlacement*> PlacementGivenTo(const ContextKey& context, GroupId group);

  Epoch epoch_ = 0;
  std::map<GroupId, GroupDescriptor> groups_;
  Contexts contexts_;
};

// The positions of a query's keys that each group owns, for a lookup fanned out to a split
// context's groups (all positions on one group for an unsplit context).
struct GroupShare {
  GroupId group = kNoGroup;
  std::vector<uint32_t> positions;  // ascending

  friend bool operator==(const GroupShare&, const GroupShare&) = default;
};

// Groups ascending by id; groups owning none of the keys are left out.
[[nodiscard]] KVATLAS_EXPORT std::vector<GroupShare> PartitionKeys(
    const ContextPlacement& placement, std::span<const BlockKey> keys);

// The group of `groups` (1..groups) a context lives in while the directory places it
// nowhere (docs/scaling.md §Groups on every server): 1 + XXH3-64 (seed 0) of the context's
// encoding in the directory with its LoRA and salt left empty (str tenant, str model, "",
// varint block_size, "") modulo `groups`; 1 for `groups` <= 1. A model's LoRA adapters and salts
// share its home, so one engine's event stream (one model; adapters and salts per event)
// goes to one group. Stable: every server and client computes it alike.
[[nodiscard]] KVATLAS_EXPORT GroupId HomeGroup(const ContextKey& context, uint32_t groups);

// The group of `groups` a context lives in: the group `directory` places it on (a split
// context's first range: splits are not made yet) while that is one of the `groups`, else
// its HomeGroup. Servers route every request by it, and clients that route by the directory
// (docs/scaling.md §Clients that route by the directory) compute it alike.
[[nodiscard]] KVATLAS_EXPORT GroupId GroupOfContext(const PlacementDirectory& directory,
                                                    const ContextKey& context, uint32_t groups);

// The servers of `servers` (ids, any order, no repeats) that hold replicas of `group` when
// each group has `replicas` of them (docs/scaling.md §Replicas on some servers): rendezvous
// hashing — the `replicas` servers with the highest XXH3-64 (seed 0) of (u32 group, u64
// server id), both little-endian — returned ascending. All of `servers` (ascending) when
// `replicas` is 0 or at least their count. Adding a server moves about replicas/servers of
// each group's replicas onto it and none between the others; removing one moves only the
// replicas it held. Stable: every server computes it alike.
[[nodiscard]] KVATLAS_EXPORT std::vector<uint64_t> ChooseMembers(GroupId group,
                                                                 std::span<const uint64_t> servers,
                                                                 size_t replicas);

// The directory's binary encoding (docs/scaling.md §Directory encoding): what the directory
// group's log carries and clients cache. Decode validates every invariant the methods
// above keep (kCorruption naming the first broken one), so a decoded directory is one that
// the changes above could have made.
[[nodiscard]] KVATLAS_EXPORT std::string EncodePlacementDirectory(const PlacementDirectory& dir);
[[nodiscard]] KVATLAS_EXPORT Result<PlacementDirectory> DecodePlacementDirectory(
    std::string_view bytes);

}  // namespace kvatlas
