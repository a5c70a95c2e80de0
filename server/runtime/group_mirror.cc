#include "server/runtime/group_mirror.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/internal/log.h"
#include "server/placement/replica_placement.h"
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

bool Contains(std::span<const uint64_t> ids, uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Whether `member` can take a group's leadership now: a reachable voter within kCatchUpSlack
// of the log (a transfer to an unreachable or lagging voter would stall the group's writes
// for an election timeout and then fail).
bool CanLead(const ClusterMember* member, const ClusterStatus& status, uint64_t slack) {
  return member != nullptr && member->role == "voter" && member->reachable.value_or(false) &&
         member->match_index && *member->match_index + slack >= status.last_index;
}

}  // namespace

GroupMirror::GroupMirror(uint64_t self, RaftLog* primary,
                         std::function<std::vector<uint64_t>()> draining,
                         std::vector<Follower> followers, size_t replicas, Records records,
                         std::function<bool()> disagrees)
    : self_(self),
      primary_(primary),
      draining_(std::move(draining)),
      replicas_(replicas),
      records_(std::move(records)),
      disagrees_(std::move(disagrees)),
      task_(kPeriod, [this] { return Round(); }) {
  primary_tracked_.follower = {GroupId{1}, primary};
  for (Follower& f : followers) {
    Tracked tracked;
    tracked.follower = f;
    followers_.push_back(std::move(tracked));
  }
}

PeriodicTask::Next GroupMirror::Round() {
  const ClusterStatus primary = primary_->GetStatus();
  std::vector<uint64_t> draining = draining_();
  disagreed_ = disagrees_ && disagrees_();
  if (disagreed_ && !Contains(draining, self_)) draining.push_back(self_);
  preferred_ = PreferredLeaders(primary, 1 + followers_.size(), draining, replicas_);
  std::vector<uint64_t> voters;
  for (const ClusterMember& member : primary.members) {
    if (member.role == "voter") voters.push_back(member.id);
  }
  placement_ = PlaceReplicas(1 + followers_.size(), voters, replicas_);
  if (Contains(draining, self_) && primary.state == "leader" && !primary_tracked_.busy->load()) {
    HandOver(primary, draining, primary, &primary_tracked_);
  }
  for (Tracked& tracked : followers_) Follow(primary, draining, &tracked);
  return kPeriod;
}

void GroupMirror::Follow(const ClusterStatus& primary, std::span<const uint64_t> draining,
                         Tracked* tracked) {
  if (tracked->busy->load()) return;
  const ClusterStatus status = tracked->follower.raft->GetStatus();
  if (status.state != "leader") return;
  // Membership first, by whichever server leads this group, from group 1's configuration
  // as this server knows it (any member knows it): so the server leading group 1 is made a
  // voter here before it is handed the leadership.
  if (!disagreed_ && !primary.members.empty() && ChangeMembers(primary, status, tracked)) return;
  HandOver(primary, draining, status, tracked);
}

bool GroupMirror::ChangeMembers(const ClusterStatus& primary, const ClusterStatus& status,
                                Tracked* tracked) {
  RaftLog* raft = tracked->follower.raft;
  const GroupId id = tracked->follower.id;
  const std::string group = "group " + std::to_string(id);
  if (id < 1 || id > placement_.size()) return false;
  const std::vector<uint64_t>& wanted = placement_[id - 1];
  if (wanted.empty()) return false;
  for (const ClusterMember& member : primary.members) {
    if (!Contains(wanted, member.id)) continue;
    const ClusterMember* present = FindMember(status, member.id);
    if (present != nullptr && present->role == "voter") continue;
    const std::string address = RaftAddressOfGroup(RaftAddressEndpoint(member.raft_address), id);
    LogInfo(group + ": adding server " + std::to_string(member.id) + " at " + address +
            (replicas_ == 0 ? " (a voter of group 1)" : " (chosen to hold a replica)"));
    tracked->busy->store(true);
    raft->AddServer(
        member.id, address,
        Completion(tracked->busy, group + ": adding server " + std::to_string(member.id)));
    return true;
  }
  if (replicas_ > 0) {
    // The record names the chosen voters only, so a member about to be removed is left out
    // of it first; every chosen member is a voter by now.
    std::vector<uint64_t> record;
    for (const ClusterMember& member : status.members) {
      if (member.role == "voter" && Contains(wanted, member.id)) record.push_back(member.id);
    }
    std::sort(record.begin(), record.end());
    if (!record.empty() && records_.recorded(id) != record) {
      tracked->busy->store(true);
      records_.record(id, std::move(record),
                      Completion(tracked->busy, group + ": recording its members"));
      return true;
    }
  }
  for (const ClusterMember& member : status.members) {
    const bool keep =
        replicas_ == 0 ? FindMember(primary, member.id) != nullptr : Contains(wanted, member.id);
    // A leader not chosen hands the group over (HandOver) and is removed by the next one.
    if (keep || member.id == status.id) continue;
    LogInfo(group + ": removing server " + std::to_string(member.id) +
            (replicas_ == 0 ? " (not in group 1)" : " (not chosen to hold a replica)"));
    tracked->busy->store(true);
    raft->RemoveServer(member.id, Completion(tracked->busy, group + ": removing server " +
                                                                std::to_string(member.id)));
    return true;
  }
  return false;
}

void GroupMirror::HandOver(const ClusterStatus& primary, std::span<const uint64_t> draining,
                           const ClusterStatus& status, Tracked* tracked) {
  const bool self_drains = Contains(draining, self_);
  const GroupId id = tracked->follower.id;
  uint64_t target = id >= 1 && id <= preferred_.size() ? preferred_[id - 1] : 0;
  if (target == status.id) return;
  if (target == 0 || !CanLead(FindMember(status, target), status, kCatchUpSlack)) {
    // A server that drains does not wait for its groups' preferred leaders: any voter that
    // can take the group now and does not drain will do (the lowest id).
    if (!self_drains) return;
    target = 0;
    for (const ClusterMember& m : status.members) {
      if (m.id == status.id || Contains(draining, m.id) || !CanLead(&m, status, kCatchUpSlack)) {
        continue;
      }
      if (target == 0 || m.id < target) target = m.id;
    }
    if (target == 0) return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!self_drains && tracked->handed_to == target && now - tracked->handed_at < kRetryAfter) {
    return;
  }
  const std::string group = "group " + std::to_string(tracked->follower.id);
  LogInfo(group + ": handing leadership to server " + std::to_string(target) +
          (self_drains ? std::string(" (this server drains)")
                       : ", its preferred leader (group 1's leader is server " +
                             std::to_string(primary.leader_id) + ")"));
  tracked->handed_to = target;
  tracked->handed_at = now;
  tracked->busy->store(true);
  tracked->follower.raft->TransferLeadership(
      target, Completion(tracked->busy, group + ": leadership transfer"));
}

}  // namespace kvatlas::server
