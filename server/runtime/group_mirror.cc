#include "server/runtime/group_mirror.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/internal/log.h"
#include "server/replication/peer_handshake.h"

namespace kvatlas::server {
namespace {

const ClusterMember* FindMember(const ClusterStatus& status, uint64_t id) {
  auto it = std::find_if(status.members.begin(), status.members.end(),
                         [id](const ClusterMember& m) { return m.id == id; });
  return it == status.members.end() ? nullptr : &*it;
}

// Clears `busy` when the change completes; a failure is logged (the next round retries).
ReplicatedLog::Done Completion(std::shared_ptr<std::atomic<bool>> busy, std::string what) {
  return [busy = std::move(busy), what = std::move(what)](Status s) {
    if (!s.ok()) LogWarning(what + ": " + s.ToString() + " (retried)");
    busy->store(false);
  };
}

}  // namespace

GroupMirror::GroupMirror(RaftLog* primary, std::vector<Follower> followers)
    : primary_(primary), task_(kPeriod, [this] { return Round(); }) {
  for (Follower& f : followers) {
    Tracked tracked;
    tracked.follower = f;
    followers_.push_back(std::move(tracked));
  }
}

PeriodicTask::Next GroupMirror::Round() {
  const ClusterStatus primary = primary_->GetStatus();
  for (Tracked& tracked : followers_) Follow(primary, &tracked);
  return kPeriod;
}

void GroupMirror::Follow(const ClusterStatus& primary, Tracked* tracked) {
  if (tracked->busy->load()) return;
  RaftLog* raft = tracked->follower.raft;
  const ClusterStatus status = raft->GetStatus();
  if (status.state != "leader") return;
  const std::string group = "group " + std::to_string(tracked->follower.id);
  // Membership first, by whichever server leads this group, from group 1's configuration
  // as this server knows it (any member knows it): so the server leading group 1 is made a
  // voter here before it is handed the leadership.
  if (!primary.members.empty()) {
    for (const ClusterMember& member : primary.members) {
      if (member.role != "voter") continue;
      const ClusterMember* present = FindMember(status, member.id);
      if (present != nullptr && present->role == "voter") continue;
      const std::string address =
          RaftAddressOfGroup(RaftAddressEndpoint(member.raft_address), tracked->follower.id);
      LogInfo(group + ": adding server " + std::to_string(member.id) + " at " + address +
              " (a voter of group 1)");
      tracked->busy->store(true);
      raft->AddServer(
          member.id, address,
          Completion(tracked->busy, group + ": adding server " + std::to_string(member.id)));
      return;
    }
    for (const ClusterMember& member : status.members) {
      if (FindMember(primary, member.id) != nullptr) continue;
      LogInfo(group + ": removing server " + std::to_string(member.id) + " (not in group 1)");
      tracked->busy->store(true);
      raft->RemoveServer(member.id, Completion(tracked->busy, group + ": removing server " +
                                                                  std::to_string(member.id)));
      return;
    }
  }
  HandOver(primary, status, tracked);
}

void GroupMirror::HandOver(const ClusterStatus& primary, const ClusterStatus& status,
                           Tracked* tracked) {
  const uint64_t preferred = PreferredLeader(primary, tracked->follower.id);
  if (preferred == 0 || preferred == status.id) return;
  const ClusterMember* target = FindMember(status, preferred);
  if (target == nullptr || target->role != "voter") return;  // being added (Follow)
  // Only to a server that can take it now: a transfer to an unreachable or lagging voter
  // would stall the group's writes for an election timeout and then fail.
  if (!target->reachable.value_or(false) || !target->match_index ||
      *target->match_index + kCatchUpSlack < status.last_index) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (tracked->handed_to == preferred && now - tracked->handed_at < kRetryAfter) return;
  const std::string group = "group " + std::to_string(tracked->follower.id);
  LogInfo(group + ": handing leadership to server " + std::to_string(preferred) +
          ", its preferred leader (group 1's leader is server " +
          std::to_string(primary.leader_id) + ")");
  tracked->handed_to = preferred;
  tracked->handed_at = now;
  tracked->busy->store(true);
  tracked->follower.raft->TransferLeadership(
      preferred, Completion(tracked->busy, group + ": leadership transfer"));
}

}  // namespace kvatlas::server
