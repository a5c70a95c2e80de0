#include <doctest/doctest.h>
#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <sys/wait.h>
#include <unistd.h>

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

namespace kvatlas::server {
namespace {

using testing::TempDir;

StorageOptions SmallOptions(const TempDir& dir) {
  StorageOptions o;
  o.path = dir.str() + "/db";
  o.sync_writes = false;
  o.block_cache_bytes = 1 << 20;
  o.write_buffer_bytes = 1 << 20;
  return o;
}

std::unique_ptr<Storage> OpenOk(const StorageOptions& options) {
  Result<std::unique_ptr<Storage>> opened = Storage::Open(options);
  REQUIRE_MESSAGE(opened.has_value(), opened.status().ToString());
  return std::move(opened).value();
}

// The database's records as raw bytes, read with RocksDB directly (Storage closed).
std::map<std::string, std::string> Dump(const std::string& path) {
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::map<std::string, std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    out[it->key().ToString()] = it->value().ToString();
  }
  REQUIRE(it->status().ok());
  return out;
}

// Writes one raw record, bypassing Storage (to plant corruption).
void RawPut(const std::string& path, std::string_view key, std::string_view value) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(options, path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  REQUIRE(db->Put(rocksdb::WriteOptions(), rocksdb::Slice(key.data(), key.size()),
                  rocksdb::Slice(value.data(), value.size()))
              .ok());
}

// Checks that `s` failed with `code` and a message containing `part`.
void CheckError(const Status& s, StatusCode code, std::string_view part = "") {
  CHECK_MESSAGE(s.code() == code, s.ToString());
  CHECK_MESSAGE(s.message().find(part) != std::string::npos, s.ToString());
}

Status OpenStatus(const StorageOptions& options) { return Storage::Open(options).status(); }

std::string Key(std::string_view meta) {
  std::string k;
  AppendMetaKey(meta, &k);
  return k;
}

std::string Fixed64Bytes(uint64_t v) {
  std::string s;
  PutFixed64(&s, v);
  return s;
}

Mutation PutBlock(uint32_t context, BlockKey key, uint32_t depth, uint64_t stamp) {
  Mutation m;
  m.kind = MutationKind::kPutBlock;
  m.context = context;
  m.key = key;
  m.depth = depth;
  m.stamp = stamp;
  return m;
}

Mutation PutEntry(uint32_t context, BlockKey key, uint32_t holder, Tier tier,
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

Mutation Deleting(Mutation m) {
  m.kind =
      m.kind == MutationKind::kPutBlock ? MutationKind::kDeleteBlock : MutationKind::kDeleteEntry;
  return m;
}

std::vector<Mutation> OneOfEach() {
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

// Writes `mutations` at `revision` the way a version 2 database held them (a `B` record per
// block; entry values without the block part): the input of the upgrade tests.
void WriteVersion2(rocksdb::DB* db, Revision revision, const MutationList& mutations) {
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
        AppendBlockKey(m.context, m.key, &k);
        AppendBlockValue(m.depth, m.stamp, &v);
        break;
      case MutationKind::kDeleteBlock:
        AppendBlockKey(m.context, m.key, &k);
        break;
      case MutationKind::kPutEntry:
        AppendEntryKey(m.context, m.key, m.holder, m.tier, &k);
        PutFixed32(&v, m.refcount);
        PutFixed64(&v, m.engine_hash);
        PutLengthPrefixed(&v, m.location);
        break;
      case MutationKind::kDeleteEntry:
        AppendEntryKey(m.context, m.key, m.holder, m.tier, &k);
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
  std::string version;
  PutFixed32(&version, 2);
  REQUIRE(batch.Put(Key(kMetaAppliedIndex), applied).ok());
  REQUIRE(batch.Put(Key(kMetaFormatVersion), version).ok());
  REQUIRE(db->Write(rocksdb::WriteOptions(), &batch).ok());
}

// A version 2 database at `path` holding what `batches` random batches did to `index`.
void BuildVersion2(const std::string& path, Rng& rng, int batches, Index* index) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(options, path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (int b = 0; b < batches; ++b) {
    MutationList mutations;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) index->Apply(RandomCommand(rng), kDefaultHashSeed, &mutations);
    WriteVersion2(db.get(), static_cast<Revision>(b + 1), mutations);
  }
}

std::unique_ptr<Index> LoadedIndex(const Storage& storage, const IndexOptions& options) {
  auto index = std::make_unique<Index>(options);
  Status s = storage.LoadInto(index.get());
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  return index;
}

TEST_SUITE("rocksdb_storage") {
  TEST_CASE("RocksDbStorage: a new database is at applied index 0 with format version 3") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    {
      auto storage = OpenOk(options);
      CHECK(storage->AppliedIndex().value() == 0);
    }
    std::map<std::string, std::string> records = Dump(options.path);
    REQUIRE(records.size() == 1);
    CHECK(records[Key(kMetaFormatVersion)] == std::string("\x03\x00\x00\x00", 4));
  }

  TEST_CASE("RocksDbStorage: registrations and stream positions round-trip") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    Registration r;
    r.endpoint = "tcp://127.0.0.1:5557";
    r.replay_endpoint = "tcp://127.0.0.1:5558";
    r.type = EngineType::kSglang;
    r.model = "m";
    r.instance_id = "i";
    r.block_size = 16;
    r.dp_rank = 3;
    r.topic = "kv@";
    auto put = [](const std::string& name, std::shared_ptr<const Registration> reg) {
      Mutation m;
      m.kind = reg ? MutationKind::kPutRegistration : MutationKind::kDeleteRegistration;
      m.location = name;
      m.registration = std::move(reg);
      return m;
    };
    auto position = [](const std::string& name, std::optional<uint64_t> seq) {
      Mutation m;
      m.kind = seq ? MutationKind::kPutStreamPosition : MutationKind::kDeleteStreamPosition;
      m.location = name;
      m.stamp = seq.value_or(0);
      return m;
    };
    Registration other = r;
    other.instance_id = "j";
    {
      auto storage = OpenOk(options);
      REQUIRE(storage
                  ->Write(1, std::vector<Mutation>{put(r.Key(), std::make_shared<Registration>(r)),
                                                   put(other.Key(),
                                                       std::make_shared<Registration>(other)),
                                                   position(r.Key(), 41), position("x", 7)})
                  .ok());
      REQUIRE(
          storage
              ->Write(2, std::vector<Mutation>{put(other.Key(), nullptr),
                                               position("x", std::nullopt), position(r.Key(), 42)})
              .ok());
    }
    auto storage = OpenOk(options);
    Registry registry;
    REQUIRE(storage->LoadRegistry(&registry).ok());
    REQUIRE(registry.registrations.size() == 1);
    CHECK(registry.registrations.at("i|default|3") == r);
    CHECK(registry.positions == std::map<std::string, uint64_t, std::less<>>{{"i|default|3", 42}});
    // A registration stored under another registration's key is corruption, not a mix-up.
    storage.reset();
    RawPut(options.path, "Rnot-the-key", Dump(options.path)["Ri|default|3"]);
    storage = OpenOk(options);
    Registry again;
    CheckError(storage->LoadRegistry(&again), StatusCode::kCorruption, "R/not-the-key");
  }

  TEST_CASE("RocksDbStorage: server addresses round-trip as A records") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    auto put = [](uint64_t id, std::shared_ptr<const ServerAddresses> addresses) {
      Mutation m;
      m.kind = addresses ? MutationKind::kPutServerAddresses : MutationKind::kDeleteServerAddresses;
      m.stamp = id;
      m.server_addresses = std::move(addresses);
      return m;
    };
    {
      auto storage = OpenOk(options);
      REQUIRE(
          storage
              ->Write(
                  1, std::vector<Mutation>{put(1, std::make_shared<ServerAddresses>("a:1", "a:2")),
                                           put(2, std::make_shared<ServerAddresses>("b:1", "b:2"))})
              .ok());
      REQUIRE(storage->Write(2, std::vector<Mutation>{put(2, nullptr)}).ok());
      // A put without its value is a bug, refused without writing.
      Mutation missing;
      missing.kind = MutationKind::kPutServerAddresses;
      CHECK(storage->Write(3, std::vector<Mutation>{missing}).code() == StatusCode::kInternal);
    }
    CHECK(Dump(options.path)[std::string("A\0\0\0\0\0\0\0\x01", 9)] ==
          "\x03"
          "a:1\x03"
          "a:2");
    auto storage = OpenOk(options);
    Registry registry;
    REQUIRE(storage->LoadRegistry(&registry).ok());
    CHECK(registry.servers == std::map<uint64_t, ServerAddresses>{{1, {"a:1", "a:2"}}});
    storage.reset();
    RawPut(options.path, std::string("A\0\0\0\0\0\0\0\x05", 9), "\x09short");
    storage = OpenOk(options);
    Registry again;
    CheckError(storage->LoadRegistry(&again), StatusCode::kCorruption, "A/server=5");
  }

  TEST_CASE("RocksDbStorage: Write persists mutations and applied_index across reopen") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    {
      auto storage = OpenOk(options);
      REQUIRE(storage->Write(5, OneOfEach()).ok());
      REQUIRE(storage->Write(6, {}).ok());
      CHECK(storage->AppliedIndex().value() == 6);
      CHECK(storage->Flush().ok());
      CHECK(storage->ApproximateSizeBytes() > 0);
    }
    CHECK(OpenOk(options)->AppliedIndex().value() == 6);

    std::map<std::string, std::string> records = Dump(options.path);
    CHECK(records.size() == 5);  // format_version, applied_index, C, H, E (no B: version 3)
    CHECK(records[Key(kMetaAppliedIndex)] == Fixed64Bytes(6));
    std::string k;
    AppendContextKey(1, &k);
    CHECK(DecodeContextValue(k, records[k]).value() == ContextKey{"t", "llama", "", 16, "salt"});
    k.clear();
    AppendHolderKey(2, &k);
    CHECK(DecodeHolderValue(k, records[k]).value() == HolderKey{"engine-0", 3});
    k.clear();
    AppendEntryKey(1, 0x1234, 2, Tier::kDisk, &k);
    CHECK(DecodeEntryValue(k, records[k]).value() ==
          EntryValue{BlockValue{0, 1}, 1, 0x1234 ^ 0xabcdef, "loc"});
  }

  TEST_CASE("RocksDbStorage: a capture is the database when captured, applied index included") {
    TempDir dir;
    auto storage = OpenOk(SmallOptions(dir));
    {
      // A database never written is at applied index 0.
      auto capture = storage->CaptureAll();
      REQUIRE(capture.has_value());
      auto bytes = (*capture)->Serialize();
      REQUIRE(bytes.has_value());
      CHECK(Storage::SnapshotAppliedIndex(*bytes).value() == 0);
    }
    REQUIRE(storage->Write(5, {}).ok());
    auto capture = storage->CaptureAll();
    REQUIRE(capture.has_value());
    // Writes after the capture, serialized later (as raft's threadpool does), are not in it.
    REQUIRE(storage->Write(6, OneOfEach()).ok());
    auto bytes = (*capture)->Serialize();
    REQUIRE(bytes.has_value());
    CHECK(Storage::SnapshotAppliedIndex(*bytes).value() == 5);

    TempDir other_dir;
    auto other = OpenOk(SmallOptions(other_dir));
    REQUIRE(other->ReplaceAll(*bytes).ok());
    CHECK(other->AppliedIndex().value() == 5);
    CHECK(LoadedIndex(*other, {})->Stats().entries == 0);
    // Installed again once it holds the later write, the capture's index moves with it.
    auto later = storage->CaptureAll();
    REQUIRE(later.has_value());
    auto later_bytes = (*later)->Serialize();
    REQUIRE(later_bytes.has_value());
    CHECK(Storage::SnapshotAppliedIndex(*later_bytes).value() == 6);
    REQUIRE(other->ReplaceAll(*later_bytes).ok());
    CHECK(other->AppliedIndex().value() == 6);
    CHECK(LoadedIndex(*other, {})->Stats().entries == 1);
  }

  TEST_CASE("RocksDbStorage: later mutations of one record in a list win") {
    TempDir dir;
    StorageOptions options = SmallOptions(dir);
    options.sync_writes = true;
    {
      auto storage = OpenOk(options);
      const Mutation gone = PutEntry(1, 10, 1, Tier::kGpu, "");
      Mutation kept = PutEntry(1, 11, 1, Tier::kGpu, "");
      Mutation kept_again = kept;
      kept_again.refcount = 2;
      kept_again.location = "again";
      REQUIRE(storage
                  ->Write(1, std::vector<Mutation>{PutBlock(1, 10, 0, 1), gone, Deleting(gone),
                                                   Deleting(PutBlock(1, 10, 0, 1)),
                                                   PutBlock(1, 11, 0, 2), kept, kept_again})
                  .ok());
    }
    std::map<std::string, std::string> records = Dump(options.path);
    std::string k;
    AppendEntryKey(1, 10, 1, Tier::kGpu, &k);
    CHECK(records.count(k) == 0);
    k.clear();
    AppendEntryKey(1, 11, 1, Tier::kGpu, &k);
    CHECK(DecodeEntryValue(k, records[k]).value().refcount == 2);
    CHECK(DecodeEntryValue(k, records[k]).value().location == "again");
    // Block mutations write nothing: version 3 keeps blocks in their entries' records.
    for (const auto& [key, value] : records) CHECK(key[0] != 'B');
  }

  TEST_CASE("RocksDbStorage: an unknown mutation kind or tier is rejected without writing") {
    TempDir dir;
    auto storage = OpenOk(SmallOptions(dir));
    Mutation bad_kind;
    bad_kind.kind = static_cast<MutationKind>(99);
    CheckError(storage->Write(3, std::vector<Mutation>{PutBlock(1, 1, 0, 1), bad_kind}),
               StatusCode::kInternal, "unknown mutation kind 99");
    const Mutation bad_tier = PutEntry(1, 1, 1, static_cast<Tier>(kNumTiers), "");
    CheckError(storage->Write(4, std::vector<Mutation>{PutBlock(1, 1, 0, 1), bad_tier}),
               StatusCode::kInternal, "unknown tier 4");
    CHECK(storage->AppliedIndex().value() == 0);
  }

  TEST_CASE("RocksDbStorage: the hash seed is recorded once and then enforced") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    {
      auto storage = OpenOk(options);
      CHECK(storage->CheckHashSeed(1337).ok());
      CHECK(storage->CheckHashSeed(1337).ok());
      CHECK(storage->CheckHashSeed(7).code() == StatusCode::kFailedPrecondition);
    }
    auto storage = OpenOk(options);
    CheckError(storage->CheckHashSeed(7), StatusCode::kFailedPrecondition, "hash seed 1337");
    CHECK(storage->CheckHashSeed(1337).ok());
  }

  TEST_CASE("RocksDbStorage: an unknown format version is kCorruption") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    OpenOk(options).reset();
    RawPut(options.path, Key(kMetaFormatVersion), std::string("\x04\x00\x00\x00", 4));
    CheckError(OpenStatus(options), StatusCode::kCorruption,
               "storage format version 4; this build reads versions 1 to 3");
  }

  TEST_CASE("RocksDbStorage: records without a format version are kCorruption") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    std::string k;
    AppendBlockKey(1, 1, &k);
    RawPut(options.path, k, std::string(12, '\0'));
    CheckError(OpenStatus(options), StatusCode::kCorruption, "no format_version");
  }

  TEST_CASE("RocksDbStorage: a malformed applied_index is kCorruption naming the record") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    OpenOk(options).reset();
    RawPut(options.path, Key(kMetaAppliedIndex), "abc");
    CheckError(OpenOk(options)->AppliedIndex().status(), StatusCode::kCorruption,
               "M/applied_index");
  }

  TEST_CASE("RocksDbStorage: a second open of the directory in this process fails clearly") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    auto first = OpenOk(options);
    CheckError(OpenStatus(options), StatusCode::kIOError,
               "data directory " + options.path + " is in use by another kvatlas process?");
  }

  TEST_CASE("RocksDbStorage: a directory locked by another process fails clearly") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    OpenOk(options).reset();
    // The child takes RocksDB's fcntl lock on LOCK, as a second kvatlas server would, and
    // holds it until the parent closes the pipe. Only async-signal-safe calls after fork().
    int ready[2];
    int release[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(release) == 0);
    const std::string lock_path = options.path + "/LOCK";
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(ready[0]);
      close(release[1]);  // else the read below never sees EOF
      int fd = open(lock_path.c_str(), O_RDWR);
      struct flock lock = {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      const char ok = (fd >= 0 && fcntl(fd, F_SETLK, &lock) == 0) ? 'y' : 'n';
      if (write(ready[1], &ok, 1) != 1) _exit(2);
      char byte;
      while (read(release[0], &byte, 1) > 0) {
      }
      _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    char locked = 0;
    REQUIRE(read(ready[0], &locked, 1) == 1);
    const Status opened = OpenStatus(options);
    close(release[1]);
    int wstatus = 0;
    waitpid(child, &wstatus, 0);
    close(ready[0]);
    REQUIRE(locked == 'y');
    CheckError(opened, StatusCode::kIOError,
               "data directory " + options.path + " is in use by another kvatlas process?");
    // Once the other process is gone the directory opens again.
    CHECK(OpenOk(options)->AppliedIndex().value() == 0);
  }
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
      AppendEntryKey(1, 0x1234, 2, Tier::kDisk, &key);
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

  TEST_CASE("RocksDbStorage: a version 2 database is upgraded at open to the same index") {
    IndexOptions index_options;
    index_options.max_entries_per_context = 80;
    for (uint64_t seed : {1, 2}) {
      CAPTURE(seed);
      TempDir dir;
      const StorageOptions options = SmallOptions(dir);
      Rng rng(seed);
      Index direct(index_options);
      BuildVersion2(options.path, rng, 60, &direct);
      if (seed == 2) {  // version 1 has the same block and entry records
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
      CHECK(records[Key(kMetaFormatVersion)] == std::string("\x03\x00\x00\x00", 4));
      for (const auto& [key, value] : records) CHECK(key[0] != 'B');
      CheckSameState(direct, *LoadedIndex(*OpenOk(options), index_options));
    }
  }

  TEST_CASE("RocksDbStorage: a version 2 entry without its block record fails the upgrade") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    Rng rng(5);
    Index direct;
    BuildVersion2(options.path, rng, 20, &direct);
    std::map<std::string, std::string> before = Dump(options.path);
    const auto entry =
        std::find_if(before.begin(), before.end(), [](const auto& r) { return r.first[0] == 'E'; });
    REQUIRE(entry != before.end());
    const std::string entry_key = entry->first;
    const EntryRecordKey e = DecodeEntryRecordKey(entry_key).value();
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
    BuildVersion2(source_dir.path().string(), rng, 40, &direct);
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
    CHECK(Dump(options.path)[Key(kMetaFormatVersion)] == std::string("\x03\x00\x00\x00", 4));

    // A snapshot from a newer format is refused before it replaces anything.
    std::string newer = snapshot;
    const std::string version_record = Key(kMetaFormatVersion);
    const size_t at = newer.find(version_record);
    REQUIRE(at != std::string::npos);
    newer[at + version_record.size() + 1] = '\x04';  // after the value's length byte
    storage = OpenOk(options);
    CheckError(storage->ReplaceAll(newer), StatusCode::kCorruption,
               "snapshot has storage format version 4");
    CheckSameState(direct, *LoadedIndex(*storage, {}));
  }

  TEST_CASE("RocksDbStorage: LoadInto refuses entries of one block that disagree on it") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    std::vector<Mutation> mutations = OneOfEach();
    Mutation other_tier = PutEntry(1, 0x1234, 2, Tier::kGpu, "");
    other_tier.stamp = 2;  // the block's stamp is 1
    mutations.push_back(other_tier);
    REQUIRE(OpenOk(options)->Write(1, mutations).ok());
    Index index;
    std::string key;
    AppendEntryKey(1, 0x1234, 2, Tier::kDisk, &key);
    CheckError(OpenOk(options)->LoadInto(&index), StatusCode::kCorruption,
               DescribeKey(key) + " disagrees with its block's other entries");
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
