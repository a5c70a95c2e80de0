#include "server/service/group_service.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "kvatlas/common/json_codec.h"
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
  for (GroupView& group : view.groups) {
    group.preferred_leader = PreferredLeader(view.groups.front().status, group.id, draining);
    const GroupDescriptor* listed = directory->FindGroup(group.id);
    group.directory_accepting = listed == nullptr || listed->accepting;
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
                      {"refusing_new_contexts", g.refusing_new_contexts.empty()
                                                    ? nlohmann::json(nullptr)
                                                    : nlohmann::json(g.refusing_new_contexts)}});
  }
  return {{"epoch", view.epoch}, {"groups", std::move(groups)}};
}

nlohmann::json DirectoryJson(const Services& services) {
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(services).directory();
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& [id, group] : directory->groups()) {
    groups.push_back({{"id", id}, {"accepting", group.accepting}});
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
