#include "server/runtime/disk_watcher.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <utility>

#include "common/internal/log.h"

namespace kvatlas::server {

DiskWatcher::DiskWatcher(std::string data_dir, uint64_t min_free_bytes,
                         std::vector<Applier*> appliers, std::vector<RaftLog*> rafts)
    : data_dir_(std::move(data_dir)),
      low_(min_free_bytes),
      recovered_(min_free_bytes + min_free_bytes / 10),
      appliers_(std::move(appliers)),
      rafts_(std::move(rafts)),
      task_(kPeriod, [this] { return Round(); }) {}

PeriodicTask::Next DiskWatcher::Round() {
  struct statvfs fs_stat;
  if (statvfs(data_dir_.c_str(), &fs_stat) != 0) return kPeriod;
  const uint64_t free_bytes = static_cast<uint64_t>(fs_stat.f_bavail) * fs_stat.f_frsize;
  if (!refusing_ && free_bytes < low_) {
    refusing_ = true;
    const std::string reason = "disk space low: " + std::to_string(free_bytes) + " bytes free in " +
                               data_dir_ + " (min_free_disk_bytes " + std::to_string(low_) +
                               "); writes are refused until space returns";
    LogError(reason);
    for (Applier* applier : appliers_) applier->SetWritesRefused(reason);
  } else if (refusing_ && free_bytes >= recovered_) {
    refusing_ = false;
    LogInfo("disk space recovered (" + std::to_string(free_bytes) +
            " bytes free); accepting writes");
    for (Applier* applier : appliers_) applier->SetWritesRefused("");
  }
  // A leader that cannot write must not lead: hand each group it leads to any up-to-date
  // voter (retried every round while space is low, since there may be none at first).
  if (!refusing_) return kPeriod;
  for (RaftLog* raft : rafts_) {
    if (!raft->is_leader()) continue;
    const ClusterStatus status = raft->GetStatus();
    const auto voters = std::count_if(status.members.begin(), status.members.end(),
                                      [](const ClusterMember& m) { return m.role == "voter"; });
    if (voters <= 1) continue;
    raft->TransferLeadership(0, [](Status s) {
      if (!s.ok()) LogWarning("disk space low, leadership transfer: " + s.ToString());
    });
  }
  return kPeriod;
}

}  // namespace kvatlas::server
