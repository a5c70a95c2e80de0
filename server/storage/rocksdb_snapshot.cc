// Replicated-log snapshots (docs/storage.md §Snapshots): CaptureAll pins a RocksDB snapshot
// on the applying thread, Serialize writes its records in the "KVSN" format from any
// thread, SnapshotAppliedIndex reads a serialized one's applied_index, and ReplaceAll
// swaps every record for a serialized snapshot's in one synced WriteBatch, checking the
// whole snapshot first and upgrading an older format version after.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/storage/rocksdb_storage_impl.h"

namespace kvatlas::server::rocksdb_storage {
namespace {

constexpr std::string_view kSnapshotMagic = "KVSN";
constexpr uint8_t kSnapshotVersion = 1;

// Checks a serialized capture and calls fn(key, value) for every record (fn may be null).
// Returns its applied_index.
Result<Revision> WalkSnapshot(std::string_view snapshot,
                              const std::function<Status(std::string_view, std::string_view)>& fn) {
  const auto corrupt = [](const std::string& what) {
    return Status::Corruption("snapshot: " + what);
  };
  KVATLAS_ASSIGN_OR_RETURN(const Revision applied, Storage::SnapshotHeaderAppliedIndex(snapshot));
  constexpr size_t kHeaderBytes = kSnapshotMagic.size() + 1 + 8;
  ByteReader in(snapshot.substr(kHeaderBytes, snapshot.size() - kHeaderBytes - 8));
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
    ChunkedBytes chunks(1 << 20);
    KVATLAS_RETURN_IF_ERROR(SerializeInto(&chunks));
    std::string out;
    out.reserve(chunks.size());
    for (const ChunkedBytes::Chunk& chunk : chunks.chunks()) out.append(chunk.data, chunk.size);
    return out;
  }

  Status SerializeInto(ChunkedBytes* out) const override {
    std::string scratch(kSnapshotMagic);
    scratch.push_back(static_cast<char>(kSnapshotVersion));
    const size_t applied_at = out->size() + scratch.size();
    PutFixed64(&scratch, 0);  // The applied index, filled in once the scan has read it.
    out->Append(scratch);
    const std::string applied_key = MetaKey(kMetaAppliedIndex);
    Revision applied = 0;  // A database never written has none.
    uint64_t count = 0;
    KVATLAS_RETURN_IF_ERROR(ForEachRecord([&](std::string_view key, std::string_view value) {
      if (key == applied_key) {
        KVATLAS_ASSIGN_OR_RETURN(applied, DecodeMetaFixed64(applied_key, value));
      }
      scratch.clear();
      PutLengthPrefixed(&scratch, key);
      PutLengthPrefixed(&scratch, value);
      out->Append(scratch);
      ++count;
      return Status::Ok();
    }));
    scratch.clear();
    PutFixed64(&scratch, count);
    out->Append(scratch);
    scratch.clear();
    PutFixed64(&scratch, applied);
    if (!out->Patch(applied_at, scratch) || !out->ok()) {
      return Status::ResourceExhausted("no memory for a snapshot's chunks");
    }
    return Status::Ok();
  }

  Status ForEachRecord(
      const std::function<Status(std::string_view, std::string_view)>& fn) const override {
    rocksdb::ReadOptions read;
    read.snapshot = snapshot_;
    read.fill_cache = false;
    read.readahead_size = 2 << 20;
    for (rocksdb::ColumnFamilyHandle* family : families_) {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, family));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        KVATLAS_RETURN_IF_ERROR(fn(View(it->key()), View(it->value())));
      }
      KVATLAS_RETURN_IF_ERROR(FromRocks(it->status(), "reading a snapshot"));
    }
    return Status::Ok();
  }

 private:
  rocksdb::DB* db_;
  std::vector<rocksdb::ColumnFamilyHandle*> families_;
  const rocksdb::Snapshot* snapshot_;
};

}  // namespace

Result<std::unique_ptr<Storage::Capture>> RocksDbStorage::CaptureAll() const {
  // Pins the database as it is now, which on the applying thread (the only writer) is the
  // state after the last applied write.
  return std::unique_ptr<Capture>(std::make_unique<RocksDbCapture>(db_.get(), families_));
}

Status RocksDbStorage::ReplaceAll(std::string_view snapshot) {
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

Status RocksDbStorage::Clear() {
  rocksdb::WriteBatch batch;
  const std::string begin(1, '\0'), end(1, '\xff');
  for (rocksdb::ColumnFamilyHandle* family : families_) {
    KVATLAS_RETURN_IF_ERROR(
        FromRocks(batch.DeleteRange(family, ToSlice(begin), ToSlice(end)), "building clear batch"));
  }
  for (const std::string_view name : {kMetaFormatVersion, kMetaHashSeed}) {
    KVATLAS_ASSIGN_OR_RETURN(std::optional<std::string> kept, GetMeta(name));
    if (!kept.has_value()) continue;
    KVATLAS_RETURN_IF_ERROR(FromRocks(batch.Put(meta_, ToSlice(MetaKey(name)), ToSlice(*kept)),
                                      "building clear batch"));
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  KVATLAS_RETURN_IF_ERROR(FromRocks(db_->Write(sync, &batch), "clearing " + path_));
  // The range deletions hide the records; a compaction drops their files.
  for (rocksdb::ColumnFamilyHandle* family : families_) {
    KVATLAS_RETURN_IF_ERROR(
        FromRocks(db_->CompactRange(rocksdb::CompactRangeOptions(), family, nullptr, nullptr),
                  "compacting " + path_ + " after clearing it"));
  }
  return Status::Ok();
}

}  // namespace kvatlas::server::rocksdb_storage

namespace kvatlas::server {

Result<Revision> Storage::SnapshotAppliedIndex(std::string_view snapshot) {
  return rocksdb_storage::WalkSnapshot(snapshot, nullptr);
}

Result<Revision> Storage::SnapshotHeaderAppliedIndex(std::string_view snapshot) {
  using rocksdb_storage::kSnapshotMagic;
  if (snapshot.size() < kSnapshotMagic.size() + 1 + 8 + 8 ||
      snapshot.substr(0, kSnapshotMagic.size()) != kSnapshotMagic) {
    return Status::Corruption("snapshot: bad magic or too short");
  }
  ByteReader in(snapshot.substr(kSnapshotMagic.size(), 1 + 8));
  if (in.U8() != rocksdb_storage::kSnapshotVersion) {
    return Status::Corruption("snapshot: unknown version");
  }
  return in.Fixed64();
}

Result<Revision> Storage::WalkSnapshot(
    std::string_view snapshot,
    const std::function<Status(std::string_view key, std::string_view value)>& fn) {
  return rocksdb_storage::WalkSnapshot(snapshot, fn);
}

}  // namespace kvatlas::server
