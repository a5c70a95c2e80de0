// Online backups and state digests (docs/operations.md §Backup and restore): where a backup
// may be written on this server's file system, and taking it. The backup itself is a
// pinned RocksDB snapshot streamed to files (server/storage/backup.h) on the caller's
// thread: neither the raft loop nor the applying thread does any of it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/service/services.h"
#include "server/storage/backup.h"

namespace kvatlas::server {

// Longest `to` a backup request may name.
inline constexpr size_t kMaxBackupPathBytes = 1024;

// The directory a backup request's `to` names, under `root` (the configured backup_dir):
// a relative path is taken below `root`, an absolute one must lie below it. Refused
// (kInvalidArgument naming the problem): an empty or overlong path, a NUL byte, any ".."
// component, the root itself, a path outside the root, and an existing symbolic link
// between the root and the target (which could lead out of it). kFailedPrecondition when
// `root` is empty (online backups are off). The target itself is checked when written
// (PrepareEmptyDirectory: absent or an empty directory).
[[nodiscard]] Result<std::string> ResolveBackupTarget(const std::string& root, std::string_view to);

struct BackupTaken {
  BackupManifest manifest;             // group 1's part
  std::vector<BackupManifest> groups;  // every group's part, group g's at g-1
  std::string path;
  // From the request to the pinned snapshot (all the backup asks of the live database
  // before its scan), and the whole backup.
  uint64_t capture_micros = 0;
  uint64_t total_micros = 0;
};

// The replication factor a backup taken here records (BackupSource::replicas): this
// server's on a server of several groups, nullopt on one group.
[[nodiscard]] std::optional<uint32_t> BackupReplicas(const Services& services);

// Writes a backup of this server's state at its current applied index into the directory
// `to` names (ResolveBackupTarget): on a server hosting several raft groups, every group's
// part (WriteWholeBackupWith), each at that group's applied index. One at a time:
// kResourceExhausted while another runs. kAlreadyExists when the target is not empty. The
// backup holds every write this server had applied (every write it acknowledged) when the
// request arrived: every group's image it holds is pinned before any is written. With
// replicas on some servers, the part of a group it does not hold (HostsGroup) is `fetch`ed
// from one of its members, at that member's applied index when asked (docs/operations.md
// §Backup and restore); without `fetch` such a backup is refused (kFailedPrecondition).
[[nodiscard]] Result<BackupTaken> TakeBackup(const Services& services, std::string_view to,
                                             const BackupPartWriter& fetch = nullptr);

// The state digest (backup.h) of this server's state now, with its applied index: every
// group's, group g's at g-1 (one on a single-group server).
[[nodiscard]] Result<std::vector<StateDigest>> DigestState(const Services& services);

}  // namespace kvatlas::server
