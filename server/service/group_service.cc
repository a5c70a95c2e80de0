#include "server/service/group_service.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "server/placement/replica_placement.h"
#include "server/service/cluster_service.h"

namespace kvatlas::server {

namespace {

GroupView ViewGroup(const Services& services) {
  GroupView group;
  group.id = services.group;
  group.status = services.log->GetStatus();
  group.log = services.log->GetMetrics();
  std::tie(group.contexts, group.entries, group.revision) =
      services.machine->Read([](const Index& index, Revision revision) {
        const IndexStats stats = index.Stats();
        return std::make_tuple(stats.contexts, stats.entries, revision);
      });
  group.refusing_new_contexts = services.applier->new_contexts_refused();
  return group;
}

}  // namespace

std::vector<uint64_t> RecordedMembers(const PlacementDirectory& directory, GroupId group) {
  std::vector<uint64_t> members;
  const GroupDescriptor* listed = directory.FindGroup(group);
  if (listed == nullptr) return members;
  for (const std::string& member : listed->members) {
    uint64_t id = 0;
    const auto [end, error] = std::from_chars(member.data(), member.data() + member.size(), id);
    if (error == std::errc() && end == member.data() + member.size() && id != 0) {
      members.push_back(id);
    }
  }
  std::sort(members.begin(), members.end());
  return members;
}

bool HostsGroup(const Services& group) {
  // No state to read the directory from (parts of a server assembled in tests): held.
  if (group.group == 1 || (group.cluster == nullptr && group.machine == nullptr)) return true;
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(group).directory();
  if (const GroupDescriptor* listed = directory->FindGroup(group.group);
      listed != nullptr && !listed->members.empty()) {
    const std::string self = std::to_string(group.server_id);
    return std::find(listed->members.begin(), listed->members.end(), self) != listed->members.end();
  }
  if (group.replicas == 0 || group.log == nullptr) return true;
  const ClusterStatus status = group.log->GetStatus();
  return std::any_of(status.members.begin(), status.members.end(), [&](const ClusterMember& m) {
    return m.id == group.server_id && m.role == "voter";
  });
}

Status CheckHostsGroup(const Services& group) {
  if (HostsGroup(group)) return Status::Ok();
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(group).directory();
  const std::vector<uint64_t> members = RecordedMembers(*directory, group.group);
  std::string named;
  for (const uint64_t id : members) named += (named.empty() ? "" : ", ") + std::to_string(id);
  return Status::WrongGroup(
      "this server holds no replica of group " + std::to_string(group.group) +
      (members.empty() ? std::string(" (no members of it are recorded yet)")
                       : " (its members are servers " + named + ", GET /v1/groups)") +
      ": ask one of its members (directory epoch " + std::to_string(directory->epoch()) +
      "); the REST API's lookups and routes ask them themselves");
}

uint64_t PreferredLeader(const ClusterStatus& primary, GroupId group,
                         std::span<const uint64_t> draining) {
  if (primary.leader_id == 0 || group == kNoGroup) return 0;
  std::vector<uint64_t> voters;
  bool leader_votes = false;
  for (const ClusterMember& m : primary.members) {
    if (m.role != "voter") continue;
    leader_votes = leader_votes || m.id == primary.leader_id;
    if (std::find(draining.begin(), draining.end(), m.id) == draining.end()) {
      voters.push_back(m.id);
    }
  }
  if (!leader_votes || voters.empty()) return 0;
  std::sort(voters.begin(), voters.end());
  // The ring starts at group 1's leader, or past it when it drains.
  const auto start = std::lower_bound(voters.begin(), voters.end(), primary.leader_id);
  const size_t first = start == voters.end() ? 0 : static_cast<size_t>(start - voters.begin());
  return voters[(first + group - 1) % voters.size()];
}

std::vector<uint64_t> PreferredLeaders(const ClusterStatus& primary, size_t groups,
                                       std::span<const uint64_t> draining, size_t replicas) {
  std::vector<uint64_t> leaders(groups, 0);
  std::vector<uint64_t> all;  // group 1's voters
  for (const ClusterMember& m : primary.members) {
    if (m.role == "voter") all.push_back(m.id);
  }
  std::sort(all.begin(), all.end());
  for (size_t g = 1; g <= groups; ++g) {
    leaders[g - 1] = PreferredLeader(primary, static_cast<GroupId>(g), draining);
  }
  if (replicas == 0 || replicas >= all.size() || groups < 2 || leaders[0] == 0) return leaders;
  // Each group to one of its members (PlaceReplicas), not draining: groups 2, 3, … in turn
  // to the member leading the fewest so far (group 1 counted for its leader), the earliest
  // in the ring from group 1's leader on ties; then, while a group's leader leads two more
  // than another of its members, to that member (each move lowers the sum of squared
  // counts, so this ends).
  const auto drains = [&](uint64_t id) {
    return std::find(draining.begin(), draining.end(), id) != draining.end();
  };
  const auto ring = [&, first = leaders[0]](uint64_t id) {
    const auto at = [&](uint64_t v) {
      return static_cast<size_t>(std::lower_bound(all.begin(), all.end(), v) - all.begin());
    };
    return (at(id) + all.size() - at(first)) % all.size();
  };
  std::map<uint64_t, size_t> led{{leaders[0], 1}};
  const std::vector<std::vector<uint64_t>> members = PlaceReplicas(groups, all, replicas);
  const auto best_of = [&](const std::vector<uint64_t>& candidates) {
    uint64_t pick = 0;
    for (const uint64_t id : candidates) {
      if (drains(id)) continue;
      if (pick == 0 || std::make_pair(led[id], ring(id)) < std::make_pair(led[pick], ring(pick))) {
        pick = id;
      }
    }
    return pick;
  };
  for (size_t g = 2; g <= groups; ++g) {
    leaders[g - 1] = best_of(members[g - 1]);
    if (leaders[g - 1] != 0) ++led[leaders[g - 1]];
  }
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t g = 2; g <= groups; ++g) {
      const uint64_t current = leaders[g - 1];
      const uint64_t better = best_of(members[g - 1]);
      if (current == 0 || better == 0 || led[better] + 1 >= led[current]) continue;
      --led[current];
      ++led[better];
      leaders[g - 1] = better;
      moved = true;
    }
  }
  return leaders;
}

Result<GroupsView> ViewGroups(const Services& services) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  GroupsView view;
  if (services.groups == nullptr) {
    view.groups.push_back(ViewGroup(services));
  } else {
    for (const Services& group : *services.groups) view.groups.push_back(ViewGroup(group));
  }
  const std::vector<uint64_t> draining = services.machine->DrainingServers();
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(services).directory();
  view.epoch = directory->epoch();
  view.replication_factor = services.replicas;
  const std::vector<uint64_t> preferred =
      PreferredLeaders(view.groups.front().status, view.groups.size(), draining, services.replicas);
  for (GroupView& group : view.groups) {
    group.preferred_leader = preferred[group.id - 1];
    const GroupDescriptor* listed = directory->FindGroup(group.id);
    group.directory_accepting = listed == nullptr || listed->accepting;
    group.recorded_members = RecordedMembers(*directory, group.id);
    group.hosted = services.groups == nullptr || HostsGroup((*services.groups)[group.id - 1]);
  }
  for (const auto& [context, placement] : directory->contexts()) {
    for (const GroupId id : placement.Groups()) {
      if (id >= 1 && id <= view.groups.size()) ++view.groups[id - 1].placed_contexts;
    }
  }
  return view;
}

nlohmann::json GroupsViewJson(const GroupsView& view) {
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupView& g : view.groups) {
    nlohmann::json members = nlohmann::json::array();
    for (const ClusterMember& m : g.status.members) {
      members.push_back({{"id", m.id}, {"role", m.role}});
    }
    groups.push_back({{"id", g.id},
                      {"members", std::move(members)},
                      {"leader_id", g.status.leader_id},
                      {"preferred_leader", g.preferred_leader},
                      {"this_server", g.status.state},
                      {"contexts", g.contexts},
                      {"entries", g.entries},
                      {"snapshot_bytes", g.log.last_snapshot_bytes},
                      {"snapshot_failures", g.log.snapshot_failures},
                      {"applied_index", g.status.applied_index},
                      {"revision", g.revision},
                      {"accepting", g.refusing_new_contexts.empty() && g.directory_accepting},
                      {"placed_contexts", g.placed_contexts},
                      {"replicas", g.recorded_members},
                      {"hosted_here", g.hosted},
                      {"refusing_new_contexts", g.refusing_new_contexts.empty()
                                                    ? nlohmann::json(nullptr)
                                                    : nlohmann::json(g.refusing_new_contexts)}});
  }
  return {{"epoch", view.epoch},
          {"replication_factor", view.replication_factor},
          {"groups", std::move(groups)}};
}

nlohmann::json DirectoryJson(const Services& services) {
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(services).directory();
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& [id, group] : directory->groups()) {
    groups.push_back({{"id", id},
                      {"accepting", group.accepting},
                      {"replicas", RecordedMembers(*directory, id)}});
  }
  nlohmann::json contexts = nlohmann::json::array();
  for (const auto& [context, placement] : directory->contexts()) {
    nlohmann::json item = ContextKeyToJson(context);
    nlohmann::json ranges = nlohmann::json::array();
    for (const KeyRange& range : placement.ranges) {
      ranges.push_back({{"start", range.start}, {"group", range.group}});
    }
    item["home_group"] = HomeGroup(
        context, services.groups == nullptr ? 1 : static_cast<uint32_t>(services.groups->size()));
    item["ranges"] = std::move(ranges);
    contexts.push_back(std::move(item));
  }
  return {{"epoch", directory->epoch()},
          {"revision", ClusterState(services).applied_revision()},
          {"groups", std::move(groups)},
          {"contexts", std::move(contexts)}};
}

std::string RenderGroupMetrics(const GroupsView& view) {
  std::string out =
      "# HELP kvatlas_placement_epoch The placement directory's epoch (0: one group, no "
      "directory).\n# TYPE kvatlas_placement_epoch gauge\nkvatlas_placement_epoch " +
      std::to_string(view.epoch) + "\n";
  struct Gauge {
    const char* name;
    const char* help;
    uint64_t (*value)(const GroupView&);
  };
  static constexpr Gauge kGauges[] = {
      {"kvatlas_group_entries", "Entries (block x holder x tier) the group holds.",
       [](const GroupView& g) { return g.entries; }},
      {"kvatlas_group_contexts", "Contexts the group holds.",
       [](const GroupView& g) { return g.contexts; }},
      {"kvatlas_group_leader_id", "The group's leader as this server knows it (0: unknown).",
       [](const GroupView& g) { return g.status.leader_id; }},
      {"kvatlas_group_members", "Members of the group's raft configuration.",
       [](const GroupView& g) { return uint64_t{g.status.members.size()}; }},
      {"kvatlas_group_snapshot_bytes",
       "Size of the group's last raft snapshot taken on this server (0 before the first).",
       [](const GroupView& g) { return g.log.last_snapshot_bytes; }},
      {"kvatlas_group_applied_index", "The group's raft log index applied on this server.",
       [](const GroupView& g) { return g.status.applied_index; }},
      {"kvatlas_group_accepting", "1 while the group takes new contexts.",
       [](const GroupView& g) {
         return uint64_t{g.refusing_new_contexts.empty() && g.directory_accepting};
       }},
  };
  for (const Gauge& gauge : kGauges) {
    out += std::string("# HELP ") + gauge.name + " " + gauge.help + "\n# TYPE " + gauge.name +
           " gauge\n";
    for (const GroupView& g : view.groups) {
      out += std::string(gauge.name) + "{group=\"" + std::to_string(g.id) + "\"} " +
             std::to_string(gauge.value(g)) + "\n";
    }
  }
  return out;
}

}  // namespace kvatlas::server
