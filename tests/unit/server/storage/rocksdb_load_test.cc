// RocksDbStorage::LoadInto and the format upgrades: an index rebuilt from disk must equal
// the one that applied the commands.
#include <doctest/doctest.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvatlas/common/block_hasher.h"
#include "server/index/index.h"
#include "server/storage/key_codec.h"
#include "server/storage/storage.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/server/storage/storage_test_support.h"

namespace kvatlas::server {
namespace {

using testing::TempDir;

// --- LoadInto: an index rebuilt from disk must equal the one that applied the commands ----

using Rng = std::mt19937_64;

const ContextKey kContexts[] = {{"t", "llama", "", 16, ""}, {"t", "qwen", "lora-a", 32, "salt"}};
const HolderKey kHolders[] = {{"engine-a", 0}, {"engine-a", 1}, {"pool", 0}};
constexpr int kChains = 6;
constexpr uint32_t kChainBlocks = 12;

uint64_t ChainKey(int chain, uint32_t i) { return (uint64_t(chain + 1) << 32) | i; }
uint64_t EngineHashOf(uint64_t key) { return key ^ 0x5555'0000'0000'5555ULL; }

std::vector<uint64_t> ChainKeys(int chain) {
  std::vector<uint64_t> keys;
  for (uint32_t i = 0; i < kChainBlocks; ++i) keys.push_back(ChainKey(chain, i));
  return keys;
}

// Stores runs of known chains (so lookups hit), sometimes as kLocal hashes chained from a
// parent's engine hash (which exercises the alias table rebuilt from entries), removes by
// key or engine hash, and now and then clears a holder.
Command RandomCommand(Rng& rng) {
  const ContextKey& context = kContexts[rng() % 2];
  const HolderKey& holder = kHolders[rng() % 3];
  const int chain = static_cast<int>(rng() % kChains);
  const uint32_t start = static_cast<uint32_t>(rng() % kChainBlocks);
  const uint32_t len = 1 + static_cast<uint32_t>(rng() % (kChainBlocks - start));
  const uint64_t roll = rng() % 100;
  if (roll < 60) {
    StoreCommand c;
    c.context = context;
    c.holder = holder;
    c.tier = static_cast<Tier>(rng() % kNumTiers);
    if (start > 0) c.parent = EngineHashOf(ChainKey(chain, start - 1));
    if (roll < 10) {
      c.mode = KeyMode::kLocal;
      for (uint32_t i = 0; i < len; ++i) c.hashes.push_back(rng() % 1000);
    } else {
      c.base_depth = start;
      for (uint32_t i = start; i < start + len; ++i) c.hashes.push_back(ChainKey(chain, i));
    }
    for (uint64_t h : c.hashes) c.engine_hashes.push_back(EngineHashOf(h));
    if (c.tier == Tier::kShared) {
      for (uint64_t h : c.hashes) c.locations.push_back("nvmf://pool/" + std::to_string(h));
    }
    return c;
  }
  if (roll < 95) {
    RemoveCommand c;
    c.context = context;
    c.holder = holder;
    if (rng() % 2) c.tier = static_cast<Tier>(rng() % kNumTiers);
    for (uint32_t i = start; i < start + len; ++i) {
      c.hashes.push_back(rng() % 2 ? ChainKey(chain, i) : EngineHashOf(ChainKey(chain, i)));
    }
    return c;
  }
  ClearCommand c;
  c.holder = holder;
  if (rng() % 2) c.context = context;
  return c;
}

// Applies `batches` batches of up to 6 random commands to `index`, writing each batch's
// mutations to `storage` at the next revision.
void ApplyAndWrite(Rng& rng, int batches, Index* index, Storage* storage) {
  Revision revision = storage->AppliedIndex().value();
  for (int b = 0; b < batches; ++b) {
    MutationList mutations;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) index->Apply(RandomCommand(rng), kDefaultHashSeed, &mutations);
    REQUIRE(storage->Write(++revision, mutations).ok());
  }
}

std::string Describe(const LookupResult& r) {
  std::string s = std::to_string(r.blocks_queried) + "/" + std::to_string(r.blocks_found);
  for (const HolderMatch& h : r.holders) {
    s += " " + std::to_string(h.holder_id) + "=" + h.holder.ToString() + ":" +
         std::to_string(h.gpu) + "," + std::to_string(h.cpu) + "," + std::to_string(h.disk) + "," +
         std::to_string(h.shared);
    for (const std::string& l : h.shared_locations) s += "," + l;
  }
  return s;
}

// Every copy of every chain block, order-independent.
std::vector<std::string> Locations(const Index& index) {
  std::vector<std::string> out;
  for (int chain = 0; chain < kChains; ++chain) {
    for (uint64_t key : ChainKeys(chain)) {
      for (const BlockLocation& l : index.Locate(key)) {
        out.push_back(l.context.ToString() + " " + std::to_string(key) + " " + l.holder.ToString() +
                      " " + std::to_string(static_cast<int>(l.tier)) + " d" +
                      std::to_string(l.depth) + " r" + std::to_string(l.refcount) + " " +
                      std::to_string(l.engine_hash) + " " + l.location);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CheckSameState(const Index& expected, const Index& actual) {
  CHECK(actual.StateDigest() == expected.StateDigest());
  const IndexStats a = actual.Stats();
  const IndexStats e = expected.Stats();
  CHECK(a.contexts == e.contexts);
  CHECK(a.holders == e.holders);
  CHECK(a.blocks == e.blocks);
  CHECK(a.entries == e.entries);
  CHECK(a.aliases == e.aliases);
  CHECK(a.locations == e.locations);
  for (const ContextKey& context : kContexts) {
    for (int chain = 0; chain < kChains; ++chain) {
      const std::vector<uint64_t> keys = ChainKeys(chain);
      CHECK(Describe(actual.Lookup(context, keys)) == Describe(expected.Lookup(context, keys)));
    }
  }
  CHECK(Locations(actual) == Locations(expected));
}

// Continuing from `loaded` (writing to `storage`) must do exactly what continuing from
// `direct` does: in particular evict the same blocks, which needs the FIFO order back.
void CheckContinuesAlike(uint64_t seed, Index* direct, Index* loaded, Storage* storage) {
  Rng rng_direct(seed * 100);
  Rng rng_loaded(seed * 100);
  TempDir scratch;
  auto direct_sink = OpenOk(SmallOptions(scratch));
  ApplyAndWrite(rng_direct, 60, direct, direct_sink.get());
  ApplyAndWrite(rng_loaded, 60, loaded, storage);
  CheckSameState(*direct, *loaded);
}

// Writes `mutations` at `revision` the way a version 2 or 3 database held them, the input
// of the upgrade tests. Both key entries by (context, block key) in the default column
// family; version 2 has a `B` record per block and entry values without the block part,
// version 3 puts the block's depth and stamp in front of each entry value. Stamps were
// counted per context then: `stamps` maps this index's stamps to such counters, so that
// blocks of different contexts share stamps as they did.
struct OldStamps {
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> by_index_stamp;
  std::map<uint32_t, uint64_t> next;  // per context
  uint64_t Of(const Mutation& m) {
    auto [it, added] = by_index_stamp.try_emplace({m.context, m.stamp}, 0);
    if (added) it->second = ++next[m.context];
    return it->second;
  }
};

void WriteOldVersion(rocksdb::DB* db, uint32_t version, Revision revision,
                     const MutationList& mutations, OldStamps* stamps) {
  rocksdb::WriteBatch batch;
  for (const Mutation& m : mutations) {
    std::string k, v;
    switch (m.kind) {
      case MutationKind::kPutContext:
        AppendContextKey(m.context, &k);
        AppendContextValue(*m.context_key, &v);
        break;
      case MutationKind::kPutHolder:
        AppendHolderKey(m.holder, &k);
        AppendHolderValue(*m.holder_key, &v);
        break;
      case MutationKind::kPutBlock:
        if (version >= 3) continue;
        AppendBlockKey(m.context, m.key, &k);
        AppendBlockValue(m.depth, stamps->Of(m), &v);
        break;
      case MutationKind::kDeleteBlock:
        if (version >= 3) continue;
        AppendBlockKey(m.context, m.key, &k);
        break;
      case MutationKind::kPutEntry:
        AppendVersion3EntryKey(m.context, m.key, m.holder, m.tier, &k);
        if (version >= 3) {
          AppendVersion3EntryValue(BlockValue{m.depth, stamps->Of(m)}, m.refcount, m.engine_hash,
                                   m.location, &v);
        } else {
          PutFixed32(&v, m.refcount);
          PutFixed64(&v, m.engine_hash);
          PutLengthPrefixed(&v, m.location);
        }
        break;
      case MutationKind::kDeleteEntry:
        AppendVersion3EntryKey(m.context, m.key, m.holder, m.tier, &k);
        break;
      default:
        FAIL("unexpected mutation kind");
    }
    const bool is_delete =
        m.kind == MutationKind::kDeleteBlock || m.kind == MutationKind::kDeleteEntry;
    REQUIRE((is_delete ? batch.Delete(k) : batch.Put(k, v)).ok());
  }
  std::string applied;
  PutFixed64(&applied, revision);
  std::string version_value;
  PutFixed32(&version_value, version);
  REQUIRE(batch.Put(Key(kMetaAppliedIndex), applied).ok());
  REQUIRE(batch.Put(Key(kMetaFormatVersion), version_value).ok());
  REQUIRE(db->Write(rocksdb::WriteOptions(), &batch).ok());
}

// A version 1, 2 or 3 database at `path` holding what `batches` random batches did to
// `index` (version 1 differs from 2 only by lacking records this test does not write).
void BuildOldVersion(const std::string& path, uint32_t version, Rng& rng, int batches,
                     Index* index) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(options, path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  OldStamps stamps;
  for (int b = 0; b < batches; ++b) {
    MutationList mutations;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) index->Apply(RandomCommand(rng), kDefaultHashSeed, &mutations);
    WriteOldVersion(db.get(), version, static_cast<Revision>(b + 1), mutations, &stamps);
  }
  CHECK(stamps.next.size() == 2);  // both contexts, so stamps were shared between them
}

TEST_SUITE("rocksdb_storage") {
  TEST_CASE("RocksDbStorage: LoadInto rebuilds the index that applied the commands") {
    // A small cap, so that FIFO eviction runs before and after the restart.
    IndexOptions index_options;
    index_options.max_entries_per_context = 80;
    for (uint64_t seed : {1, 2, 3}) {
      CAPTURE(seed);
      TempDir run_dir;
      const StorageOptions run_options = SmallOptions(run_dir);
      Rng rng(seed);
      Index direct(index_options);
      {
        auto storage = OpenOk(run_options);
        ApplyAndWrite(rng, 60, &direct, storage.get());
      }
      auto storage = OpenOk(run_options);
      std::unique_ptr<Index> loaded = LoadedIndex(*storage, index_options);
      CheckSameState(direct, *loaded);

      // Continuing after the restart must evict the same blocks as the index that never
      // restarted: the FIFO order came back from the stamps.
      CheckContinuesAlike(seed, &direct, loaded.get(), storage.get());
      CHECK(direct.Stats().evicted_blocks > 0);

      storage.reset();
      CheckSameState(direct, *LoadedIndex(*OpenOk(run_options), index_options));
    }
  }

  TEST_CASE("RocksDbStorage: LoadInto of a new database loads nothing") {
    TempDir dir;
    auto storage = OpenOk(SmallOptions(dir));
    CHECK(LoadedIndex(*storage, {})->StateDigest() == Index().StateDigest());
  }

  TEST_CASE("RocksDbStorage: LoadInto reports a malformed record as kCorruption naming it") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    REQUIRE(OpenOk(options)->Write(1, OneOfEach()).ok());
    std::string key;
    SUBCASE("entry value") {
      AppendEntryKey(/*stamp=*/1, 1, 2, Tier::kDisk, &key);
      RawPut(options.path, key, "\x01\x02");
    }
    SUBCASE("context key") {
      key = "C\x01";
      RawPut(options.path, key, "");
    }
    SUBCASE("holder value") {
      AppendHolderKey(2, &key);
      RawPut(options.path, key, "\x09short");
    }
    Index index;
    CheckError(OpenOk(options)->LoadInto(&index), StatusCode::kCorruption, DescribeKey(key));
  }

  TEST_CASE("RocksDbStorage: a version 1, 2 or 3 database is upgraded at open to the same index") {
    IndexOptions index_options;
    index_options.max_entries_per_context = 80;
    for (uint32_t version : {1, 2, 3}) {
      const uint64_t seed = version;
      CAPTURE(version);
      TempDir dir;
      const StorageOptions options = SmallOptions(dir);
      Rng rng(seed);
      Index direct(index_options);
      BuildOldVersion(options.path, version == 1 ? 2 : version, rng, 60, &direct);
      if (version == 1) {  // version 1 has the same block and entry records as 2
        RawPut(options.path, Key(kMetaFormatVersion), std::string("\x01\x00\x00\x00", 4));
      }
      auto storage = OpenOk(options);
      CHECK(storage->AppliedIndex().value() == 60);
      std::unique_ptr<Index> loaded = LoadedIndex(*storage, index_options);
      CheckSameState(direct, *loaded);
      // The upgraded database goes on as a new one: same evictions, same state after reopen.
      CheckContinuesAlike(seed, &direct, loaded.get(), storage.get());
      storage.reset();
      std::map<std::string, std::string> records = Dump(options.path);
      CHECK(records[Key(kMetaFormatVersion)] == std::string("\x04\x00\x00\x00", 4));
      for (const auto& [key, value] : records) CHECK((key[0] != 'B' && key[0] != 'E'));
      CheckSameState(direct, *LoadedIndex(*OpenOk(options), index_options));
    }
  }

  TEST_CASE("RocksDbStorage: a version 2 entry without its block record fails the upgrade") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    Rng rng(5);
    Index direct;
    BuildOldVersion(options.path, 2, rng, 20, &direct);
    std::map<std::string, std::string> before = Dump(options.path);
    const auto entry =
        std::find_if(before.begin(), before.end(), [](const auto& r) { return r.first[0] == 'E'; });
    REQUIRE(entry != before.end());
    const std::string entry_key = entry->first;
    const Version3EntryKey e = DecodeVersion3EntryKey(entry_key).value();
    std::string block_key;
    AppendBlockKey(e.context, e.key, &block_key);
    {
      rocksdb::DB* raw = nullptr;
      REQUIRE(rocksdb::DB::Open(rocksdb::Options(), options.path, &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      REQUIRE(db->Delete(rocksdb::WriteOptions(), block_key).ok());
    }
    before = Dump(options.path);
    CheckError(OpenStatus(options), StatusCode::kCorruption,
               DescribeKey(entry_key) + " has no block record");
    CHECK(Dump(options.path) == before);  // nothing rewritten: still a version 2 database
  }

  TEST_CASE("RocksDbStorage: a snapshot of a version 2 database is upgraded when installed") {
    TempDir source_dir;
    Rng rng(9);
    Index direct;
    BuildOldVersion(source_dir.path().string(), 2, rng, 40, &direct);
    // The snapshot format (docs/storage.md §Snapshots) over the raw version 2 records.
    const std::map<std::string, std::string> records = Dump(source_dir.path().string());
    std::string snapshot = "KVSN";
    snapshot.push_back('\x01');
    PutFixed64(&snapshot, 40);
    for (const auto& [key, value] : records) {
      PutLengthPrefixed(&snapshot, key);
      PutLengthPrefixed(&snapshot, value);
    }
    PutFixed64(&snapshot, records.size());

    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    auto storage = OpenOk(options);
    REQUIRE(storage->ReplaceAll(snapshot).ok());
    CHECK(storage->AppliedIndex().value() == 40);
    CheckSameState(direct, *LoadedIndex(*storage, {}));
    storage.reset();
    CHECK(Dump(options.path)[Key(kMetaFormatVersion)] == std::string("\x04\x00\x00\x00", 4));

    // A snapshot from a newer format is refused before it replaces anything.
    std::string newer = snapshot;
    const std::string version_record = Key(kMetaFormatVersion);
    const size_t at = newer.find(version_record);
    REQUIRE(at != std::string::npos);
    newer[at + version_record.size() + 1] = '\x05';  // after the value's length byte
    storage = OpenOk(options);
    CheckError(storage->ReplaceAll(newer), StatusCode::kCorruption,
               "snapshot has storage format version 5");
    CheckSameState(direct, *LoadedIndex(*storage, {}));
  }

  TEST_CASE("RocksDbStorage: LoadInto refuses entries of one block that disagree on it") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    std::vector<Mutation> mutations = OneOfEach();  // block 0x1234 at stamp 1, tier DISK
    // Another block at the same stamp, in a tier that sorts before DISK.
    Mutation other_block = PutEntry(1, 0x5678, 2, Tier::kGpu, "");
    other_block.stamp = 1;
    mutations.push_back(other_block);
    REQUIRE(OpenOk(options)->Write(1, mutations).ok());
    Index index;
    std::string key;
    AppendEntryKey(1, 1, 2, Tier::kDisk, &key);
    CheckError(OpenOk(options)->LoadInto(&index), StatusCode::kCorruption,
               DescribeKey(key) + " disagrees with its block's other entries");
  }

  TEST_CASE("RocksDbStorage: LoadInto refuses one block under two stamps") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    std::vector<Mutation> mutations = OneOfEach();  // block 0x1234 at stamp 1
    Mutation again = PutEntry(1, 0x1234, 2, Tier::kGpu, "");
    again.stamp = 2;
    mutations.push_back(again);
    REQUIRE(OpenOk(options)->Write(1, mutations).ok());
    Index index;
    CheckError(OpenOk(options)->LoadInto(&index), StatusCode::kCorruption,
               "duplicate block record");
  }

  TEST_CASE("RocksDbStorage: LoadInto returns the index's own error for inconsistent records") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    std::vector<Mutation> mutations = OneOfEach();
    mutations.push_back(PutEntry(1, 0x9999, 7, Tier::kGpu, ""));  // holder 7 has no record
    REQUIRE(OpenOk(options)->Write(1, mutations).ok());
    Index index;
    CheckError(OpenOk(options)->LoadInto(&index), StatusCode::kCorruption, "unknown holder 7");
  }
}

}  // namespace
}  // namespace kvatlas::server
