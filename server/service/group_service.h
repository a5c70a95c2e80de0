// The raft groups of the cluster as GET /v1/groups shows them (docs/api.md §Groups;
// docs/scaling.md): per group its id, members, leader, contexts, entries, last snapshot and
// applied index, with the placement directory's epoch. A cluster runs one group today
// (group 1, directory epoch 0: no directory), which this server hosts. Safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
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
};

struct GroupsView {
  Epoch epoch = 0;
  std::vector<GroupView> groups;
};

// kUnavailable when this server runs without replication.
[[nodiscard]] Result<GroupsView> ViewGroups(const Services& services);
[[nodiscard]] nlohmann::json GroupsViewJson(const GroupsView& view);
// The per-group gauges of GET /metrics (docs/api.md §Metrics), labelled group="ID", and
// kvatlas_placement_epoch.
[[nodiscard]] std::string RenderGroupMetrics(const GroupsView& view);

}  // namespace kvatlas::server
