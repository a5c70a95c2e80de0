// SnapshotGuard: the policy that keeps a group from growing into libraft 0.15's snapshot
// failure (a snapshot of 2 GiB or more cannot be written: docs/limits.md). Once started,
// and then every second, it reads the size of the group's last raft snapshot on this
// server -- taken here, or loaded as the server started (so a restarted server refuses from
// its first round), 0 before either; at or past `stop_bytes` it refuses stores into
// contexts the group has never held (Applier::SetNewContextsRefused), so that only the
// contexts it has grow; below `resume_fraction` × `stop_bytes` it takes new contexts again
// (the margin keeps it from flapping at the boundary). Stores into known contexts, removals and
// clears go on.
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/internal/periodic_task.h"
#include "server/state/applier.h"
#include "server/state/replicated_log.h"

namespace kvatlas::server {

// New contexts are taken again below this fraction of the stop bound (the placement
// policy's resume_fraction).
inline constexpr double kSnapshotResumeFraction = 0.75;

class SnapshotGuard {
 public:
  // `applier` and `log` must outlive the guard (or its Stop). stop_bytes > 0.
  SnapshotGuard(uint64_t stop_bytes, double resume_fraction, Applier* applier,
                const ReplicatedLog* log);

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }  // ends the loop without waiting for it
  void Stop() { task_.Stop(); }                // idempotent

 private:
  PeriodicTask::Next Round();

  static constexpr std::chrono::milliseconds kPeriod{1'000};
  const uint64_t stop_bytes_;
  const uint64_t resume_below_;
  Applier* applier_;
  const ReplicatedLog* log_;
  bool refusing_ = false;  // the task's thread only
  PeriodicTask task_;      // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
