// Helpers shared by the RocksDbStorage tests (rocksdb_storage_test.cc, rocksdb_load_test.cc).
#pragma once

#include <doctest/doctest.h>
#include <rocksdb/db.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/bytes.h"
#include "server/index/index.h"
#include "server/storage/key_codec.h"
#include "server/storage/storage.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {

inline StorageOptions SmallOptions(const testing::TempDir& dir) {
  StorageOptions o;
  o.path = dir.str() + "/db";
  o.sync_writes = false;
  o.block_cache_bytes = 1 << 20;
  o.write_buffer_bytes = 1 << 20;
  return o;
}

inline std::unique_ptr<Storage> OpenOk(const StorageOptions& options) {
  Result<std::unique_ptr<Storage>> opened = Storage::Open(options);
  REQUIRE_MESSAGE(opened.has_value(), opened.status().ToString());
  return std::move(opened).value();
}

// A database opened with RocksDB directly, every column family it has (a new one gets the
// default family only, as versions 1 to 3 had), bypassing Storage (which must be closed).
class RawDb {
 public:
  RawDb(const std::string& path, bool read_only) {
    rocksdb::Options options;
    options.create_if_missing = true;
    std::vector<std::string> names;
    if (!rocksdb::DB::ListColumnFamilies(options, path, &names).ok()) {
      names = {rocksdb::kDefaultColumnFamilyName};
    }
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& name : names) descriptors.emplace_back(name, options);
    rocksdb::DB* raw = nullptr;
    const rocksdb::Status s =
        read_only ? rocksdb::DB::OpenForReadOnly(options, path, descriptors, &families_, &raw)
                  : rocksdb::DB::Open(options, path, descriptors, &families_, &raw);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    db_.reset(raw);
  }
  ~RawDb() {
    for (rocksdb::ColumnFamilyHandle* family : families_) {
      (void)db_->DestroyColumnFamilyHandle(family);
    }
  }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  rocksdb::DB* db() { return db_.get(); }
  const std::vector<rocksdb::ColumnFamilyHandle*>& families() { return families_; }
  // The family a record of `key` belongs in: entry records (`T`) in "entries" when the
  // database has it.
  rocksdb::ColumnFamilyHandle* FamilyOf(std::string_view key) {
    for (rocksdb::ColumnFamilyHandle* family : families_) {
      if (family->GetName() == "entries" && !key.empty() && key[0] == 'T') return family;
    }
    return families_.front();
  }

 private:
  std::vector<rocksdb::ColumnFamilyHandle*> families_;
  std::unique_ptr<rocksdb::DB> db_;
};

// The database's records as raw bytes, from every column family (Storage closed).
inline std::map<std::string, std::string> Dump(const std::string& path) {
  RawDb raw(path, /*read_only=*/true);
  std::map<std::string, std::string> out;
  for (rocksdb::ColumnFamilyHandle* family : raw.families()) {
    std::unique_ptr<rocksdb::Iterator> it(raw.db()->NewIterator(rocksdb::ReadOptions(), family));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      CHECK_MESSAGE(out.count(it->key().ToString()) == 0, "a key in two column families");
      out[it->key().ToString()] = it->value().ToString();
    }
    REQUIRE(it->status().ok());
  }
  return out;
}

// Writes one raw record, bypassing Storage (to plant corruption or build an old database).
inline void RawPut(const std::string& path, std::string_view key, std::string_view value) {
  RawDb raw(path, /*read_only=*/false);
  REQUIRE(raw.db()
              ->Put(rocksdb::WriteOptions(), raw.FamilyOf(key),
                    rocksdb::Slice(key.data(), key.size()),
                    rocksdb::Slice(value.data(), value.size()))
              .ok());
}

// Checks that `s` failed with `code` and a message containing `part`.
inline void CheckError(const Status& s, StatusCode code, std::string_view part = "") {
  CHECK_MESSAGE(s.code() == code, s.ToString());
  CHECK_MESSAGE(s.message().find(part) != std::string::npos, s.ToString());
}

inline Status OpenStatus(const StorageOptions& options) { return Storage::Open(options).status(); }

inline std::string Key(std::string_view meta) {
  std::string k;
  AppendMetaKey(meta, &k);
  return k;
}

inline std::string Fixed64Bytes(uint64_t v) {
  std::string s;
  PutFixed64(&s, v);
  return s;
}

inline Mutation PutBlock(uint32_t context, BlockKey key, uint32_t depth, uint64_t stamp) {
  Mutation m;
  m.kind = MutationKind::kPutBlock;
  m.context = context;
  m.key = key;
  m.depth = depth;
  m.stamp = stamp;
  return m;
}

inline Mutation PutEntry(uint32_t context, BlockKey key, uint32_t holder, Tier tier,
                         std::string location) {
  Mutation m = PutBlock(context, key, 0, 0);
  m.kind = MutationKind::kPutEntry;
  m.holder = holder;
  m.tier = tier;
  m.refcount = 1;
  m.engine_hash = key ^ 0xabcdef;
  m.location = std::move(location);
  return m;
}

inline Mutation Deleting(Mutation m) {
  m.kind =
      m.kind == MutationKind::kPutBlock ? MutationKind::kDeleteBlock : MutationKind::kDeleteEntry;
  return m;
}

inline std::vector<Mutation> OneOfEach() {
  Mutation ctx;
  ctx.kind = MutationKind::kPutContext;
  ctx.context = 1;
  ctx.context_key = std::make_shared<const ContextKey>(ContextKey{"t", "llama", "", 16, "salt"});
  Mutation holder;
  holder.kind = MutationKind::kPutHolder;
  holder.holder = 2;
  holder.holder_key = std::make_shared<const HolderKey>(HolderKey{"engine-0", 3});
  Mutation entry = PutEntry(1, 0x1234, 2, Tier::kDisk, "loc");
  entry.stamp = 1;  // the block's, as the Index fills it in
  return {ctx, holder, PutBlock(1, 0x1234, 0, 1), entry};
}

inline std::unique_ptr<Index> LoadedIndex(const Storage& storage, const IndexOptions& options) {
  auto index = std::make_unique<Index>(options);
  Status s = storage.LoadInto(index.get());
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  return index;
}

}  // namespace kvatlas::server
