#include "server/service/group_service.h"

#include <tuple>
#include <utility>

#include "server/service/cluster_service.h"

namespace kvatlas::server {

Result<GroupsView> ViewGroups(const Services& services) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  GroupView group;
  group.status = services.log->GetStatus();
  group.log = services.log->GetMetrics();
  std::tie(group.contexts, group.entries, group.revision) =
      services.machine->Read([](const Index& index, Revision revision) {
        const IndexStats stats = index.Stats();
        return std::make_tuple(stats.contexts, stats.entries, revision);
      });
  GroupsView view;
  view.groups.push_back(std::move(group));
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
                      {"this_server", g.status.state},
                      {"contexts", g.contexts},
                      {"entries", g.entries},
                      {"snapshot_bytes", g.log.last_snapshot_bytes},
                      {"snapshot_failures", g.log.snapshot_failures},
                      {"applied_index", g.status.applied_index},
                      {"revision", g.revision},
                      {"accepting", true}});
  }
  return {{"epoch", view.epoch}, {"groups", std::move(groups)}};
}

}  // namespace kvatlas::server
