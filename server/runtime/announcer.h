// Announcer: makes this server's REST and RPC addresses part of the replicated state, so
// that other members can forward to it and clients can be redirected to it. While the
// state does not hold them (and the cluster has more than one member), the leader submits
// an AnnounceCommand for itself and a follower POSTs them to the leader's
// /v1/cluster/announce (forwarding.h); polled every 250 ms, failures backing off up to
// 5 s. The first announcement after a start also ends the server's drain, if one was
// recorded (docs/operations.md §Draining a server); a drain asked for later stays. A
// joining server not yet in a configuration also logs when it is added. A leader that
// refuses the announcement because it runs another group count or replication factor
// (CheckClusterShape) is logged as an error and kept in Deps::mismatch, so the server says
// it is not ready and why, until an announcement is taken.
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/internal/periodic_task.h"
#include "server/peer/peer_auth.h"
#include "server/replication/raft_log.h"
#include "server/service/cluster_service.h"
#include "server/service/services.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

class Announcer {
 public:
  struct Deps {  // not owned; each must outlive the announcer (or its Stop)
    StateMachine* machine = nullptr;
    Applier* applier = nullptr;
    RaftLog* raft = nullptr;
    PeerAuth* peer_auth = nullptr;
    ShapeMismatch* mismatch = nullptr;
  };
  // `mine`: the addresses to announce for server `id`, and `shape` what it runs.
  // `awaiting_membership`: this server joins and is in no configuration yet (logged once it
  // is). `apply_wait` bounds each attempt, and so how long Stop may wait for one in progress.
  Announcer(uint64_t id, ServerAddresses mine, ClusterShape shape, bool awaiting_membership,
            std::chrono::milliseconds apply_wait, PeerHttpOptions peer_http, Deps deps);

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }  // ends the loop without waiting for it
  void Stop() { task_.Stop(); }                // idempotent

 private:
  PeriodicTask::Next Round();

  static constexpr std::chrono::milliseconds kPoll{250};
  static constexpr std::chrono::milliseconds kMaxBackoff{5'000};
  static constexpr std::chrono::seconds kRepeatLog{5};
  const uint64_t id_;
  const ServerAddresses mine_;
  const ClusterShape shape_;
  const std::chrono::milliseconds apply_wait_;
  const PeerHttpOptions peer_http_;
  const Deps deps_;
  // The task's thread only.
  bool awaiting_membership_;
  bool confirmed_ = false;  // the state has recorded mine_, not draining, since the start
  std::chrono::milliseconds delay_ = kPoll;
  std::string last_error_;
  // Announcements acknowledged since the start, and when one was last logged: an
  // announcement the state still lacks a round later is logged at most every 5 s, with
  // what the state has applied (a replica that does not apply group 1's log shows here).
  uint64_t announced_ = 0;
  std::chrono::steady_clock::time_point logged_{};
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
