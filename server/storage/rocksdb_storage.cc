// RocksDbStorage's shared plumbing (rocksdb_storage_impl.h): its lifetime, the one
// rocksdb::Status conversion, meta record reads and writes, per-type iterators, Flush and
// the size estimate. Every other job of the class is in a rocksdb_*.cc of its own.
#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/storage/rocksdb_storage_impl.h"

namespace kvatlas::server::rocksdb_storage {

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  std::string msg = std::string(what) + ": " + s.ToString();
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  return Status::IOError(std::move(msg));
}

std::string MetaKey(std::string_view name) {
  std::string key;
  AppendMetaKey(name, &key);
  return key;
}

RocksDbStorage::RocksDbStorage(std::unique_ptr<rocksdb::DB> db,
                               std::vector<rocksdb::ColumnFamilyHandle*> families,
                               std::shared_ptr<FlushJitter> jitter, const StorageOptions& options)
    : env_(options.env),
      db_(std::move(db)),
      families_(std::move(families)),
      meta_(families_.at(0)),
      entries_(families_.at(1)),
      jitter_(std::move(jitter)),
      path_(options.path),
      memory_budget_bytes_(options.memory_bytes) {
  write_options_.sync = options.sync_writes && !options.disable_wal;
  write_options_.disableWAL = options.disable_wal;
  jitter_->Track(entries_);
}

RocksDbStorage::~RocksDbStorage() {
  jitter_->Track(nullptr);
  for (rocksdb::ColumnFamilyHandle* family : families_) {
    (void)db_->DestroyColumnFamilyHandle(family);
  }
  // Nothing useful can be done with a failed close: the WAL already holds every
  // acknowledged write, and the next Open recovers from it.
  (void)db_->Close();
}

Status RocksDbStorage::Flush() {
  if (write_failed_.load(std::memory_order_acquire)) {
    return Status::IOError("not flushing " + path_ +
                           ": a write failed earlier; the next start recovers from the raft log");
  }
  if (write_options_.disableWAL) {
    // Without a WAL, durability at a clean stop means flushing the memtables.
    rocksdb::FlushOptions wait;
    wait.wait = true;
    return FromRocks(db_->Flush(wait, families_), "flushing memtables");
  }
  return FromRocks(db_->FlushWAL(/*sync=*/true), "syncing WAL");
}

uint64_t RocksDbStorage::ApproximateSizeBytes() const {
  uint64_t total = 0;
  for (rocksdb::ColumnFamilyHandle* family : families_) {
    uint64_t sst = 0;
    uint64_t memtables = 0;
    if (!db_->GetIntProperty(family, rocksdb::DB::Properties::kTotalSstFilesSize, &sst)) sst = 0;
    // Memtable bytes stand in for the WAL that holds the same, not yet flushed, records.
    if (!db_->GetIntProperty(family, rocksdb::DB::Properties::kCurSizeAllMemTables, &memtables)) {
      memtables = 0;
    }
    total += sst + memtables;
  }
  return total;
}

Storage::MemoryUsage RocksDbStorage::ApproximateMemoryUsage() const {
  MemoryUsage usage;
  usage.budget_bytes = memory_budget_bytes_;
  // The families share one cache: its usage is a DB-wide figure, read once.
  uint64_t value = 0;
  if (db_->GetIntProperty(meta_, rocksdb::DB::Properties::kBlockCacheUsage, &value)) {
    usage.block_cache_bytes = value;
  }
  for (rocksdb::ColumnFamilyHandle* family : families_) {
    if (db_->GetIntProperty(family, rocksdb::DB::Properties::kCurSizeAllMemTables, &value)) {
      usage.memtable_bytes += value;
    }
    if (db_->GetIntProperty(family, rocksdb::DB::Properties::kEstimateTableReadersMem, &value)) {
      usage.table_reader_bytes += value;
    }
  }
  usage.total_bytes = usage.block_cache_bytes + usage.table_reader_bytes +
                      (memory_budget_bytes_ == 0 ? usage.memtable_bytes : 0);
  return usage;
}

Result<std::optional<std::string>> RocksDbStorage::GetMeta(std::string_view name) const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ToSlice(MetaKey(name)), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  KVATLAS_RETURN_IF_ERROR(FromRocks(s, "reading " + std::string(name) + " in " + path_));
  return std::optional<std::string>(std::move(value));
}

Status RocksDbStorage::PutMeta(std::string_view name, std::string_view value) {
  rocksdb::WriteOptions sync;
  sync.sync = true;
  return FromRocks(db_->Put(sync, ToSlice(MetaKey(name)), ToSlice(value)),
                   "writing " + std::string(name) + " in " + path_);
}

std::unique_ptr<rocksdb::Iterator> RocksDbStorage::NewTypeIterator(RecordType type) const {
  // The upper bound (the next type byte) must outlive the iterator: static, per type.
  static const std::array<char, 256> kLimitBytes = [] {
    std::array<char, 256> bytes{};
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i + 1);
    return bytes;
  }();
  static const std::array<rocksdb::Slice, 256> kLimits = [] {
    std::array<rocksdb::Slice, 256> limits;
    for (size_t i = 0; i < limits.size(); ++i) limits[i] = rocksdb::Slice(&kLimitBytes[i], 1);
    return limits;
  }();
  rocksdb::ReadOptions read;
  read.iterate_upper_bound = &kLimits[static_cast<unsigned char>(type)];
  read.fill_cache = false;
  read.readahead_size = 2 << 20;
  const char first = static_cast<char>(type);
  return std::unique_ptr<rocksdb::Iterator>(
      db_->NewIterator(read, FamilyOf(std::string_view(&first, 1))));
}

}  // namespace kvatlas::server::rocksdb_storage
