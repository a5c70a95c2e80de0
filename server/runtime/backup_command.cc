// kvatlas-server backup / restore / verify-backup (backup_command.h).
#include "server/runtime/backup_command.h"

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "server/replication/raft_log.h"
#include "server/runtime/usage.h"
#include "server/storage/backup.h"
#include "server/storage/storage.h"

namespace kvatlas::server {
namespace fs = std::filesystem;
namespace {

// Each command's --help.
std::string HelpOf(const std::string& command) {
  const std::string tail =
      "  -h, --help                    print this help and exit\n"
      "\n"
      "A running server is backed up with `kvatlas cluster backup DIR` (POST\n"
      "/v1/admin/backup). docs/operations.md §Backup and restore.\n";
  if (command == "backup") {
    return "Usage: kvatlas-server backup --data-dir DIR --to BACKUP_DIR\n"
           "\n"
           "Backs up the data directory of a stopped server into BACKUP_DIR (new or empty):\n"
           "its state at its applied index, with checksums and a state digest; every raft\n"
           "group's (DIR/groups/G) on a server hosting several.\n"
           "\n"
           "  --data-dir DIR                the stopped server's data directory\n"
           "  --to BACKUP_DIR               where the backup goes (new or empty)\n" +
           tail;
  }
  if (command == "restore") {
    return "Usage: kvatlas-server restore --from BACKUP_DIR --data-dir NEW_DIR\n"
           "\n"
           "Makes a new server's data directory from a backup (checked first), every raft\n"
           "group's: start the new server, or each member of a new cluster on its own copy,\n"
           "on it (with the backup's --groups).\n"
           "\n"
           "  --from BACKUP_DIR             the backup\n"
           "  --data-dir NEW_DIR            the data directory to make (new or empty)\n" +
           tail;
  }
  return "Usage: kvatlas-server verify-backup --from BACKUP_DIR\n"
         "\n"
         "Checks a backup's file checksums and state digest, every raft group's; prints\n"
         "what it holds.\n"
         "\n"
         "  --from BACKUP_DIR             the backup\n" +
         tail;
}

int Failed(const std::string& command, const Status& status) {
  std::cerr << "kvatlas-server " << command << ": " << status.ToString() << "\n";
  return 1;
}

// The value of every flag in `required`, given as "--flag VALUE" pairs, each once; nullopt
// (after printing why) on anything else.
std::optional<std::map<std::string, std::string>> ParseFlags(
    const std::string& command, std::span<const std::string> args,
    std::initializer_list<const char*> required) {
  std::map<std::string, std::string> flags;
  std::string names;
  for (const char* flag : required) names += std::string(names.empty() ? "" : " and ") + flag;
  for (size_t i = 0; i < args.size(); i += 2) {
    bool known = false;
    for (const char* flag : required) known = known || args[i] == flag;
    if (!known) {
      UsageError(command, "unknown argument \"" + args[i] + "\"");
      return std::nullopt;
    }
    if (i + 1 >= args.size() || args[i + 1].empty()) {
      UsageError(command, args[i] + " needs a value");
      return std::nullopt;
    }
    flags[args[i]] = args[i + 1];
  }
  if (flags.size() != required.size()) {
    UsageError(command, command + " needs " + names);
    return std::nullopt;
  }
  return flags;
}

void PrintManifest(const BackupManifest& m) {
  std::cout << "applied index " << m.applied_index << ", " << m.records << " records, "
            << (m.files.empty() ? 0 : m.files[0].bytes) << " bytes, state digest " << m.state_digest
            << "\n";
}

// One line for a single group's backup (as ever); a line per group for several.
void PrintManifests(const std::vector<BackupManifest>& parts) {
  if (parts.size() == 1) {
    PrintManifest(parts[0]);
    return;
  }
  std::cout << parts.size() << " raft groups\n";
  for (const BackupManifest& part : parts) {
    std::cout << "  group " << part.source.group << ": ";
    PrintManifest(part);
  }
}

// Backs up a stopped server, every group it hosts: a database opens only when no server
// holds it.
Result<std::vector<BackupManifest>> BackUpStopped(const std::string& data_dir,
                                                  const std::string& to) {
  const uint32_t groups = GroupsInDataDir(data_dir);
  if (groups == 0) {
    return Status::NotFound("no kvatlas database in " + (fs::path(data_dir) / "db").string());
  }
  std::vector<std::unique_ptr<Storage>> storages;
  for (GroupId g = 1; g <= groups; ++g) {
    const std::string group_dir = GroupPartDir(data_dir, g);
    const std::string group = groups == 1 ? "" : "group " + std::to_string(g) + ": ";
    const fs::path db = fs::path(group_dir) / "db";
    std::error_code ec;
    if (!fs::exists(db / "CURRENT", ec)) {
      return Status::NotFound(group + "no kvatlas database in " + db.string());
    }
    if (fs::exists(fs::path(group_dir) / "raft" / RaftLog::kRebuildMarker, ec)) {
      return Status::FailedPrecondition(
          group +
          "the server stopped after its raft log failed and rebuilds its state at its next "
          "start: start it once (and stop it) before backing it up");
    }
    StorageOptions options;
    options.path = db.string();
    options.sync_writes = false;
    options.block_cache_bytes = 0;
    Result<std::unique_ptr<Storage>> storage = Storage::Open(options);
    if (!storage) {
      return Status(storage.error().code(), group + storage.error().message() +
                                                " (stop the server first, or back it up "
                                                "online with kvatlas cluster backup)");
    }
    storages.push_back(std::move(*storage));
  }
  KVATLAS_RETURN_IF_ERROR(PrepareEmptyDirectory(to, "backup directory"));
  std::vector<const Storage*> opened;
  for (const auto& storage : storages) opened.push_back(storage.get());
  KVATLAS_ASSIGN_OR_RETURN(const Captures captures, CaptureEach(opened));
  BackupSource source{"", 0, /*online=*/false};
  if (storages.size() > 1) {
    KVATLAS_ASSIGN_OR_RETURN(source.replicas, ReadReplicasRecord(data_dir));
  }
  return WriteWholeBackup(captures.images, to, std::move(source));
}

}  // namespace

bool IsBackupCommand(const std::string& command) {
  return command == "backup" || command == "restore" || command == "verify-backup";
}

int RunBackupCommand(std::span<const std::string> args) {
  const std::string command = args[0];
  const std::span<const std::string> rest = args.subspan(1);
  if (WantsHelp(rest)) {
    std::cout << HelpOf(command);
    return 0;
  }
  if (command == "backup") {
    const auto flags = ParseFlags(command, rest, {"--data-dir", "--to"});
    if (!flags) return 2;
    Result<std::vector<BackupManifest>> parts =
        BackUpStopped(flags->at("--data-dir"), flags->at("--to"));
    if (!parts) return Failed(command, parts.status());
    std::cout << "backed up " << flags->at("--data-dir") << " to " << flags->at("--to") << ": ";
    PrintManifests(*parts);
    return 0;
  }
  if (command == "restore") {
    const auto flags = ParseFlags(command, rest, {"--from", "--data-dir"});
    if (!flags) return 2;
    Result<RestoreResult> r = RestoreBackup(flags->at("--from"), flags->at("--data-dir"));
    if (!r) return Failed(command, r.status());
    std::cout << "restored " << flags->at("--from") << " into " << r->db_path << ": ";
    PrintManifests(r->groups);
    std::cout << "dropped the addresses of " << r->dropped_members
              << " old member(s); revision 0. Start the new server(s) on this data directory "
                 "(each member of a new cluster on its own restored copy, all with --peers) "
                 "with --hash-seed "
              << r->manifest.hash_seed;
    if (r->groups.size() > 1) std::cout << " and --groups " << r->groups.size();
    if (r->manifest.source.replicas) {
      std::cout << " (the data directory records the backup's replicas, "
                << *r->manifest.source.replicas << ")";
    }
    std::cout << ".\n";
    return 0;
  }
  const auto flags = ParseFlags(command, rest, {"--from"});
  if (!flags) return 2;
  Result<std::vector<BackupManifest>> parts = VerifyWholeBackup(flags->at("--from"));
  if (!parts) return Failed(command, parts.status());
  std::cout << "backup " << flags->at("--from") << " is whole: ";
  PrintManifests(*parts);
  return 0;
}

}  // namespace kvatlas::server
