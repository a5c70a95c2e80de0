// Format upgrades (docs/storage.md §Versions): a version 1 to 3 database, found at Open or
// restored from a snapshot, is rewritten as the current version in one synced WriteBatch,
// so that a crash leaves it wholly old or wholly new. On-disk encodings of the old
// versions are decoded by key_codec.h.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "common/internal/log.h"
#include "server/storage/rocksdb_storage_impl.h"

namespace kvatlas::server::rocksdb_storage {

// Rewrites the entry records of a version 1 to 3 database as version 4 `T` records in
// their column family. Versions 1 and 2 keep a block's depth and stamp in a `B` record
// of its own, version 3 in each `E` record; both are in (context, key) order, so one
// merge pass pairs them. Everything, the version included, goes in one synced batch: a
// crash leaves the database wholly old or wholly new (the batch holds every entry record
// once, a one-time cost of about the database's size in memory).
Status RocksDbStorage::Upgrade(uint32_t from_version) {
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
  KVATLAS_RETURN_IF_ERROR(FromRocks(db_->Write(sync, &batch), "upgrading " + path_ + " to " + to));
  LogInfo("upgraded " + path_ + " from storage format version " + std::to_string(from_version) +
          " to " + to + " (" + std::to_string(batch.Count()) + " record operations)");
  return Status::Ok();
}

}  // namespace kvatlas::server::rocksdb_storage
