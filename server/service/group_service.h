// The raft groups of the cluster as GET /v1/groups shows them (docs/api.md §Groups;
// docs/scaling.md): per group its id, members, leader, contexts, entries, last snapshot and
// applied index, with the placement directory's epoch; and the directory itself (GET
// /v1/directory). Safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"
#include "server/service/services.h"

namespace kvatlas::server {

// The id of the one group a cluster runs today.
inline constexpr GroupId kOnlyGroup = 1;

struct GroupView {
  GroupId id = kOnlyGroup;
  ClusterStatus status;  // members, leader and applied index, as this server knows them
  uint64_t contexts = 0;
  uint64_t entries = 0;
  LogMetrics log;  // the last snapshot's bytes and the failed snapshots, on this server
  Revision revision = 0;
  // Whether the group takes new contexts on this server, and why not (its snapshot guard,
  // docs/scaling.md §Policy).
  std::string refusing_new_contexts;
  // PreferredLeader of the group from group 1's status on this server (0: unknown).
  uint64_t preferred_leader = 0;
  // The placement directory's word (docs/scaling.md §Placed contexts): whether it places
  // new contexts here, and how many contexts it places here (off their home groups).
  bool directory_accepting = true;
  uint64_t placed_contexts = 0;
  // The servers the directory records as holding the group (RecordedMembers; empty: none
  // recorded), and whether this server answers for it from its own replica (HostsGroup).
  std::vector<uint64_t> recorded_members;
  bool hosted = true;
};

struct GroupsView {
  Epoch epoch = 0;
  // This server's replication factor (Services::replicas; 0: every group on every server).
  size_t replication_factor = 0;
  std::vector<GroupView> groups;
};

// The server that should lead group `group` (docs/scaling.md §Groups on every server,
// leaders spread), from group 1's status as one server knows it: group 1's voters that are
// not `draining` (DrainCommand; ascending ids), in ascending id, as a ring starting at
// group 1's leader (past it, at the next id, when the leader drains); the (group - 1)-th
// of it (mod the voters). So with S voters and G groups, every server leads G/S groups
// (one more for some), group 1's leader included, a transfer of group 1 moves the others
// with it, and a draining server is nobody's preferred leader, group 1's included. 0 while
// group 1's leader is unknown or not a voter, or every voter drains.
[[nodiscard]] uint64_t PreferredLeader(const ClusterStatus& primary, GroupId group,
                                       std::span<const uint64_t> draining = {});

// The preferred leaders of groups 1 to `groups` (index g - 1): PreferredLeader's each, or
// with `replicas` (docs/scaling.md §Replicas on some servers) fewer than group 1's voters,
// each group g ≥ 2 led by one of its members (PlaceReplicas of group 1's voters), not
// draining, spread: groups 2, 3, … in turn each to the member leading the fewest so far
// (group 1 counted for its leader), the earliest in the ring on ties, then moved while a
// group's leader leads two more than another of its members. 0 for a group whose members
// all drain, or while group 1's leader is unknown.
[[nodiscard]] std::vector<uint64_t> PreferredLeaders(const ClusterStatus& primary, size_t groups,
                                                     std::span<const uint64_t> draining,
                                                     size_t replicas);

// kUnavailable when this server runs without replication.
[[nodiscard]] Result<GroupsView> ViewGroups(const Services& services);
[[nodiscard]] nlohmann::json GroupsViewJson(const GroupsView& view);
// The per-group gauges of GET /metrics (docs/api.md §Metrics), labelled group="ID", and
// kvatlas_placement_epoch.
[[nodiscard]] std::string RenderGroupMetrics(const GroupsView& view);

// GET /v1/directory: the placement directory as this server has applied it (group 1's
// state): its epoch, the groups it lists (accepting or not) and every context it places,
// with its ranges. On a single-group server, epoch 0 and nothing listed.
[[nodiscard]] nlohmann::json DirectoryJson(const Services& services);

}  // namespace kvatlas::server
