#include "server/runtime/replica_dropper.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/internal/log.h"
#include "server/placement/replica_placement.h"

namespace kvatlas::server {
namespace {

bool Contains(const std::vector<uint64_t>& ids, uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

ReplicaDropper::ReplicaDropper(Options options)
    : options_(std::move(options)), task_(kPeriod, [this]() -> PeriodicTask::Next {
        DropOne();
        return kPeriod;
      }) {}

size_t ReplicaDropper::DropOne() {
  if (options_.replicas == 0) return 0;
  const ClusterStatus primary = options_.primary->GetStatus();
  std::vector<uint64_t> voters;
  for (const ClusterMember& member : primary.members) {
    if (member.role == "voter") voters.push_back(member.id);
  }
  if (!Contains(voters, options_.self)) return 0;  // joining, or leaving the cluster
  const std::vector<std::vector<uint64_t>> chosen =
      PlaceReplicas(1 + options_.groups.size(), voters, options_.replicas);
  for (Group* group : options_.groups) {
    const GroupId id = group->id();
    if (id < 2 || id > chosen.size() || Contains(chosen[id - 1], options_.self)) continue;
    const std::vector<uint64_t> recorded = options_.recorded(id);
    if (recorded.empty() || Contains(recorded, options_.self)) continue;
    const ClusterStatus status = group->raft()->GetStatus();
    // No copy here: raft holds nothing, nor does the state (a restored one may, unplaced).
    if (status.members.empty() && status.last_index == 0 && !group->machine()->HoldsAnything()) {
      continue;
    }
    const Result<bool> released = AskMembers(id, recorded);
    if (!released.has_value() || !*released) continue;
    const Result<bool> dropped = group->DropReplica([&] { return AskMembers(id, recorded); });
    if (!dropped.has_value() || !*dropped) continue;
    LogInfo("group " + std::to_string(id) + ": this server's replica was dropped");
    if (options_.dropped) options_.dropped(id);
    return 1;
  }
  return 0;
}

Result<bool> ReplicaDropper::AskMembers(GroupId group, const std::vector<uint64_t>& members) const {
  Status last = Status::Unavailable("no recorded member of group " + std::to_string(group) +
                                    " answered as its leader");
  for (uint64_t member : members) {
    Result<bool> answer = options_.ask(group, member);
    if (answer.has_value()) return answer;
    last = answer.error();
  }
  return last;
}

}  // namespace kvatlas::server
