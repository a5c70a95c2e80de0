// The offline backup commands of kvatlas-server (docs/operations.md §Backup and restore):
//   backup --data-dir DIR --to BACKUP_DIR         back up a stopped server's data directory
//   restore --from BACKUP_DIR --data-dir NEW_DIR  make a new server's data directory from one
//   verify-backup --from BACKUP_DIR               check a backup's checksums and digest
// A running server is backed up through POST /v1/admin/backup (`kvatlas cluster backup`).
#pragma once

#include <span>
#include <string>

namespace kvatlas::server {

// True for the first argument of one of these commands.
bool IsBackupCommand(const std::string& command);

// Runs the command args[0] with the flags after it; prints what it did to stdout and
// problems to stderr. Returns the exit code: 0 done, 1 failed, 2 bad command line.
int RunBackupCommand(std::span<const std::string> args);

}  // namespace kvatlas::server
