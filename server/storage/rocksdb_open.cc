// Opening the database (Storage::Open): creating the data directory, opening both column
// families with MakeOptions, reporting a directory held by another process, then checking
// the format version (stamping a new database, upgrading an older one, refusing one this
// build cannot read) and, on the caller's request, the hash seed (docs/storage.md
// §Versions).
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "server/storage/rocksdb_info_log.h"
#include "server/storage/rocksdb_storage_impl.h"

namespace kvatlas::server::rocksdb_storage {
namespace {

// RocksDB takes an fcntl lock on <dir>/LOCK. Both the cross-process message ("While lock
// file: <dir>/LOCK: Resource temporarily unavailable") and the in-process one ("lock hold
// by current process ... <dir>/LOCK") name that file.
bool IsLockConflict(const rocksdb::Status& s) {
  return s.IsIOError() && s.ToString().find("/LOCK") != std::string::npos;
}

}  // namespace

Status RocksDbStorage::CheckFormatVersion() {
  KVATLAS_ASSIGN_OR_RETURN(std::optional<std::string> stored, GetMeta(kMetaFormatVersion));
  if (!stored.has_value()) {
    for (rocksdb::ColumnFamilyHandle* family : families_) {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), family));
      it->SeekToFirst();
      KVATLAS_RETURN_IF_ERROR(FromRocks(it->status(), "reading " + path_));
      if (it->Valid()) {
        return Status::Corruption("data directory " + path_ +
                                  " has records but no format_version record");
      }
    }
    std::string value;
    PutFixed32(&value, kStorageFormatVersion);
    return PutMeta(kMetaFormatVersion, value);
  }
  KVATLAS_ASSIGN_OR_RETURN(uint32_t version, ReadableFormatVersion(*stored, "data directory"));
  if (version == kStorageFormatVersion) return Status::Ok();
  return Upgrade(version);
}

Status RocksDbStorage::CheckHashSeed(uint64_t hash_seed) {
  KVATLAS_ASSIGN_OR_RETURN(std::optional<std::string> stored, GetMeta(kMetaHashSeed));
  if (!stored.has_value()) {
    std::string value;
    PutFixed64(&value, hash_seed);
    return PutMeta(kMetaHashSeed, value);
  }
  KVATLAS_ASSIGN_OR_RETURN(uint64_t seed, DecodeMetaFixed64(MetaKey(kMetaHashSeed), *stored));
  if (seed != hash_seed) {
    return Status::FailedPrecondition("data directory " + path_ + " was written with hash seed " +
                                      std::to_string(seed) + " but the configured seed is " +
                                      std::to_string(hash_seed) +
                                      "; block keys on disk are only valid for the stored seed");
  }
  return Status::Ok();
}

Result<uint32_t> RocksDbStorage::ReadableFormatVersion(std::string_view stored,
                                                       std::string_view what) {
  KVATLAS_ASSIGN_OR_RETURN(uint32_t version,
                           DecodeMetaFixed32(MetaKey(kMetaFormatVersion), stored));
  if (version < kOldestStorageFormatVersion || version > kStorageFormatVersion) {
    return Status::Corruption(std::string(what) + " has storage format version " +
                              std::to_string(version) + "; this build reads versions " +
                              std::to_string(kOldestStorageFormatVersion) + " to " +
                              std::to_string(kStorageFormatVersion));
  }
  return version;
}

}  // namespace kvatlas::server::rocksdb_storage

namespace kvatlas::server {

Result<std::unique_ptr<Storage>> Storage::Open(const StorageOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("storage path is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) {
    return Status::IOError("cannot create data directory " + options.path + ": " + ec.message());
  }
  std::shared_ptr<FlushJitter> jitter;
  rocksdb::Options rocks = rocksdb_storage::MakeOptions(options, &jitter);
  KVATLAS_ASSIGN_OR_RETURN(rocks.info_log, rocksdb_storage::InfoLog::Open(
                                               options.path, rocksdb_storage::kInfoLogMaxBytes));
  const std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions(rocks)},
      {rocksdb_storage::kEntriesColumnFamily, rocksdb::ColumnFamilyOptions(rocks)}};
  std::vector<rocksdb::ColumnFamilyHandle*> families;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(rocksdb::DBOptions(rocks), options.path, descriptors, &families, &raw);
  if (!s.ok()) {
    if (rocksdb_storage::IsLockConflict(s)) {
      return Status::IOError("data directory " + options.path +
                             " is in use by another kvatlas process? (" + s.ToString() + ")");
    }
    return rocksdb_storage::FromRocks(s, "opening " + options.path);
  }
  auto storage = std::make_unique<rocksdb_storage::RocksDbStorage>(
      std::unique_ptr<rocksdb::DB>(raw), std::move(families), std::move(jitter), options);
  KVATLAS_RETURN_IF_ERROR(storage->CheckFormatVersion());
  return std::unique_ptr<Storage>(std::move(storage));
}

}  // namespace kvatlas::server
