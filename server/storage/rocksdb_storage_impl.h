// The RocksDB implementation of Storage, private to server/storage. Layout, encodings and
// the atomicity contract are in docs/storage.md; the byte encodings themselves are in
// key_codec.h. The class is cut by job, one file each:
//   rocksdb_storage.cc     lifetime, meta records, typed scans, Flush, size
//   rocksdb_options.cc     rocksdb::Options from StorageOptions (MakeOptions)
//   rocksdb_open.cc        Storage::Open, the format version and hash seed checks
//   rocksdb_upgrade.cc     rewriting an older format version as the current one
//   rocksdb_write_load.cc  Write, AppliedIndex, and loading an Index / Registry at boot
//   rocksdb_snapshot.cc    capture, serialized snapshots, ReplaceAll, Clear
// rocksdb::Status becomes a kvatlas Status in one place, FromRocks().
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "server/storage/flush_jitter.h"
#include "server/storage/key_codec.h"
#include "server/storage/storage.h"

namespace kvatlas::server::rocksdb_storage {

inline std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }
inline rocksdb::Slice ToSlice(std::string_view s) { return {s.data(), s.size()}; }

// The one conversion of rocksdb::Status. Corruption (bad checksums, bad SST/WAL) keeps its
// code so that an operator can tell a damaged directory from a failing disk; everything
// else RocksDB can report here is an I/O-level failure of the data directory.
Status FromRocks(const rocksdb::Status& s, std::string_view what);

// The key of meta record `name`.
std::string MetaKey(std::string_view name);

// Version 4 keeps the entry records (`T`, by stamp) in a column family of their own and
// everything else in the default one. Entry keys then grow at the end of their key space,
// so flushed files do not overlap older ones and compactions mostly move files instead of
// rewriting them; with the meta records in the same key space, every flushed file would
// span from its entries to `Mapplied_index` and overlap everything (docs/storage.md
// §Database layout).
inline constexpr char kEntriesColumnFamily[] = "entries";
// The LOG file is rotated to LOG.old past this size (rocksdb_info_log.h).
inline constexpr uint64_t kInfoLogMaxBytes = 16 << 20;

// The options both column families and the database open with (rocksdb_options.cc).
// `jitter` receives the flush jitter listener, which the storage points at the entries
// column family once it is open.
rocksdb::Options MakeOptions(const StorageOptions& options, std::shared_ptr<FlushJitter>* jitter);

class RocksDbStorage final : public Storage {
 public:
  // `families` are the default and the entries column family, in that order.
  RocksDbStorage(std::unique_ptr<rocksdb::DB> db,
                 std::vector<rocksdb::ColumnFamilyHandle*> families,
                 std::shared_ptr<FlushJitter> jitter, const StorageOptions& options);
  ~RocksDbStorage() override;

  RocksDbStorage(const RocksDbStorage&) = delete;
  RocksDbStorage& operator=(const RocksDbStorage&) = delete;

  // Stamps a new database with the current format version; accepts an existing one when it
  // carries a version this build reads, upgrading an older one (docs/storage.md §Versions).
  // rocksdb_open.cc.
  Status CheckFormatVersion();

  // rocksdb_open.cc.
  Status CheckHashSeed(uint64_t hash_seed) override;

  // rocksdb_write_load.cc.
  Result<Revision> AppliedIndex() const override;
  Status Write(Revision applied_index, std::span<const Mutation> mutations) override;
  Status LoadInto(RecordLoader* loader) const override;
  Status LoadRegistry(Registry* registry) const override;

  // rocksdb_snapshot.cc.
  Result<std::unique_ptr<Capture>> CaptureAll() const override;
  Status ReplaceAll(std::string_view snapshot) override;
  Status Clear() override;

  // rocksdb_storage.cc.
  Status Flush() override;
  uint64_t ApproximateSizeBytes() const override;
  MemoryUsage ApproximateMemoryUsage() const override;

 private:
  // The raw value of meta record `name`; nullopt when absent.
  Result<std::optional<std::string>> GetMeta(std::string_view name) const;

  // Meta records are written once per database, so always synchronously.
  Status PutMeta(std::string_view name, std::string_view value);

  // Where a record of this key lives: entries in their column family, the rest in the
  // default one.
  rocksdb::ColumnFamilyHandle* FamilyOf(std::string_view key) const {
    return !key.empty() && key[0] == static_cast<char>(RecordType::kEntry) ? entries_ : meta_;
  }

  // An iterator over the records of `type` only (not positioned). A boot scan reads
  // everything once: it stays out of the cache and reads ahead sequentially.
  std::unique_ptr<rocksdb::Iterator> NewTypeIterator(RecordType type) const;

  // Calls fn(key, value) for every record of `type`, in key order, stopping at the first
  // non-OK Status.
  template <typename F>
  Status Scan(RecordType type, F&& fn) const {
    const char first = static_cast<char>(type);
    std::unique_ptr<rocksdb::Iterator> it = NewTypeIterator(type);
    for (it->Seek(rocksdb::Slice(&first, 1)); it->Valid(); it->Next()) {
      KVATLAS_RETURN_IF_ERROR(fn(View(it->key()), View(it->value())));
    }
    return FromRocks(it->status(), "scanning " + path_);
  }

  // The format version in a meta value, if this build reads it; `what` names its source.
  // rocksdb_open.cc.
  static Result<uint32_t> ReadableFormatVersion(std::string_view stored, std::string_view what);

  // Rewrites an older database as the current format version (rocksdb_upgrade.cc).
  Status Upgrade(uint32_t from_version);

  // Hands the entry records to `loader` (rocksdb_write_load.cc).
  Status LoadEntries(RecordLoader* loader) const;

  std::shared_ptr<rocksdb::Env> env_;  // StorageOptions::env: declared first, freed last
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> families_;  // owned: destroyed before Close
  rocksdb::ColumnFamilyHandle* meta_;                   // families_[0], the default family
  rocksdb::ColumnFamilyHandle* entries_;                // families_[1]
  std::shared_ptr<FlushJitter> jitter_;
  rocksdb::WriteOptions write_options_;
  // A write failed (a full disk, an I/O error). RocksDB 7.8, built with assertions as
  // Debian does, aborts when a file writer that failed is flushed or synced again, and
  // FlushWAL would do that to the WAL: Flush refuses instead.
  std::atomic<bool> write_failed_{false};
  std::string path_;
  uint64_t memory_budget_bytes_ = 0;
  // Write's scratch, reused across calls.
  rocksdb::WriteBatch write_batch_;
  std::string write_key_;
  std::string write_value_;
};

}  // namespace kvatlas::server::rocksdb_storage
