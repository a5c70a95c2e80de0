#include <doctest/doctest.h>
#include <fcntl.h>
#include <rocksdb/db.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/index/index.h"
#include "server/storage/key_codec.h"
#include "server/storage/storage.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/server/storage/storage_test_support.h"

namespace kvatlas::server {
namespace {

using testing::TempDir;

TEST_SUITE("rocksdb_storage") {
  TEST_CASE("RocksDbStorage: a new database is at applied index 0 with format version 4") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    {
      auto storage = OpenOk(options);
      CHECK(storage->AppliedIndex().value() == 0);
    }
    std::map<std::string, std::string> records = Dump(options.path);
    REQUIRE(records.size() == 1);
    CHECK(records[Key(kMetaFormatVersion)] == std::string("\x04\x00\x00\x00", 4));
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

  TEST_CASE("RocksDbStorage: the directory and disowned contexts round-trip as P and D records") {
    TempDir dir;
    const StorageOptions options = SmallOptions(dir);
    const ContextKey context{"t", "m", "", 16, ""};
    PlacementDirectory directory;
    REQUIRE(directory.AddGroup({2, {}, true}).ok());
    REQUIRE(directory.Assign(context, 2).ok());
    {
      auto storage = OpenOk(options);
      Mutation put_directory;
      put_directory.kind = MutationKind::kPutDirectory;
      put_directory.location = EncodePlacementDirectory(directory);
      Mutation disowned;
      disowned.kind = MutationKind::kPutDisowned;
      disowned.context_key = std::make_shared<const ContextKey>(context);
      disowned.stamp = 9;
      disowned.key = 4;
      REQUIRE(storage->Write(1, std::vector<Mutation>{put_directory, disowned}).ok());
      Mutation missing;
      missing.kind = MutationKind::kPutDisowned;
      CHECK(storage->Write(2, std::vector<Mutation>{missing}).code() == StatusCode::kInternal);
    }
    CHECK(Dump(options.path)["P"] == EncodePlacementDirectory(directory));
    auto storage = OpenOk(options);
    Registry registry;
    REQUIRE(storage->LoadRegistry(&registry).ok());
    CHECK(registry.directory == directory);
    CHECK(registry.disowned ==
          std::map<ContextKey, DisownedContext, ContextKeyLess>{{context, DisownedContext{9, 4}}});
    storage.reset();
    RawPut(options.path, "P",
           "\x01"
           "broken");
    storage = OpenOk(options);
    Registry again;
    CheckError(storage->LoadRegistry(&again), StatusCode::kCorruption, "P/directory");
  }

  TEST_CASE("RocksDbStorage: memory usage counts the memtables, under a budget in the cache") {
    TempDir dir;
    for (const uint64_t budget : {uint64_t{0}, uint64_t{4} << 20}) {
      CAPTURE(budget);
      StorageOptions options = SmallOptions(dir);
      options.path = dir.str() + "/db" + std::to_string(budget);
      options.memory_bytes = budget;
      auto storage = OpenOk(options);
      const Storage::MemoryUsage before = storage->ApproximateMemoryUsage();
      for (Revision r = 1; r <= 50; ++r) REQUIRE(storage->Write(r, OneOfEach()).ok());
      const Storage::MemoryUsage after = storage->ApproximateMemoryUsage();
      CHECK(after.budget_bytes == budget);
      CHECK(after.memtable_bytes > before.memtable_bytes);
      if (budget == 0) {
        CHECK(after.total_bytes ==
              after.block_cache_bytes + after.table_reader_bytes + after.memtable_bytes);
      } else {
        // The write buffer manager charges memtables to the cache in whole reservations.
        CHECK(after.block_cache_bytes >= after.memtable_bytes);
        CHECK(after.total_bytes == after.block_cache_bytes + after.table_reader_bytes);
        CHECK(after.total_bytes <= budget + after.table_reader_bytes);
      }
    }
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
    CHECK(records.size() == 5);  // format_version, applied_index, C, H, T (no B, no E)
    CHECK(records[Key(kMetaAppliedIndex)] == Fixed64Bytes(6));
    std::string k;
    AppendContextKey(1, &k);
    CHECK(DecodeContextValue(k, records[k]).value() == ContextKey{"t", "llama", "", 16, "salt"});
    k.clear();
    AppendHolderKey(2, &k);
    CHECK(DecodeHolderValue(k, records[k]).value() == HolderKey{"engine-0", 3});
    k.clear();
    AppendEntryKey(/*stamp=*/1, 1, 2, Tier::kDisk, &k);
    CHECK(DecodeEntryValue(k, records[k]).value() ==
          EntryValue{0, 0x1234, 1, 0x1234 ^ 0xabcdef, "loc"});
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
    // Into chunks (of 5 bytes here: the header's applied index is patched across two), the
    // same bytes.
    ChunkedBytes chunks(5);
    REQUIRE((*later)->SerializeInto(&chunks).ok());
    std::string joined;
    for (const ChunkedBytes::Chunk& chunk : chunks.chunks()) joined.append(chunk.data, chunk.size);
    CHECK(chunks.chunks().size() == (later_bytes->size() + 4) / 5);
    CHECK(joined == *later_bytes);
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
      Mutation gone = PutEntry(1, 10, 1, Tier::kGpu, "");
      gone.stamp = 1;
      Mutation kept = PutEntry(1, 11, 1, Tier::kGpu, "");
      kept.stamp = 2;
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
    AppendEntryKey(1, 1, 1, Tier::kGpu, &k);
    CHECK(records.count(k) == 0);
    k.clear();
    AppendEntryKey(2, 1, 1, Tier::kGpu, &k);
    CHECK(DecodeEntryValue(k, records[k]).value().refcount == 2);
    CHECK(DecodeEntryValue(k, records[k]).value().location == "again");
    // Block mutations write nothing: blocks live in their entries' records.
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
    RawPut(options.path, Key(kMetaFormatVersion), std::string("\x05\x00\x00\x00", 4));
    CheckError(OpenStatus(options), StatusCode::kCorruption,
               "storage format version 5; this build reads versions 1 to 4");
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
}

}  // namespace
}  // namespace kvatlas::server
