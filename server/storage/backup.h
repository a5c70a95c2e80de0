// Backups of a server's state (docs/storage.md §Backups, docs/operations.md §Backup and
// restore). A backup is a directory holding
//   state.kvsn   the database at one applied index, in the raft snapshot encoding
//                (docs/storage.md §Snapshots), written from a pinned RocksDB snapshot;
//   backup.json  its manifest: format version, source, applied index, the state digest,
//                and every file with its size and SHA-256. Written last: a directory
//                without it is an unfinished backup and restores nothing.
// That is one raft group's part. A backup of a server hosting G > 1 groups (docs/scaling.md
// §Groups on every server) holds group 1's part at its top level and group g's in
// groups/g (the data directory's layout); every part's manifest records its group and G,
// and group 1's is written last.
// Every RocksDB write batch carries its applied_index, so any RocksDB snapshot is the state
// after exactly one applied revision: a backup needs nothing from the raft loop or the
// applying thread, and never stops them.
//
// The state digest is SHA-256 over the image's records in order (varint key length, key,
// varint value length, value) without `Mapplied_index` and the `A` (member address)
// records: equal digests mean equal contexts, holders, entries, registrations and stream
// positions, whatever cluster or revision holds them.
//
// Free functions over values and files; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/storage/storage.h"

namespace kvatlas::server {

inline constexpr uint32_t kBackupFormatVersion = 1;
inline constexpr char kBackupManifestFile[] = "backup.json";
inline constexpr char kBackupStateFile[] = "state.kvsn";
// Where groups 2..G of a backup (and of a data directory) live: groups/g.
inline constexpr char kBackupGroupsDir[] = "groups";
// A manifest larger than this is refused unread.
inline constexpr uint64_t kMaxBackupManifestBytes = 1 << 20;

// Where a backup came from, recorded in its manifest (informational: a restore makes a
// new cluster whichever cluster this was).
struct BackupSource {
  std::string cluster_id;  // the source's configured cluster_id; empty when none
  uint64_t server_id = 0;
  bool online = false;  // taken from a running server (POST /v1/admin/backup)
  // The raft group this part holds, of how many the server hosted (1 of 1: a single group).
  GroupId group = 1;
  uint32_t groups = 1;
  // The source's replication factor (Config::replicas, recorded in its data directory):
  // a restore records it in the new data directory. nullopt: not known (a backup of one
  // group, or from before it was recorded).
  std::optional<uint32_t> replicas = std::nullopt;
};

// Group `group`'s directory in a backup or a data directory `dir`: `dir` itself for group
// 1, `dir`/groups/`group` otherwise.
[[nodiscard]] std::string GroupPartDir(const std::string& dir, GroupId group);

// The raft groups a server's data directory holds: 0 when it holds no database (a new
// one), else 1 and one more for each of groups/2, groups/3, ... holding a database.
[[nodiscard]] uint32_t GroupsInDataDir(const std::string& data_dir);

// The file of a data directory of several groups that records its replication factor
// (docs/storage.md §Data directory): the number in decimal and a newline.
inline constexpr char kReplicasRecordFile[] = "replicas";

// The replication factor recorded in `data_dir`; nullopt when it records none (a new
// directory, one of a single group, or one made before the record existed). kCorruption
// for a file that does not hold one.
[[nodiscard]] Result<std::optional<uint32_t>> ReadReplicasRecord(const std::string& data_dir);
// Records `replicas` in `data_dir` (a temporary file renamed over it, both fsynced).
[[nodiscard]] Status WriteReplicasRecord(const std::string& data_dir, uint32_t replicas);

struct BackupFile {
  std::string name;
  uint64_t bytes = 0;
  std::string sha256;  // lowercase hex
};

struct BackupManifest {
  uint32_t format_version = kBackupFormatVersion;
  std::string created_at;  // UTC, RFC 3339
  BackupSource source;
  Revision applied_index = 0;
  uint32_t storage_format_version = 0;
  uint64_t hash_seed = 0;
  uint64_t records = 0;
  std::string state_digest;  // lowercase hex SHA-256 (file comment)
  std::vector<BackupFile> files;
};

std::string ManifestToJson(const BackupManifest& manifest);
// kCorruption naming the field when the text is not a manifest this build reads.
[[nodiscard]] Result<BackupManifest> ParseManifest(std::string_view text);

// The digest of a state image, and what it was taken at.
struct StateDigest {
  Revision applied_index = 0;
  uint64_t records = 0;
  std::string digest;  // lowercase hex SHA-256
};
// One scan of the image (any thread; constant memory).
[[nodiscard]] Result<StateDigest> DigestOf(const Storage::Capture& capture);

// Writes `capture` as a backup into `dir`, an existing empty directory, and fsyncs it.
// Streams: memory stays at the size of the non-entry records (contexts, holders,
// registrations), whatever the number of entries.
[[nodiscard]] Result<BackupManifest> WriteBackup(const Storage::Capture& capture,
                                                 const std::string& dir,
                                                 const BackupSource& source);

// Writes a part another server made (its `manifest`, and its state file read in chunks by
// `read_at`, from the offset given until the manifest's size) into `dir`, an existing empty
// directory: the state file, then — once its size and SHA-256 are the manifest's
// (kCorruption otherwise) — the manifest, as WriteBackup does. Errors of `read_at` are
// returned as they are.
[[nodiscard]] Result<BackupManifest> WriteReceivedPart(
    const std::string& dir, const BackupManifest& manifest,
    const std::function<Result<std::string>(uint64_t offset)>& read_at);

// Pinned images of several storages (Storage::CaptureAll), in their order: `owned` keeps
// them alive, `images` points at them (what WriteWholeBackup takes). Movable: the images
// stay where they are.
struct Captures {
  std::vector<std::unique_ptr<Storage::Capture>> owned;
  std::vector<const Storage::Capture*> images;
};
// Captures each of `storages` (group g's at g-1), as close together as calls in a row
// are. The first capture error, with nothing kept.
[[nodiscard]] Result<Captures> CaptureEach(std::span<const Storage* const> storages);

// Writes a whole backup into `dir`, an existing empty directory: `captures[g-1]` is group
// g's state; groups 2..G first (in groups/g), group 1's part last. Every part records
// `source` with its group and G. On failure removes what it wrote. Returns every part's
// manifest, group g's at g-1.
[[nodiscard]] Result<std::vector<BackupManifest>> WriteWholeBackup(
    std::span<const Storage::Capture* const> captures, const std::string& dir, BackupSource source);

// Writes group `group`'s part into `part_dir` (an existing empty directory), recording
// `source`, and returns its manifest: WriteWholeBackupWith's source of each part.
using BackupPartWriter = std::function<Result<BackupManifest>(
    GroupId group, const std::string& part_dir, const BackupSource& source)>;
// As WriteWholeBackup, for `groups` groups whose parts `write` makes (each from a capture
// here, or fetched from another server).
[[nodiscard]] Result<std::vector<BackupManifest>> WriteWholeBackupWith(
    uint32_t groups, const BackupPartWriter& write, const std::string& dir, BackupSource source);

// Checks one group's part: reads the manifest and checks every file it lists (present,
// regular, its size and SHA-256), that the directory holds nothing else (but groups/ at
// the top of a backup of several groups), and that the state file decodes and has the
// recorded applied index, record count and state digest. kCorruption (or kNotFound for a
// missing manifest) naming the first problem. On success `state` (if not null) holds the
// state file's bytes.
[[nodiscard]] Result<BackupManifest> VerifyBackup(const std::string& dir, std::string* state);

// Checks a whole backup: group 1's part (VerifyBackup) and, when it records G > 1 groups,
// that groups/ holds exactly 2..G, each group g's part recording group g of G with group
// 1's hash seed. A problem with group g >= 2's part names the group ("group 2: ...").
// Every group's manifest, group g's at g-1.
[[nodiscard]] Result<std::vector<BackupManifest>> VerifyWholeBackup(const std::string& dir);

struct RestoreResult {
  BackupManifest manifest;             // group 1's
  std::string db_path;                 // group 1's
  uint64_t dropped_members = 0;        // `A` records removed
  std::vector<BackupManifest> groups;  // every group's, group g's at g-1
};

// Makes `data_dir` (absent, or an empty directory) the data directory of a new server
// whose initial state is the backup's: verifies the whole backup (VerifyWholeBackup) and
// then, for every group g, writes its part's records into GroupPartDir(`data_dir`, g)/db,
// removes the old members' addresses and sets the applied index to 0 (the new cluster's
// raft log starts at 1 and is applied on top), checks the restored database's digest
// against the part's manifest, writes kRestoredMarker there, and fsyncs. Nothing else is
// created: the raft log, and with it the cluster's membership, comes from the server's
// first start (--id, --peers, --groups G). kAlreadyExists for a non-empty `data_dir`.
[[nodiscard]] Result<RestoreResult> RestoreBackup(const std::string& from,
                                                  const std::string& data_dir);

// The file RestoreBackup leaves in the data directory: the state did not come from the raft
// log, so a log replayed from index 1 (to a member added later) would lack it. The server
// takes a raft snapshot at once when it finds the file and deletes it once the snapshot is
// written (RaftOptions::compact_early).
inline constexpr const char* kRestoredMarker = "RESTORED";

// `dir` as an empty directory to write into: created (with its parents) when absent;
// kAlreadyExists when it exists and is not empty, kInvalidArgument when it is not a
// directory or is a symbolic link. `what` names it in messages.
[[nodiscard]] Status PrepareEmptyDirectory(const std::string& dir, std::string_view what);

}  // namespace kvatlas::server
