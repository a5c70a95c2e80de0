// The RocksDB implementation of Storage. Layout, encodings and the atomicity contract are
// in docs/storage.md; the byte encodings themselves are in key_codec.h. This is the only
// translation unit that includes RocksDB: rocksdb::Status becomes a kvatlas Status here,
// in FromRocks().
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "common/internal/log.h"
#include "server/storage/flush_jitter.h"
#include "server/storage/key_codec.h"
#include "server/storage/sorted_vector_rep.h"
#include "server/storage/storage.h"

namespace kvatlas::server {
namespace {

std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }
rocksdb::Slice ToSlice(std::string_view s) { return {s.data(), s.size()}; }

// The one conversion of rocksdb::Status. Corruption (bad checksums, bad SST/WAL) keeps its
// code so that an operator can tell a damaged directory from a failing disk; everything
// else RocksDB can report here is an I/O-level failure of the data directory.
Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  std::string msg = std::string(what) + ": " + s.ToString();
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  return Status::IOError(std::move(msg));
}

// RocksDB takes an fcntl lock on <dir>/LOCK. Both the cross-process message ("While lock
// file: <dir>/LOCK: Resource temporarily unavailable") and the in-process one ("lock hold
// by current process ... <dir>/LOCK") name that file.
bool IsLockConflict(const rocksdb::Status& s) {
  return s.IsIOError() && s.ToString().find("/LOCK") != std::string::npos;
}

// Version 4 keeps the entry records (`T`, by stamp) in a column family of their own and
// everything else in the default one. Entry keys then grow at the end of their key space,
// so flushed files do not overlap older ones and compactions mostly move files instead of
// rewriting them; with the meta records in the same key space, every flushed file would
// span from its entries to `Mapplied_index` and overlap everything (docs/storage.md
// §Database layout).
constexpr char kEntriesColumnFamily[] = "entries";

std::string MetaKey(std::string_view name) {
  std::string key;
  AppendMetaKey(name, &key);
  return key;
}

// `jitter` receives the flush jitter listener, which the storage points at the entries
// column family once it is open.
rocksdb::Options MakeOptions(const StorageOptions& options, std::shared_ptr<FlushJitter>* jitter) {
  rocksdb::Options o;
  o.create_if_missing = true;
  // Flushes and compactions share the machine with the applier and the network threads.
  o.max_background_jobs = 2;
  // Memtables of random sizes up to write_buffer_bytes, so that replicas sharing a machine
  // do not all flush at the same moment (flush_jitter.h).
  *jitter = std::make_shared<FlushJitter>(options.write_buffer_bytes, std::random_device{}());
  o.write_buffer_size = (*jitter)->NextSize();
  o.listeners.push_back(*jitter);
  // Smooths write-back of SSTs instead of one large fsync at the end of each file.
  o.bytes_per_sync = 1 << 20;
  o.keep_log_file_num = 4;
  o.level_compaction_dynamic_level_bytes = true;
  // After a crash, recover the WAL up to the last intact record and stop there: the database
  // comes back at a consistent applied_index (the atomicity contract in docs/storage.md
  // relies on it; it is RocksDB's default, stated here because we depend on it).
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;

  // Values are small and keys share long prefixes; LZ4 is cheap to decode at boot. Fall
  // back to no compression when this librocksdb was built without it.
  const std::vector<rocksdb::CompressionType> supported = rocksdb::GetSupportedCompressions();
  const bool has_lz4 =
      std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) != supported.end();
  o.compression = has_lz4 ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;

  rocksdb::BlockBasedTableOptions table;
  if (options.block_cache_bytes == 0) {
    table.no_block_cache = true;
  } else {
    table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  }
  // Point reads are meta Gets and, later, single-record reads; a full-key bloom filter
  // spares them a data-block read per level.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.optimize_filters_for_memory = true;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));

  // The database is written on every applied group and read only at boot (point reads of
  // a few meta keys, then one full scan). A vector memtable appends in O(1) and sorts once
  // at flush, where the default skip list spent ~70% of the server's ingest CPU on ordered
  // inserts of random keys; ours sorts key prefixes instead of pointers to the entries
  // (sorted_vector_rep.h). Writes come from one thread (the applier), as it requires.
  o.memtable_factory = std::make_shared<SortedVectorRepFactory>();
  // Compactions are catch-up work: on a small machine they must not take CPU from lookups.
  // Flushes are not: a starved flush fills every memtable, and the next write then stalls
  // the applying thread, which under raft is the raft loop (docs/replication.md
  // §Benchmark: at low priority, loops blocked for 4-9 s in sustained 3-server ingest).
  o.env->LowerThreadPoolCPUPriority(rocksdb::Env::LOW);
  o.allow_concurrent_memtable_write = false;
  // A write that RocksDB stalls (full memtables waiting for a flush, too many L0 files
  // waiting for a compaction) blocks the applying thread, which under raft is the raft
  // loop: heartbeats stop and followers start elections. Since that flush and compaction
  // run at low CPU priority, give them room to fall behind under a burst instead: more
  // memtables (each write_buffer_size) and later L0 slowdown/stop triggers.
  o.max_write_buffer_number = 6;
  o.level0_slowdown_writes_trigger = 48;
  o.level0_stop_writes_trigger = 96;
  // Both column families flush together: without a WAL (disable_wal) that is what keeps
  // them at one applied_index after a crash, and with one it keeps the small default
  // family from pinning old WAL files.
  o.atomic_flush = true;
  o.create_missing_column_families = true;
  return o;
}

constexpr std::string_view kSnapshotMagic = "KVSN";
constexpr uint8_t kSnapshotVersion = 1;

// Checks a serialized capture and calls fn(key, value) for every record (fn may be null).
// Returns its applied_index.
Result<Revision> WalkSnapshot(std::string_view snapshot,
                              const std::function<Status(std::string_view, std::string_view)>& fn) {
  const auto corrupt = [](const std::string& what) {
    return Status::Corruption("snapshot: " + what);
  };
  if (snapshot.size() < kSnapshotMagic.size() + 1 + 8 + 8 ||
      snapshot.substr(0, kSnapshotMagic.size()) != kSnapshotMagic) {
    return corrupt("bad magic or too short");
  }
  ByteReader in(
      snapshot.substr(kSnapshotMagic.size(), snapshot.size() - kSnapshotMagic.size() - 8));
  if (in.U8() != kSnapshotVersion) return corrupt("unknown version");
  const Revision applied = in.Fixed64();
  uint64_t count = 0;
  while (in.ok() && in.remaining() > 0) {
    const std::string_view key = in.LengthPrefixed();
    const std::string_view value = in.LengthPrefixed();
    if (!in.ok() || key.empty()) return corrupt("truncated record " + std::to_string(count));
    if (fn) KVATLAS_RETURN_IF_ERROR(fn(key, value));
    ++count;
  }
  ByteReader trailer(snapshot.substr(snapshot.size() - 8));
  if (!in.ok() || trailer.Fixed64() != count) return corrupt("record count mismatch");
  return applied;
}

class RocksDbStorage final : public Storage {
 public:
  // `families` are the default and the entries column family, in that order.
  RocksDbStorage(std::unique_ptr<rocksdb::DB> db,
                 std::vector<rocksdb::ColumnFamilyHandle*> families,
                 std::shared_ptr<FlushJitter> jitter, const StorageOptions& options)
      : db_(std::move(db)),
        families_(std::move(families)),
        meta_(families_.at(0)),
        entries_(families_.at(1)),
        jitter_(std::move(jitter)),
        path_(options.path) {
    write_options_.sync = options.sync_writes && !options.disable_wal;
    write_options_.disableWAL = options.disable_wal;
    jitter_->Track(entries_);
  }

  ~RocksDbStorage() override {
    jitter_->Track(nullptr);
    for (rocksdb::ColumnFamilyHandle* family : families_) {
      (void)db_->DestroyColumnFamilyHandle(family);
    }
    // Nothing useful can be done with a failed close: the WAL already holds every
    // acknowledged write, and the next Open recovers from it.
    (void)db_->Close();
  }

  RocksDbStorage(const RocksDbStorage&) = delete;
  RocksDbStorage& operator=(const RocksDbStorage&) = delete;

  // Stamps a new database with the current format version; accepts an existing one when it
  // carries a version this build reads, upgrading an older one (docs/storage.md §Versions).
  Status CheckFormatVersion() {
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

  Status CheckHashSeed(uint64_t hash_seed) override {
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

  Result<Revision> AppliedIndex() const override {
    KVATLAS_ASSIGN_OR_RETURN(std::optional<std::string> stored, GetMeta(kMetaAppliedIndex));
    if (!stored.has_value()) return Revision{0};
    return DecodeMetaFixed64(MetaKey(kMetaAppliedIndex), *stored);
  }

  Status Write(Revision applied_index, std::span<const Mutation> mutations) override {
    // One batch, cleared and refilled by every write: it keeps its buffer, where a new one
    // per group would grow into freshly faulted pages each time (Write has one caller, the
    // applier).
    rocksdb::WriteBatch& batch = write_batch_;
    batch.Clear();
    std::string& key = write_key_;
    std::string& value = write_value_;
    // Later mutations of the same record win: WriteBatch applies in insertion order.
    for (const Mutation& m : mutations) {
      key.clear();
      value.clear();
      // Mutations come from the Index, so these are bugs; refusing them keeps a key that
      // LoadInto would reject off the disk.
      if (static_cast<int>(m.tier) >= kNumTiers) {
        return Status::Internal("mutation with unknown tier " +
                                std::to_string(static_cast<int>(m.tier)));
      }
      if ((m.kind == MutationKind::kPutContext && !m.context_key) ||
          (m.kind == MutationKind::kPutHolder && !m.holder_key) ||
          (m.kind == MutationKind::kPutRegistration && !m.registration) ||
          (m.kind == MutationKind::kPutServerAddresses && !m.server_addresses)) {
        return Status::Internal(
            "context, holder, registration or server addresses mutation without its value");
      }
      rocksdb::Status s;
      switch (m.kind) {
        case MutationKind::kPutContext:
          AppendContextKey(m.context, &key);
          AppendContextValue(*m.context_key, &value);
          s = batch.Put(ToSlice(key), ToSlice(value));
          break;
        case MutationKind::kPutHolder:
          AppendHolderKey(m.holder, &key);
          AppendHolderValue(*m.holder_key, &value);
          s = batch.Put(ToSlice(key), ToSlice(value));
          break;
        case MutationKind::kPutBlock:
        case MutationKind::kDeleteBlock:
          // No record of their own: a block lives in its entries' records, and the Index
          // never keeps a block without entries (its last entry's delete removes it).
          continue;
        case MutationKind::kPutEntry:
          AppendEntryKey(m.stamp, m.context, m.holder, m.tier, &key);
          AppendEntryValue(m.depth, m.key, m.refcount, m.engine_hash, m.location, &value);
          s = batch.Put(entries_, ToSlice(key), ToSlice(value));
          break;
        case MutationKind::kDeleteEntry:
          AppendEntryKey(m.stamp, m.context, m.holder, m.tier, &key);
          s = batch.Delete(entries_, ToSlice(key));
          break;
        case MutationKind::kPutRegistration:
          AppendRegistrationKey(m.location, &key);
          PutRegistration(&value, *m.registration);
          s = batch.Put(ToSlice(key), ToSlice(value));
          break;
        case MutationKind::kDeleteRegistration:
          AppendRegistrationKey(m.location, &key);
          s = batch.Delete(ToSlice(key));
          break;
        case MutationKind::kPutStreamPosition:
          AppendStreamPositionKey(m.location, &key);
          AppendStreamPositionValue(m.stamp, &value);
          s = batch.Put(ToSlice(key), ToSlice(value));
          break;
        case MutationKind::kDeleteStreamPosition:
          AppendStreamPositionKey(m.location, &key);
          s = batch.Delete(ToSlice(key));
          break;
        case MutationKind::kPutServerAddresses:
          AppendServerAddressesKey(m.stamp, &key);
          AppendServerAddressesValue(*m.server_addresses, &value);
          s = batch.Put(ToSlice(key), ToSlice(value));
          break;
        case MutationKind::kDeleteServerAddresses:
          AppendServerAddressesKey(m.stamp, &key);
          s = batch.Delete(ToSlice(key));
          break;
        default:
          return Status::Internal("unknown mutation kind " +
                                  std::to_string(static_cast<int>(m.kind)));
      }
      KVATLAS_RETURN_IF_ERROR(FromRocks(s, "building write batch"));
    }
    value.clear();
    PutFixed64(&value, applied_index);
    KVATLAS_RETURN_IF_ERROR(FromRocks(
        batch.Put(ToSlice(MetaKey(kMetaAppliedIndex)), ToSlice(value)), "building write batch"));
    return FromRocks(db_->Write(write_options_, &batch), "writing to " + path_);
  }

  Status LoadInto(RecordLoader* loader) const override {
    auto load_context = [loader](std::string_view k, std::string_view v) -> Status {
      KVATLAS_ASSIGN_OR_RETURN(uint32_t id, DecodeContextRecordKey(k));
      KVATLAS_ASSIGN_OR_RETURN(ContextKey context, DecodeContextValue(k, v));
      return loader->LoadContext(id, context);
    };
    auto load_holder = [loader](std::string_view k, std::string_view v) -> Status {
      KVATLAS_ASSIGN_OR_RETURN(uint32_t id, DecodeHolderRecordKey(k));
      KVATLAS_ASSIGN_OR_RETURN(HolderKey holder, DecodeHolderValue(k, v));
      return loader->LoadHolder(id, holder);
    };
    KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kContext, load_context));
    KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kHolder, load_holder));
    return LoadEntries(loader);
  }

  Status LoadRegistry(Registry* registry) const override {
    auto load_registration = [registry](std::string_view k, std::string_view v) -> Status {
      KVATLAS_ASSIGN_OR_RETURN(std::string_view name,
                               DecodeNamedRecordKey(k, RecordType::kRegistration));
      KVATLAS_ASSIGN_OR_RETURN(Registration r, DecodeRegistrationValue(k, v));
      if (r.Key() != name) {
        return Status::Corruption("record " + DescribeKey(k) + " holds the registration of " +
                                  r.Key());
      }
      registry->registrations.emplace(std::string(name), std::move(r));
      return Status::Ok();
    };
    auto load_position = [registry](std::string_view k, std::string_view v) -> Status {
      KVATLAS_ASSIGN_OR_RETURN(std::string_view name,
                               DecodeNamedRecordKey(k, RecordType::kStreamPosition));
      KVATLAS_ASSIGN_OR_RETURN(uint64_t sequence, DecodeStreamPositionValue(k, v));
      registry->positions.emplace(std::string(name), sequence);
      return Status::Ok();
    };
    auto load_server = [registry](std::string_view k, std::string_view v) -> Status {
      KVATLAS_ASSIGN_OR_RETURN(uint64_t id, DecodeServerAddressesRecordKey(k));
      KVATLAS_ASSIGN_OR_RETURN(ServerAddresses addresses, DecodeServerAddressesValue(k, v));
      registry->servers.emplace(id, std::move(addresses));
      return Status::Ok();
    };
    KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kRegistration, load_registration));
    KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kStreamPosition, load_position));
    return Scan(RecordType::kServerAddresses, load_server);
  }

  Result<std::unique_ptr<Capture>> CaptureAll() const override;

  Status ReplaceAll(std::string_view snapshot) override {
    KVATLAS_RETURN_IF_ERROR(Storage::SnapshotAppliedIndex(snapshot).status());
    rocksdb::WriteBatch batch;
    // Every record type is an ASCII letter: [0x00, 0xff) covers the whole key space.
    const std::string begin(1, '\0'), end(1, '\xff');
    for (rocksdb::ColumnFamilyHandle* family : families_) {
      KVATLAS_RETURN_IF_ERROR(FromRocks(batch.DeleteRange(family, ToSlice(begin), ToSlice(end)),
                                        "building restore batch"));
    }
    const std::string version_key = MetaKey(kMetaFormatVersion);
    std::optional<std::string> version_value;
    Result<Revision> walked = WalkSnapshot(snapshot, [&](std::string_view k, std::string_view v) {
      if (k == version_key) version_value = std::string(v);
      return FromRocks(batch.Put(FamilyOf(k), ToSlice(k), ToSlice(v)), "building restore batch");
    });
    KVATLAS_RETURN_IF_ERROR(walked.status());
    // A snapshot is the records of its sender's database: refuse one this build cannot read
    // before it replaces anything, and upgrade an older one after.
    if (!version_value.has_value()) {
      return Status::Corruption("snapshot has no format_version record");
    }
    KVATLAS_ASSIGN_OR_RETURN(uint32_t version, ReadableFormatVersion(*version_value, "snapshot"));
    rocksdb::WriteOptions sync;
    sync.sync = true;
    KVATLAS_RETURN_IF_ERROR(
        FromRocks(db_->Write(sync, &batch), "restoring a snapshot into " + path_));
    if (version == kStorageFormatVersion) return Status::Ok();
    return Upgrade(version);
  }

  Status Flush() override {
    if (write_options_.disableWAL) {
      // Without a WAL, durability at a clean stop means flushing the memtables.
      rocksdb::FlushOptions wait;
      wait.wait = true;
      return FromRocks(db_->Flush(wait, families_), "flushing memtables");
    }
    return FromRocks(db_->FlushWAL(/*sync=*/true), "syncing WAL");
  }

  uint64_t ApproximateSizeBytes() const override {
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

 private:
  // The raw value of meta record `name`; nullopt when absent.
  Result<std::optional<std::string>> GetMeta(std::string_view name) const {
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ToSlice(MetaKey(name)), &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    KVATLAS_RETURN_IF_ERROR(FromRocks(s, "reading " + std::string(name) + " in " + path_));
    return std::optional<std::string>(std::move(value));
  }

  // Meta records are written once per database, so always synchronously.
  Status PutMeta(std::string_view name, std::string_view value) {
    rocksdb::WriteOptions sync;
    sync.sync = true;
    return FromRocks(db_->Put(sync, ToSlice(MetaKey(name)), ToSlice(value)),
                     "writing " + std::string(name) + " in " + path_);
  }

  // Where a record of this key lives: entries in their column family, the rest in the
  // default one.
  rocksdb::ColumnFamilyHandle* FamilyOf(std::string_view key) const {
    return !key.empty() && key[0] == static_cast<char>(RecordType::kEntry) ? entries_ : meta_;
  }

  // An iterator over the records of `type` only (not positioned). A boot scan reads
  // everything once: it stays out of the cache and reads ahead sequentially.
  std::unique_ptr<rocksdb::Iterator> NewTypeIterator(RecordType type) const {
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
  static Result<uint32_t> ReadableFormatVersion(std::string_view stored, std::string_view what) {
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

  // Rewrites the entry records of a version 1 to 3 database as version 4 `T` records in
  // their column family. Versions 1 and 2 keep a block's depth and stamp in a `B` record
  // of its own, version 3 in each `E` record; both are in (context, key) order, so one
  // merge pass pairs them. Everything, the version included, goes in one synced batch: a
  // crash leaves the database wholly old or wholly new (the batch holds every entry record
  // once, a one-time cost of about the database's size in memory).
  Status Upgrade(uint32_t from_version) {
    rocksdb::WriteBatch batch;
    std::unique_ptr<rocksdb::Iterator> blocks = NewTypeIterator(RecordType::kBlock);
    const char block_type = static_cast<char>(RecordType::kBlock);
    blocks->Seek(rocksdb::Slice(&block_type, 1));
    std::string key;
    std::string value;
    // The block part of a version 1/2 entry: its `B` record.
    auto block_of = [&](std::string_view k, const Version3EntryKey& e) -> Result<BlockValue> {
      // Blocks before this entry's have no entries: the Index never left such a block, so
      // they are dropped with the other `B` records.
      std::optional<BlockRecordKey> bk;
      for (; blocks->Valid(); blocks->Next()) {
        KVATLAS_ASSIGN_OR_RETURN(bk, DecodeBlockRecordKey(View(blocks->key())));
        if (std::tie(bk->context, bk->key) >= std::tie(e.context, e.key)) break;
      }
      KVATLAS_RETURN_IF_ERROR(FromRocks(blocks->status(), "scanning " + path_));
      if (!blocks->Valid() || bk->context != e.context || bk->key != e.key) {
        return Status::Corruption("record " + DescribeKey(k) + " has no block record");
      }
      return DecodeBlockValue(View(blocks->key()), View(blocks->value()));
    };
    auto upgrade_entry = [&](std::string_view k, std::string_view v) -> Status {
      KVATLAS_ASSIGN_OR_RETURN(Version3EntryKey e, DecodeVersion3EntryKey(k));
      Version3EntryValue ev;
      if (from_version >= 3) {
        KVATLAS_ASSIGN_OR_RETURN(ev, DecodeVersion3EntryValue(k, v));
      } else {
        KVATLAS_ASSIGN_OR_RETURN(ev, DecodeVersion2EntryValue(k, v));
        KVATLAS_ASSIGN_OR_RETURN(ev.block, block_of(k, e));
      }
      key.clear();
      value.clear();
      AppendEntryKey(ev.block.stamp, e.context, e.holder, e.tier, &key);
      AppendEntryValue(ev.block.depth, e.key, ev.refcount, ev.engine_hash, ev.location, &value);
      return FromRocks(batch.Put(entries_, ToSlice(key), ToSlice(value)), "building upgrade batch");
    };
    KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kVersion3Entry, upgrade_entry));
    for (const RecordType gone : {RecordType::kBlock, RecordType::kVersion3Entry}) {
      const char first = static_cast<char>(gone);
      const char limit = static_cast<char>(first + 1);
      KVATLAS_RETURN_IF_ERROR(
          FromRocks(batch.DeleteRange(meta_, rocksdb::Slice(&first, 1), rocksdb::Slice(&limit, 1)),
                    "building upgrade batch"));
    }
    value.clear();
    PutFixed32(&value, kStorageFormatVersion);
    KVATLAS_RETURN_IF_ERROR(
        FromRocks(batch.Put(meta_, ToSlice(MetaKey(kMetaFormatVersion)), ToSlice(value)),
                  "building upgrade batch"));
    rocksdb::WriteOptions sync;
    sync.sync = true;
    const std::string to = "storage format version " + std::to_string(kStorageFormatVersion);
    KVATLAS_RETURN_IF_ERROR(
        FromRocks(db_->Write(sync, &batch), "upgrading " + path_ + " to " + to));
    LogInfo("upgraded " + path_ + " from storage format version " + std::to_string(from_version) +
            " to " + to + " (" + std::to_string(batch.Count()) + " record operations)");
    return Status::Ok();
  }

  // Entry records come off disk by (stamp, context, holder, tier): each context's blocks in
  // creation order, which is the FIFO eviction order the Index needs (it must be the same
  // on every replica and after every restart; docs/storage.md §Boot), and the entries of a
  // block together, after which comes the next block.
  Status LoadEntries(RecordLoader* loader) const {
    // The block being loaded: its first entry's key, and the block key and depth that entry
    // recorded.
    std::optional<EntryRecordKey> block;
    BlockKey block_key = 0;
    uint32_t block_depth = 0;
    auto load = [&](std::string_view k, std::string_view v) -> Status {
      KVATLAS_ASSIGN_OR_RETURN(EntryRecordKey e, DecodeEntryRecordKey(k));
      KVATLAS_ASSIGN_OR_RETURN(EntryValue ev, DecodeEntryValue(k, v));
      if (block && block->stamp == e.stamp && block->context == e.context) {
        // Another copy of the block just loaded: it must agree on the block's part.
        if (ev.key != block_key || ev.depth != block_depth) {
          return Status::Corruption("record " + DescribeKey(k) +
                                    " disagrees with its block's other entries on key or depth");
        }
      } else {
        KVATLAS_RETURN_IF_ERROR(loader->LoadBlock(e.context, ev.key, ev.depth, e.stamp));
        block = e;
        block_key = ev.key;
        block_depth = ev.depth;
      }
      return loader->LoadEntry(e.context, ev.key, e.holder, e.tier, ev.refcount, ev.engine_hash,
                               std::move(ev.location));
    };
    return Scan(RecordType::kEntry, load);
  }

  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> families_;  // owned: destroyed before Close
  rocksdb::ColumnFamilyHandle* meta_;                   // families_[0], the default family
  rocksdb::ColumnFamilyHandle* entries_;                // families_[1]
  std::shared_ptr<FlushJitter> jitter_;
  rocksdb::WriteOptions write_options_;
  std::string path_;
  // Write's scratch, reused across calls.
  rocksdb::WriteBatch write_batch_;
  std::string write_key_;
  std::string write_value_;
};

// Reads nothing when captured: a point read would sort the whole vector memtable (see
// MakeOptions), which on the applying thread stalled commits for 0.4-0.8 s per snapshot
// with a 200 MB memtable. The applied index comes from the scan itself, off that thread.
class RocksDbCapture final : public Storage::Capture {
 public:
  // `families`: the default, then the entries column family (alive as long as this).
  RocksDbCapture(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> families)
      : db_(db), families_(std::move(families)), snapshot_(db->GetSnapshot()) {}
  ~RocksDbCapture() override { db_->ReleaseSnapshot(snapshot_); }

  Result<std::string> Serialize() const override {
    std::string out(kSnapshotMagic);
    out.push_back(static_cast<char>(kSnapshotVersion));
    const size_t applied_at = out.size();
    PutFixed64(&out, 0);  // The applied index, filled in once the scan has read it.
    rocksdb::ReadOptions read;
    read.snapshot = snapshot_;
    read.fill_cache = false;
    read.readahead_size = 2 << 20;
    const std::string applied_key = MetaKey(kMetaAppliedIndex);
    Revision applied = 0;  // A database never written has none.
    uint64_t count = 0;
    for (rocksdb::ColumnFamilyHandle* family : families_) {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, family));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        if (View(it->key()) == applied_key) {
          KVATLAS_ASSIGN_OR_RETURN(applied, DecodeMetaFixed64(applied_key, View(it->value())));
        }
        PutLengthPrefixed(&out, View(it->key()));
        PutLengthPrefixed(&out, View(it->value()));
        ++count;
      }
      KVATLAS_RETURN_IF_ERROR(FromRocks(it->status(), "reading a snapshot"));
    }
    PutFixed64(&out, count);
    std::string fixed;
    PutFixed64(&fixed, applied);
    out.replace(applied_at, fixed.size(), fixed);
    return out;
  }

 private:
  rocksdb::DB* db_;
  std::vector<rocksdb::ColumnFamilyHandle*> families_;
  const rocksdb::Snapshot* snapshot_;
};

Result<std::unique_ptr<Storage::Capture>> RocksDbStorage::CaptureAll() const {
  // Pins the database as it is now, which on the applying thread (the only writer) is the
  // state after the last applied write.
  return std::unique_ptr<Capture>(std::make_unique<RocksDbCapture>(db_.get(), families_));
}

}  // namespace

Result<Revision> Storage::SnapshotAppliedIndex(std::string_view snapshot) {
  return WalkSnapshot(snapshot, nullptr);
}

Result<std::unique_ptr<Storage>> Storage::Open(const StorageOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("storage path is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) {
    return Status::IOError("cannot create data directory " + options.path + ": " + ec.message());
  }
  std::shared_ptr<FlushJitter> jitter;
  const rocksdb::Options rocks = MakeOptions(options, &jitter);
  const std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions(rocks)},
      {kEntriesColumnFamily, rocksdb::ColumnFamilyOptions(rocks)}};
  std::vector<rocksdb::ColumnFamilyHandle*> families;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(rocksdb::DBOptions(rocks), options.path, descriptors, &families, &raw);
  if (!s.ok()) {
    if (IsLockConflict(s)) {
      return Status::IOError("data directory " + options.path +
                             " is in use by another kvatlas process? (" + s.ToString() + ")");
    }
    return FromRocks(s, "opening " + options.path);
  }
  auto storage = std::make_unique<RocksDbStorage>(std::unique_ptr<rocksdb::DB>(raw),
                                                  std::move(families), std::move(jitter), options);
  KVATLAS_RETURN_IF_ERROR(storage->CheckFormatVersion());
  return std::unique_ptr<Storage>(std::move(storage));
}

}  // namespace kvatlas::server
