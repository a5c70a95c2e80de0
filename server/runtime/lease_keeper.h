// LeaseKeeper: the leader's side of holder leases (docs/leases.md). Every check interval
// of `leases` it proposes an ExpireHolderCommand for each holder whose lease ran out
// (LeaseTracker::DueExpiries; none on a follower) and waits, at most `apply_wait`, for it
// to be applied; an expiry not applied in time is proposed again by a later check if the
// holder still has entries (a second one clears nothing). Run only when leases are on.
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's.
#pragma once

#include <chrono>

#include "common/internal/periodic_task.h"
#include "server/state/applier.h"
#include "server/state/lease_tracker.h"

namespace kvatlas::server {

class LeaseKeeper {
 public:
  // `leases` and `applier` must outlive the keeper (or its Stop). `apply_wait` bounds how
  // long Stop may wait for a round in progress.
  LeaseKeeper(LeaseTracker* leases, Applier* applier, std::chrono::milliseconds apply_wait);

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }  // ends the loop without waiting for it
  void Stop() { task_.Stop(); }                // idempotent

 private:
  PeriodicTask::Next Round();

  LeaseTracker* leases_;
  Applier* applier_;
  const std::chrono::milliseconds apply_wait_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
