// GroupMirror: keeps a server's groups 2..G following group 1 (docs/scaling.md §Groups on
// every server), so that the cluster's membership is managed once — on group 1, as for a
// single-group cluster (`kvatlas cluster add/remove`) — and spreads the groups' leaders
// over the servers. Every 100 ms, for each other group this server leads:
//
//   - Membership: it makes the group's members those of group 1 as this server knows
//     them (every member knows group 1's configuration) — it adds every voter of group 1
//     the group lacks (at its raft address with the group's suffix, tcp_transport.h
//     §Groups on one port) and removes every member group 1 no longer has, one change in
//     flight per group. With `replicas` (docs/scaling.md §Replicas on some servers) the
//     members are the `replicas` voters of group 1 that PlaceReplicas picks for the group:
//     it adds those the group lacks, then records in the directory the group's voters
//     that are chosen (SetGroupMembersCommand in group 1), and only once this server's
//     directory records a member without it removes that member — so no server takes a
//     replica for the group's once raft stops counting it. A leader not chosen hands the
//     group to a chosen member first (its preferred leader), which then removes it.
//   - Leadership: it hands the group's leadership to the group's preferred leader
//     (PreferredLeaders, group_service.h: group 1's voters in a ring that starts at group 1's
//     leader, so the groups' leaders are spread evenly and follow a transfer of group 1; with
//     `replicas`, one of the group's members, spread the same way), once that
//     server is a voter of the group, reachable and caught up (its match index within kCatchUpSlack
//     of the log). A server the mirror handed a group to and that gave it back (a server low on
//     disk hands over whatever it leads) is not handed that group again for kRetryAfter.
//
// And while this server drains (DrainCommand: docs/operations.md §Draining a server) it
// hands every group it leads, group 1 included, to the group's preferred leader, which is
// then another server; or, when that one cannot take it now, to any other voter that can
// and does not drain. So the mirror runs on every server of a cluster, with one group too.
//
// A server known to run another group count or replication factor than group 1's leader
// (its announcement refused: Services::shape_mismatch) would place replicas by another rule:
// its mirror changes no group's members and hands over what it leads, as a draining one.
//
// A server joining a running cluster starts its other groups with an empty configuration,
// as it starts group 1; once the cluster adds it to group 1, the mirror adds it to the rest.
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's; the
// membership and transfer callbacks on the groups' raft threads (an atomic flag each).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/internal/periodic_task.h"
#include "kvatlas/common/placement.h"
#include "server/replication/raft_log.h"
#include "server/service/group_service.h"

namespace kvatlas::server {

class GroupMirror {
 public:
  struct Follower {
    GroupId id = kNoGroup;
    RaftLog* raft = nullptr;
  };
  // How a group's members are recorded in the directory (replicas > 0 only), from the task's
  // thread: `recorded` returns the members this server's directory records for a group
  // (RecordedMembers; empty: none); `record` submits SetGroupMembersCommand to group 1 and
  // calls `done` once (on any thread) when it was applied or failed.
  struct Records {
    std::function<std::vector<uint64_t>(GroupId)> recorded;
    std::function<void(GroupId, std::vector<uint64_t>, std::function<void(Status)> done)> record;
  };
  // `primary` is group 1's raft; every raft must outlive the mirror (or its Stop).
  // `draining` returns the servers that drain (group 1's StateMachine::DrainingServers),
  // from the task's thread. `self` is this server's id; `replicas` the servers per group
  // (0: every server; then `records` is not used). `disagrees` (from the task's thread;
  // none: never) is true while this server is known to run another group count or
  // replication factor than group 1's leader.
  GroupMirror(uint64_t self, RaftLog* primary, std::function<std::vector<uint64_t>()> draining,
              std::vector<Follower> followers, size_t replicas = 0, Records records = {},
              std::function<bool()> disagrees = {});

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }
  void Stop() { task_.Stop(); }

  static constexpr std::chrono::milliseconds kPeriod{100};
  // A voter whose match index is this close to the leader's last index is caught up enough
  // to take the leadership (libraft sends it what it lacks before handing over).
  static constexpr uint64_t kCatchUpSlack = 128;
  // How long a group is not handed again to the server it was last handed to.
  static constexpr std::chrono::seconds kRetryAfter{10};

 private:
  struct Tracked {
    Follower follower;
    // A membership change or leadership transfer is in flight (set here, cleared on the
    // group's raft thread when it completes).
    std::shared_ptr<std::atomic<bool>> busy = std::make_shared<std::atomic<bool>>(false);
    // The server this group was last handed to, and when (the task's thread only).
    uint64_t handed_to = 0;
    std::chrono::steady_clock::time_point handed_at;
  };

  PeriodicTask::Next Round();
  void Follow(const ClusterStatus& primary, std::span<const uint64_t> draining, Tracked* tracked);
  // The membership step of Follow; true when it started a change (or a record).
  bool ChangeMembers(const ClusterStatus& primary, const ClusterStatus& status, Tracked* tracked);
  // The leadership step of Follow, once the group's membership is group 1's (for group 1
  // itself: only while this server drains).
  void HandOver(const ClusterStatus& primary, std::span<const uint64_t> draining,
                const ClusterStatus& status, Tracked* tracked);

  const uint64_t self_;
  RaftLog* primary_;
  const std::function<std::vector<uint64_t>()> draining_;
  const size_t replicas_;
  const Records records_;
  const std::function<bool()> disagrees_;
  Tracked primary_tracked_;  // group 1, handed over only while this server drains
  // This round's PreferredLeaders and PlaceReplicas of group 1's voters, by group id - 1
  // (the task's thread only).
  std::vector<uint64_t> preferred_;
  std::vector<std::vector<uint64_t>> placement_;
  bool disagreed_ = false;  // this round's `disagrees`
  std::vector<Tracked> followers_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
