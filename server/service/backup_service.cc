// Online backups: target paths and taking one (backup_service.h).
#include "server/service/backup_service.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "server/service/lookup_service.h"

namespace kvatlas::server {
namespace fs = std::filesystem;
namespace {

Status BadPath(const std::string& what) { return Status::InvalidArgument("body.to: " + what); }

// Clears the one-backup-at-a-time flag when the backup ends, however it ends.
class RunningFlag {
 public:
  explicit RunningFlag(std::atomic<bool>* flag) : flag_(flag) {}
  ~RunningFlag() { flag_->store(false, std::memory_order_release); }
  RunningFlag(const RunningFlag&) = delete;
  RunningFlag& operator=(const RunningFlag&) = delete;

 private:
  std::atomic<bool>* flag_;
};

// Every group's storage, group g's at g-1 (docs/scaling.md §Groups on every server);
// kFailedPrecondition when one keeps none (an in-memory server) naming `what` it is for.
Result<std::vector<const Storage*>> GroupStorages(const Services& services,
                                                  const std::string& what) {
  std::vector<const Storage*> storages;
  if (services.groups == nullptr) {
    storages.push_back(services.storage);
  } else {
    for (const Services& group : *services.groups) storages.push_back(group.storage);
  }
  for (const Storage* storage : storages) {
    if (storage == nullptr) {
      return Status::FailedPrecondition("this server keeps no storage to " + what);
    }
  }
  return storages;
}

uint64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
}

}  // namespace

Result<std::string> ResolveBackupTarget(const std::string& root, std::string_view to) {
  if (root.empty()) {
    return Status::FailedPrecondition(
        "online backups are off on this server: set backup_dir (or back up a stopped server "
        "with kvatlas-server backup --data-dir)");
  }
  if (to.empty()) return BadPath("must name a directory");
  if (to.size() > kMaxBackupPathBytes) {
    return BadPath("longer than " + std::to_string(kMaxBackupPathBytes) + " bytes");
  }
  if (to.find('\0') != std::string_view::npos) return BadPath("contains a NUL byte");
  const fs::path given{std::string(to)};
  for (const fs::path& part : given) {
    if (part == "..") return BadPath("must not contain a \"..\" component");
  }
  const auto without_trailing_slash = [](fs::path p) {
    p = p.lexically_normal();
    return p.has_filename() || !p.has_parent_path() || p == p.root_path() ? p : p.parent_path();
  };
  const fs::path base = without_trailing_slash(root);
  const fs::path target = without_trailing_slash(given.is_absolute() ? given : base / given);
  // Below the root, component by component (a string prefix would take /b2 for /b).
  auto t = target.begin();
  for (auto b = base.begin(); b != base.end(); ++b, ++t) {
    if (t == target.end() || *t != *b) {
      return BadPath("must be a directory under backup_dir " + root);
    }
  }
  if (t == target.end()) return BadPath("must be a directory under backup_dir, not itself");
  // No symbolic link below the root on the way (it could point anywhere).
  fs::path walked = base;
  for (; t != target.end(); ++t) {
    walked /= *t;
    std::error_code ec;
    const fs::file_status status = fs::symlink_status(walked, ec);
    if (fs::is_symlink(status)) return BadPath(walked.string() + " is a symbolic link");
    if (!fs::exists(status)) break;
  }
  return target.string();
}

std::optional<uint32_t> BackupReplicas(const Services& services) {
  if (services.groups == nullptr) return std::nullopt;
  return static_cast<uint32_t>(services.replicas);
}

Result<BackupTaken> TakeBackup(const Services& services, std::string_view to,
                               const BackupPartWriter& fetch) {
  const auto start = std::chrono::steady_clock::now();
  KVATLAS_ASSIGN_OR_RETURN(std::string target, ResolveBackupTarget(services.backup_dir, to));
  KVATLAS_ASSIGN_OR_RETURN(std::vector<const Storage*> storages,
                           GroupStorages(services, "back up"));
  // With replicas on some servers, a group this server does not hold would be an empty or
  // stale part here: it is fetched from a member.
  std::vector<bool> fetched(storages.size(), false);
  for (const GroupId id : UnhostedGroups(services)) {
    if (!fetch) {
      return Status::FailedPrecondition("this server holds no replica of group " +
                                        std::to_string(id) + " and cannot fetch it");
    }
    fetched[id - 1] = true;
  }
  if (services.backup_running->exchange(true, std::memory_order_acq_rel)) {
    return Status::ResourceExhausted("another backup is running on this server; retry later");
  }
  RunningFlag running(services.backup_running.get());
  KVATLAS_RETURN_IF_ERROR(PrepareEmptyDirectory(target, "body.to: backup directory"));
  // Every acknowledged write was applied, and so written, before it was acknowledged: the
  // images pinned now hold all of them (a part fetched from a member is taken when it is
  // asked for, later).
  std::vector<const Storage*> held;
  for (size_t g = 0; g < storages.size(); ++g) {
    if (!fetched[g]) held.push_back(storages[g]);
  }
  KVATLAS_ASSIGN_OR_RETURN(const Captures captures, CaptureEach(held));
  std::vector<const Storage::Capture*> image_of(storages.size(), nullptr);
  for (size_t g = 0, next = 0; g < storages.size(); ++g) {
    if (!fetched[g]) image_of[g] = captures.images[next++];
  }
  BackupTaken taken;
  taken.capture_micros = MicrosSince(start);
  taken.path = target;
  const BackupPartWriter write = [&](GroupId g, const std::string& part_dir,
                                     const BackupSource& source) -> Result<BackupManifest> {
    if (image_of[g - 1] == nullptr) return fetch(g, part_dir, source);
    return WriteBackup(*image_of[g - 1], part_dir, source);
  };
  KVATLAS_ASSIGN_OR_RETURN(
      taken.groups, WriteWholeBackupWith(static_cast<uint32_t>(storages.size()), write, target,
                                         {services.cluster_id, services.server_id, /*online=*/true,
                                          1, 1, BackupReplicas(services)}));
  taken.manifest = taken.groups.front();
  taken.total_micros = MicrosSince(start);
  return taken;
}

Result<std::vector<StateDigest>> DigestState(const Services& services) {
  KVATLAS_ASSIGN_OR_RETURN(std::vector<const Storage*> storages, GroupStorages(services, "digest"));
  std::vector<StateDigest> digests;
  for (const Storage* storage : storages) {
    KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Storage::Capture> capture, storage->CaptureAll());
    KVATLAS_ASSIGN_OR_RETURN(StateDigest digest, DigestOf(*capture));
    digests.push_back(std::move(digest));
  }
  return digests;
}

}  // namespace kvatlas::server
