// ReplicaDropper: frees what a server keeps of a group it no longer holds (docs/scaling.md
// §Dropping a copy). With `replicas` set, a server the group mirror removed from a group
// (its replicas re-placed when servers come or go) keeps its copy — the index in memory,
// the RocksDB records and the raft log — though it never answers from it again (HostsGroup).
//
// Every kPeriod, it takes one group g ≥ 2 of which this server still has a copy (raft holds
// a configuration or a log for it, or the state holds something: a restored data directory
// holds every group, whichever servers the group is then placed on), that the directory records
// without this server and that PlaceReplicas of group 1's voters (as this server knows them) does
// not choose for it — a server being added to a group is chosen before it is recorded — and asks
// g's recorded members in turn whether it is released (POST /v1/cluster/released: g's leader
// answers whether its committed configuration names this server). Once released, the
// group drops its copy (Group::DropReplica): it stops its raft member, asks again, and
// only then empties the state and storage and starts raft again on an emptied directory,
// in no configuration, like a joining server. A leader adding the server back later sends
// it the group whole, as to any new member.
//
// Why a committed configuration, asked with the member stopped: a copy dropped while raft
// still counted it could lose an entry committed by a majority that included it; once the
// leader's configuration without it is committed, every later leader's is (or one adding
// it back, which finds it stopped and then empty).
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's, and
// the drops too (one at a time, a few seconds at most: raft's stop and restart, the
// storage's clear and compaction).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/internal/periodic_task.h"
#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"
#include "server/runtime/group.h"

namespace kvatlas::server {

class ReplicaDropper {
 public:
  struct Options {
    uint64_t self = 0;    // this server's id
    size_t replicas = 0;  // the `replicas` setting (> 0)
    // Group 1's raft (its voters choose the members) and directory (the recorded members);
    // the groups 2..G this server runs. All outlive the dropper (or its Stop).
    RaftLog* primary = nullptr;
    std::function<std::vector<uint64_t>(GroupId)> recorded;
    std::vector<Group*> groups;
    // Asks server `member` whether this server is released from group `group`: true when
    // that member leads the group and its committed configuration does not name this
    // server; false, or an error (not the leader, unreachable), otherwise. Task's thread.
    std::function<Result<bool>(GroupId group, uint64_t member)> ask;
    // Called after a group's copy was dropped (metrics); may be empty.
    std::function<void(GroupId)> dropped;
  };

  explicit ReplicaDropper(Options options);

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }
  void Stop() { task_.Stop(); }

  static constexpr std::chrono::milliseconds kPeriod{2'000};

  // One round (the task's body; tests call it directly): the groups it dropped (0 or 1).
  size_t DropOne();

 private:
  // Whether `group`'s recorded members (in turn) say this server is released from it: the
  // first answer from its leader, false when none of them leads it.
  Result<bool> AskMembers(GroupId group, const std::vector<uint64_t>& members) const;

  const Options options_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
