#include "server/runtime/snapshot_guard.h"

#include <string>

#include "common/internal/log.h"

namespace kvatlas::server {

SnapshotGuard::SnapshotGuard(uint64_t stop_bytes, double resume_fraction, Applier* applier,
                             const ReplicatedLog* log)
    : stop_bytes_(stop_bytes),
      resume_below_(static_cast<uint64_t>(static_cast<double>(stop_bytes) * resume_fraction)),
      applier_(applier),
      log_(log),
      task_(std::chrono::milliseconds(0), [this] { return Round(); }) {}

PeriodicTask::Next SnapshotGuard::Round() {
  const uint64_t bytes = log_->GetMetrics().last_snapshot_bytes;
  if (!refusing_ && bytes >= stop_bytes_) {
    refusing_ = true;
    const std::string reason = "its last raft snapshot is " + std::to_string(bytes) +
                               " bytes, at or past snapshot_stop_bytes " +
                               std::to_string(stop_bytes_) +
                               " (docs/scaling.md §Policy); the contexts it holds go on";
    LogWarning("the group takes no new contexts: " + reason);
    applier_->SetNewContextsRefused(reason);
  } else if (refusing_ && bytes < resume_below_) {
    refusing_ = false;
    LogInfo("the group takes new contexts again: its last raft snapshot is " +
            std::to_string(bytes) + " bytes, below " + std::to_string(resume_below_));
    applier_->SetNewContextsRefused("");
  }
  return kPeriod;
}

}  // namespace kvatlas::server
