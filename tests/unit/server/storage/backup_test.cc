// Backups (server/storage/backup.h): a written backup verifies, restores into a new
// database with the same state digest (member addresses dropped, revision 0), and every
// kind of damage is refused before anything is created.
#include "server/storage/backup.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/unit/server/storage/storage_test_support.h"

namespace kvatlas::server {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

Mutation Addresses(uint64_t id) {
  Mutation m;
  m.kind = MutationKind::kPutServerAddresses;
  m.stamp = id;
  m.server_addresses = std::make_shared<ServerAddresses>("h:1", "h:2");
  return m;
}

// A database with a context, a holder, many entries and two members' addresses, at
// revision 7.
std::unique_ptr<Storage> Filled(const TempDir& dir) {
  auto storage = OpenOk(SmallOptions(dir));
  REQUIRE(storage->CheckHashSeed(1337).ok());
  std::vector<Mutation> mutations = OneOfEach();
  for (uint64_t i = 0; i < 5000; ++i) {
    Mutation entry = PutEntry(1, 0x10000 + i, 2, Tier::kGpu, i % 2 ? "s3://x" : "");
    entry.stamp = 2 + i;
    mutations.push_back(entry);
  }
  mutations.push_back(Addresses(1));
  mutations.push_back(Addresses(2));
  REQUIRE(storage->Write(7, mutations).ok());
  return storage;
}

StateDigest DigestOk(const Storage& storage) {
  auto capture = storage.CaptureAll();
  REQUIRE(capture.has_value());
  Result<StateDigest> digest = DigestOf(**capture);
  REQUIRE_MESSAGE(digest.has_value(), digest.status().ToString());
  return *digest;
}

BackupManifest BackupOk(const Storage& storage, const std::string& to) {
  REQUIRE(PrepareEmptyDirectory(to, "backup").ok());
  auto capture = storage.CaptureAll();
  REQUIRE(capture.has_value());
  Result<BackupManifest> manifest = WriteBackup(**capture, to, {"prod", 3, true});
  REQUIRE_MESSAGE(manifest.has_value(), manifest.status().ToString());
  return *manifest;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_SUITE("backup") {
  TEST_CASE("Backup: written, verified and restored with the same state digest") {
    TempDir source, backups, target;
    auto storage = Filled(source);
    const StateDigest live = DigestOk(*storage);
    CHECK(live.applied_index == 7);
    const std::string to = backups.str() + "/b";
    const BackupManifest m = BackupOk(*storage, to);
    CHECK(m.applied_index == 7);
    CHECK(m.state_digest == live.digest);
    CHECK(m.records == live.records);
    CHECK(m.hash_seed == 1337);
    CHECK(m.storage_format_version == kStorageFormatVersion);
    CHECK(m.source.cluster_id == "prod");
    REQUIRE(m.files.size() == 1);
    CHECK(m.files[0].bytes == fs::file_size(fs::path(to) / kBackupStateFile));
    // The state file is a raft snapshot: the same bytes Serialize() writes.
    auto capture = storage->CaptureAll();
    REQUIRE(capture.has_value());
    CHECK(ReadFile(fs::path(to) / kBackupStateFile) == *(*capture)->Serialize());
    capture->reset();

    Result<BackupManifest> verified = VerifyBackup(to, nullptr);
    REQUIRE_MESSAGE(verified.has_value(), verified.status().ToString());
    CHECK(verified->state_digest == m.state_digest);

    const std::string data_dir = target.str() + "/new";
    Result<RestoreResult> restored = RestoreBackup(to, data_dir);
    REQUIRE_MESSAGE(restored.has_value(), restored.status().ToString());
    CHECK(restored->dropped_members == 2);
    // The server snapshots a restored state before any member can be sent the log.
    CHECK(fs::exists(fs::path(data_dir) / kRestoredMarker));
    StorageOptions options = SmallOptions(target);
    options.path = restored->db_path;
    auto opened = OpenOk(options);
    CHECK(*opened->AppliedIndex() == 0);
    const StateDigest after = DigestOk(*opened);
    CHECK(after.digest == m.state_digest);
    CHECK(after.records == m.records - 2);
    Registry registry;
    REQUIRE(opened->LoadRegistry(&registry).ok());
    CHECK(registry.servers.empty());
    CHECK(opened->CheckHashSeed(1337).ok());
    CHECK(LoadedIndex(*opened, {})->StateDigest() == LoadedIndex(*storage, {})->StateDigest());
  }

  TEST_CASE("Backup: the digest leaves out the revision and the member addresses only") {
    TempDir dir;
    auto storage = Filled(dir);
    const StateDigest before = DigestOk(*storage);
    REQUIRE(storage->Write(8, std::vector<Mutation>{Addresses(9)}).ok());
    CHECK(DigestOk(*storage).digest == before.digest);
    Mutation entry = PutEntry(1, 0x99, 2, Tier::kCpu, "");
    entry.stamp = 9000;
    REQUIRE(storage->Write(9, std::vector<Mutation>{entry}).ok());
    CHECK(DigestOk(*storage).digest != before.digest);
  }

  TEST_CASE("Backup: damaged or edited backups are refused, and restore creates nothing") {
    TempDir source, scratch;
    auto storage = Filled(source);
    const std::string good = scratch.str() + "/good";
    BackupOk(*storage, good);
    const std::string state = ReadFile(fs::path(good) / kBackupStateFile);
    const std::string manifest = ReadFile(fs::path(good) / kBackupManifestFile);
    int copies = 0;
    const auto refused = [&](auto damage, StatusCode code, std::string_view words) {
      const fs::path copy = scratch.path() / ("copy" + std::to_string(++copies));
      fs::copy(good, copy);
      damage(copy);
      Result<BackupManifest> verified = VerifyBackup(copy.string(), nullptr);
      REQUIRE(!verified.has_value());
      CHECK(verified.status().code() == code);
      CHECK_MESSAGE(verified.status().message().find(words) != std::string::npos,
                    verified.status().message());
      const fs::path target = scratch.path() / ("restored" + std::to_string(copies));
      CHECK(!RestoreBackup(copy.string(), target.string()).has_value());
      CHECK(!fs::exists(target));
    };
    const auto with_state = [&](std::string bytes) {
      return [bytes](const fs::path& copy) { WriteFile(copy / kBackupStateFile, bytes); };
    };
    const auto with_manifest = [&](std::string from, std::string to) {
      std::string text = manifest;
      const size_t at = text.find(from);
      REQUIRE(at != std::string::npos);
      text.replace(at, from.size(), to);
      return [text](const fs::path& copy) { WriteFile(copy / kBackupManifestFile, text); };
    };
    std::string flipped = state;
    flipped[flipped.size() / 2] ^= 0x20;
    refused(with_state(flipped), StatusCode::kCorruption, "SHA-256");
    refused(with_state(state.substr(0, state.size() - 1)), StatusCode::kCorruption, "bytes");
    refused(with_state(state + "x"), StatusCode::kCorruption, "bytes");
    refused(with_manifest("\"format_version\": 1", "\"format_version\": 2"),
            StatusCode::kCorruption, "format_version 2");
    refused(with_manifest("kvatlas-backup", "other"), StatusCode::kCorruption, "format");
    refused(with_manifest("\"records\": ", "\"records\": 1"), StatusCode::kCorruption,
            "record count");
    refused(with_manifest("state.kvsn", "../x"), StatusCode::kCorruption, "exactly one file");
    refused([](const fs::path& copy) { fs::remove(copy / kBackupManifestFile); },
            StatusCode::kNotFound, "backup.json");
    refused([](const fs::path& copy) { WriteFile(copy / "extra", "x"); }, StatusCode::kCorruption,
            "unexpected file extra");
    refused([](const fs::path& copy) { WriteFile(copy / kBackupManifestFile, "{"); },
            StatusCode::kCorruption, "not a JSON object");
    refused(with_manifest("\"kvatlas-backup\"", "7"), StatusCode::kCorruption, "format");
    refused(with_manifest("\"online\": true", "\"online\": 1"), StatusCode::kCorruption, "online");
    refused(with_manifest("\"hash_seed\": ", "\"hash_seed\": -"), StatusCode::kCorruption,
            "hash_seed");
  }

  TEST_CASE("Backup: several groups: every part written, verified and restored") {
    TempDir source1, source2, source3, scratch;
    auto one = Filled(source1);
    auto two = OpenOk(SmallOptions(source2));
    REQUIRE(two->CheckHashSeed(1337).ok());
    Mutation entry = PutEntry(1, 0x77, 2, Tier::kCpu, "");
    entry.stamp = 3;
    REQUIRE(two->Write(4, std::vector<Mutation>{entry}).ok());
    auto three = OpenOk(SmallOptions(source3));
    REQUIRE(three->CheckHashSeed(1337).ok());
    std::vector<std::unique_ptr<Storage::Capture>> captures;
    std::vector<const Storage::Capture*> images;
    for (const Storage* storage : {one.get(), two.get(), three.get()}) {
      auto capture = storage->CaptureAll();
      REQUIRE(capture.has_value());
      images.push_back(capture->get());
      captures.push_back(std::move(*capture));
    }
    const std::string to = scratch.str() + "/b";
    REQUIRE(PrepareEmptyDirectory(to, "backup").ok());
    Result<std::vector<BackupManifest>> written =
        WriteWholeBackup(images, to, {"prod", 3, true, 1, 1, /*replicas=*/2});
    REQUIRE_MESSAGE(written.has_value(), written.status().ToString());
    REQUIRE(written->size() == 3);
    CHECK((*written)[2].source.replicas == 2u);
    CHECK((*written)[1].applied_index == 4);
    CHECK((*written)[1].source.group == 2);
    CHECK((*written)[2].source.groups == 3);
    CHECK(fs::exists(fs::path(to) / "groups" / "3" / kBackupManifestFile));
    Result<std::vector<BackupManifest>> verified = VerifyWholeBackup(to);
    REQUIRE_MESSAGE(verified.has_value(), verified.status().ToString());
    CHECK((*verified)[1].state_digest == DigestOk(*two).digest);
    // A group's part alone is not a whole backup.
    CHECK(!VerifyWholeBackup(to + "/groups/2").has_value());

    const std::string data_dir = scratch.str() + "/new";
    Result<RestoreResult> restored = RestoreBackup(to, data_dir);
    REQUIRE_MESSAGE(restored.has_value(), restored.status().ToString());
    REQUIRE(restored->groups.size() == 3);
    CHECK(GroupsInDataDir(data_dir) == 3);
    CHECK(fs::exists(fs::path(data_dir) / "groups" / "2" / kRestoredMarker));
    CHECK(restored->manifest.source.replicas == 2u);
    const Result<std::optional<uint32_t>> recorded = ReadReplicasRecord(data_dir);
    REQUIRE(recorded.has_value());
    CHECK(*recorded == 2u);  // the restore records the source's replication factor
    StorageOptions options = SmallOptions(scratch);
    options.path = data_dir + "/groups/2/db";
    CHECK(DigestOk(*OpenOk(options)).digest == (*written)[1].state_digest);

    // Damage names the group, and restore creates nothing.
    int copies = 0;
    const auto refused = [&](auto damage, std::string_view words) {
      const fs::path copy = scratch.path() / ("copy" + std::to_string(++copies));
      fs::copy(to, copy, fs::copy_options::recursive);
      damage(copy);
      Result<std::vector<BackupManifest>> checked = VerifyWholeBackup(copy.string());
      REQUIRE(!checked.has_value());
      CHECK_MESSAGE(checked.status().message().find(words) != std::string::npos,
                    checked.status().message());
      const fs::path target = scratch.path() / ("restored" + std::to_string(copies));
      CHECK(!RestoreBackup(copy.string(), target.string()).has_value());
      CHECK(!fs::exists(target));
    };
    refused(
        [](const fs::path& copy) {
          const fs::path state = copy / "groups" / "2" / kBackupStateFile;
          std::string bytes = ReadFile(state);
          bytes[bytes.size() / 2] ^= 0x20;
          WriteFile(state, bytes);
        },
        "group 2: ");
    refused([](const fs::path& copy) { fs::remove_all(copy / "groups" / "3"); }, "group 3: ");
    refused([](const fs::path& copy) { fs::remove_all(copy / "groups"); }, "groups/ is missing");
    refused([](const fs::path& copy) { fs::create_directory(copy / "groups" / "4"); },
            "unexpected file groups/4");
    refused(
        [](const fs::path& copy) {
          fs::rename(copy / "groups" / "2", copy / "groups" / "x");
          fs::rename(copy / "groups" / "3", copy / "groups" / "2");
          fs::rename(copy / "groups" / "x", copy / "groups" / "3");
        },
        "holds group 3 of 3");
    // A single group's backup reading groups/ is refused as before.
    const std::string single = scratch.str() + "/single";
    BackupOk(*one, single);
    fs::create_directory(fs::path(single) / "groups");
    CHECK(VerifyWholeBackup(single).status().message().find("unexpected file groups") !=
          std::string::npos);
  }

  TEST_CASE("Backup: a part received in chunks is the part written, checked before its manifest") {
    TempDir source, dir;
    auto storage = Filled(source);
    const std::string written = dir.str() + "/written";
    const BackupManifest manifest = BackupOk(*storage, written);
    const std::string state = ReadFile(fs::path(written) / kBackupStateFile);
    REQUIRE(state.size() > 10'000);
    // Reads 4,096 bytes from `offset`, through `damage` first.
    const auto reader = [&](const std::function<void(std::string*, uint64_t)>& damage) {
      return [&state, damage](uint64_t offset) -> Result<std::string> {
        std::string chunk = state.substr(offset, 4096);
        damage(&chunk, offset);
        return chunk;
      };
    };
    const std::string received = dir.str() + "/received";
    REQUIRE(PrepareEmptyDirectory(received, "backup").ok());
    Result<BackupManifest> part =
        WriteReceivedPart(received, manifest, reader([](std::string*, uint64_t) {}));
    REQUIRE_MESSAGE(part.has_value(), part.status().ToString());
    Result<BackupManifest> verified = VerifyBackup(received, nullptr);
    REQUIRE_MESSAGE(verified.has_value(), verified.status().ToString());
    CHECK(verified->state_digest == manifest.state_digest);
    CHECK(ReadFile(fs::path(received) / kBackupStateFile) == state);

    // A byte flipped in transit, a sender's file that ends early or runs long, and a failed
    // read: refused (the read's own error as it is), and no manifest written.
    const std::vector<std::pair<std::string, std::function<void(std::string*, uint64_t)>>> faults =
        {
            {"damaged in transfer",
             [](std::string* chunk, uint64_t offset) {
               if (offset == 8192) (*chunk)[10] ^= 0x40;
             }},
            {"not the",
             [](std::string* chunk, uint64_t offset) {
               if (offset >= 8192) chunk->clear();
             }},
            {"not the", [](std::string* chunk, uint64_t) { chunk->push_back('x'); }},
        };
    int n = 0;
    for (const auto& [expected, damage] : faults) {
      const std::string to = dir.str() + "/fault-" + std::to_string(n++);
      REQUIRE(PrepareEmptyDirectory(to, "backup").ok());
      Result<BackupManifest> refused = WriteReceivedPart(to, manifest, reader(damage));
      REQUIRE_FALSE(refused.has_value());
      CHECK(refused.status().code() == StatusCode::kCorruption);
      CHECK_MESSAGE(refused.status().message().find(expected) != std::string::npos,
                    refused.status().message());
      CHECK_FALSE(fs::exists(fs::path(to) / kBackupManifestFile));
    }
    const std::string failed = dir.str() + "/failed";
    REQUIRE(PrepareEmptyDirectory(failed, "backup").ok());
    Result<BackupManifest> unread = WriteReceivedPart(failed, manifest, [](uint64_t) {
      return Result<std::string>(Status::Unavailable("the member went away (test)"));
    });
    CHECK(unread.status().code() == StatusCode::kUnavailable);
    CHECK_FALSE(fs::exists(fs::path(failed) / kBackupManifestFile));
  }

  TEST_CASE("Backup: a data directory's replication factor record") {
    TempDir dir;
    Result<std::optional<uint32_t>> none = ReadReplicasRecord(dir.str());
    REQUIRE(none.has_value());
    CHECK(!none->has_value());  // a new directory, or one made before the record
    REQUIRE(WriteReplicasRecord(dir.str(), 3).ok());
    CHECK(ReadFile(dir.path() / kReplicasRecordFile) == "3\n");
    CHECK(ReadReplicasRecord(dir.str()).value() == 3u);
    REQUIRE(WriteReplicasRecord(dir.str(), 0).ok());  // replaced whole
    CHECK(ReadReplicasRecord(dir.str()).value() == 0u);
    CHECK(!fs::exists(dir.path() / "replicas.tmp"));
    for (const char* bad : {"", "3", "3\n\n", "x\n", "16\n", "-1\n", " 3\n", "99999999999\n"}) {
      WriteFile(dir.path() / kReplicasRecordFile, bad);
      const Result<std::optional<uint32_t>> read = ReadReplicasRecord(dir.str());
      REQUIRE_MESSAGE(!read.has_value(), bad);
      CHECK(read.status().code() == StatusCode::kCorruption);
      CHECK(read.status().message().find("not a replication factor") != std::string::npos);
    }
    // A manifest carries it only when known; a manifest without it reads as unknown.
    BackupManifest manifest;
    manifest.source.groups = 3;
    CHECK(ManifestToJson(manifest).find("replicas") == std::string::npos);
    manifest.source.replicas = 5;
    const std::string text = ManifestToJson(manifest);
    CHECK(ParseManifest(text).value().source.replicas == 5u);
    std::string too_many = text;
    const std::string five = "\"replicas\": 5";
    too_many.replace(too_many.find(five), five.size(), "\"replicas\": 16");
    CHECK(ParseManifest(too_many).status().message().find("\"replicas\" 16") != std::string::npos);
  }

  TEST_CASE("Backup: targets must be absent or empty directories") {
    TempDir dir;
    CHECK(PrepareEmptyDirectory(dir.str() + "/a/b", "t").ok());
    CHECK(fs::is_directory(dir.path() / "a" / "b"));
    CHECK(PrepareEmptyDirectory(dir.str() + "/a/b", "t").ok());
    CHECK(PrepareEmptyDirectory(dir.str() + "/a", "t").code() == StatusCode::kAlreadyExists);
    WriteFile(dir.path() / "file", "x");
    CHECK(PrepareEmptyDirectory(dir.str() + "/file", "t").code() == StatusCode::kInvalidArgument);
    fs::create_directory_symlink(dir.path() / "a" / "b", dir.path() / "link");
    CHECK(PrepareEmptyDirectory(dir.str() + "/link", "t").code() == StatusCode::kInvalidArgument);
    TempDir source;
    auto storage = Filled(source);
    const std::string to = dir.str() + "/backup";
    BackupOk(*storage, to);
    CHECK(RestoreBackup(to, dir.str() + "/a").status().code() == StatusCode::kAlreadyExists);
  }
}

}  // namespace kvatlas::server
