// DiskWatcher: the policy that keeps a server from filling its disk (libraft 0.15 crashes
// when it does). Every 250 ms it reads the free space of the data directory's filesystem;
// below `min_free_bytes` it refuses writes (Applier::SetWritesRefused) and hands the
// leadership of every group this server leads with more than one voter to any up-to-date
// voter (every round, since there may be none at first); once 10% more than
// `min_free_bytes` is free it accepts writes again (the margin keeps it from flapping at
// the boundary).
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/internal/periodic_task.h"
#include "server/replication/raft_log.h"
#include "server/state/applier.h"

namespace kvatlas::server {

class DiskWatcher {
 public:
  // `appliers` and `rafts` (every group's on this server: they share the disk) must
  // outlive the watcher (or its Stop).
  DiskWatcher(std::string data_dir, uint64_t min_free_bytes, std::vector<Applier*> appliers,
              std::vector<RaftLog*> rafts);

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }  // ends the loop without waiting for it
  void Stop() { task_.Stop(); }                // idempotent; returns once a round in progress has

 private:
  PeriodicTask::Next Round();

  static constexpr std::chrono::milliseconds kPeriod{250};
  const std::string data_dir_;
  const uint64_t low_;
  const uint64_t recovered_;
  std::vector<Applier*> appliers_;
  std::vector<RaftLog*> rafts_;
  bool refusing_ = false;  // the task's thread only
  PeriodicTask task_;      // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
