#include "server/service/group_service.h"

#include <algorithm>
#include <tuple>
#include <utility>

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

uint64_t PreferredLeader(const ClusterStatus& primary, GroupId group) {
  std::vector<uint64_t> voters;
  for (const ClusterMember& m : primary.members) {
    if (m.role == "voter") voters.push_back(m.id);
  }
  std::sort(voters.begin(), voters.end());
  const auto leader = std::find(voters.begin(), voters.end(), primary.leader_id);
  if (primary.leader_id == 0 || leader == voters.end() || group == kNoGroup) return 0;
  const size_t start = static_cast<size_t>(leader - voters.begin());
  return voters[(start + group - 1) % voters.size()];
}

Result<GroupsView> ViewGroups(const Services& services) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  GroupsView view;
  if (services.groups == nullptr) {
    view.groups.push_back(ViewGroup(services));
  } else {
    for (const Services& group : *services.groups) view.groups.push_back(ViewGroup(group));
  }
  for (GroupView& group : view.groups) {
    group.preferred_leader = PreferredLeader(view.groups.front().status, group.id);
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
                      {"accepting", g.refusing_new_contexts.empty()},
                      {"refusing_new_contexts", g.refusing_new_contexts.empty()
                                                    ? nlohmann::json(nullptr)
                                                    : nlohmann::json(g.refusing_new_contexts)}});
  }
  return {{"epoch", view.epoch}, {"groups", std::move(groups)}};
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
       [](const GroupView& g) { return uint64_t{g.refusing_new_contexts.empty()}; }},
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
