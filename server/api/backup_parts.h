// Backup parts fetched from members (docs/operations.md §Backup and restore): with replicas
// on some servers, a server taking an online backup does not hold every group, and fetches
// the part of each group it does not hold from one of its recorded members. Internal calls,
// signed by a member, never forwarded:
//
//   POST /v1/cluster/backup-part?group=G       the member, holding G, writes its part of G
//        (WriteBackup of a pinned image) into DATA_DIR/backup-parts/ID and answers
//        {"part": ID, "manifest": <the part's backup.json>}
//   POST /v1/cluster/backup-part/read?part=ID&offset=O
//        up to kBackupPartPage bytes of that part's state file from byte O
//        (application/octet-stream; the answer's signature covers them)
//   POST /v1/cluster/backup-part/release?part=ID   deletes the part
//
// The fetching server writes the pages as they come and the manifest last, once the file's
// size and SHA-256 are the manifest's (WriteReceivedPart), trying the next member when one
// fails. A member keeps at most kMaxBackupParts parts at once (resource_exhausted past
// it); a part not released is deleted kBackupPartIdle after its last read (checked as
// parts are offered), and every part when the server starts (RemoveBackupParts).
//
// Runs on HTTP worker threads (a backup blocks its worker: backup_service.h). Stateless
// apart from the files: safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kvatlas/common/result.h"
#include "server/api/router.h"
#include "server/service/services.h"
#include "server/storage/backup.h"

namespace kvatlas::server {

// A page is written within the member's http_write_timeout_ms (5 s by default), even on a
// loaded machine: 32 MiB pages were not (the answer cut short).
inline constexpr size_t kBackupPartPage = size_t{4} << 20;
inline constexpr size_t kMaxBackupParts = 2;
inline constexpr std::chrono::minutes kBackupPartIdle{10};
// Where a member keeps the parts it offers: DATA_DIR/backup-parts.
inline constexpr char kBackupPartsDir[] = "backup-parts";

void AddBackupPartRoutes(const Services* services, Router* router);

// Writes group `group`'s part into `part_dir` (an existing empty directory) from one of the
// group's recorded members, in turn until one succeeds; the last member's error otherwise
// (kUnavailable when the directory records no member). The part's manifest is the member's
// (its source names that member); one recording another group, or another number of
// groups than `source`, is refused (kCorruption).
[[nodiscard]] Result<BackupManifest> FetchBackupPart(const Services& services, GroupId group,
                                                     const std::string& part_dir,
                                                     const BackupSource& source);

// Deletes every part a server kept in `data_dir` (at its start: none is being read then).
void RemoveBackupParts(const std::string& data_dir);

}  // namespace kvatlas::server
