// Where an online backup may be written (ResolveBackupTarget): below backup_dir only.
#include "server/service/backup_service.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace kvatlas::server {

TEST_SUITE("backup_service") {
  TEST_CASE("ResolveBackupTarget: below backup_dir, no '..', no symbolic links") {
    testing::TempDir dir;
    const std::string root = dir.str() + "/backups";
    std::filesystem::create_directories(root + "/sub");
    std::filesystem::create_directory_symlink(dir.path(), root + "/link");

    CHECK(*ResolveBackupTarget(root, "b1") == root + "/b1");
    CHECK(*ResolveBackupTarget(root, "sub/b1/") == root + "/sub/b1");
    CHECK(*ResolveBackupTarget(root, "./b1") == root + "/b1");
    CHECK(*ResolveBackupTarget(root, root + "/new/b1") == root + "/new/b1");
    CHECK(*ResolveBackupTarget(root + "/", "b1") == root + "/b1");

    const auto refused = [&](std::string_view to, std::string_view words) {
      Result<std::string> r = ResolveBackupTarget(root, to);
      REQUIRE(!r.has_value());
      CHECK(r.status().code() == StatusCode::kInvalidArgument);
      CHECK_MESSAGE(r.status().message().find(words) != std::string::npos, r.status().message());
    };
    refused("", "must name");
    refused("../b", "\"..\"");
    refused("sub/../../b", "\"..\"");
    refused(root + "/../b", "\"..\"");
    refused(dir.str() + "/elsewhere", "under backup_dir");
    refused(root + "2/b", "under backup_dir");
    refused(root, "not itself");
    refused(".", "not itself");
    refused("link/b", "symbolic link");
    refused("link", "symbolic link");
    refused(std::string(2000, 'a'), "longer than");
    refused(std::string("a\0b", 3), "NUL");
    CHECK(ResolveBackupTarget("", "b1").status().code() == StatusCode::kFailedPrecondition);
  }

  TEST_CASE("TakeBackup: one at a time, into an empty directory, the flag cleared after") {
    testing::TempDir dir;
    StorageOptions options;
    options.path = dir.str() + "/db";
    Result<std::unique_ptr<Storage>> storage = Storage::Open(options);
    REQUIRE(storage.has_value());
    Services services;
    services.backup_dir = dir.str() + "/backups";
    services.cluster_id = "c";
    services.server_id = 4;
    CHECK(TakeBackup(services, "b").status().code() ==
          StatusCode::kFailedPrecondition);  // no storage
    services.storage = storage->get();
    services.backup_running->store(true);
    CHECK(TakeBackup(services, "b").status().code() == StatusCode::kResourceExhausted);
    services.backup_running->store(false);
    Result<BackupTaken> taken = TakeBackup(services, "b");
    REQUIRE_MESSAGE(taken.has_value(), taken.status().ToString());
    CHECK(taken->path == services.backup_dir + "/b");
    CHECK(taken->manifest.source.server_id == 4);
    CHECK(taken->manifest.source.online);
    CHECK(!services.backup_running->load());
    CHECK(TakeBackup(services, "b").status().code() == StatusCode::kAlreadyExists);
    CHECK(!services.backup_running->load());
    CHECK(VerifyBackup(taken->path, nullptr).has_value());
    Result<std::vector<StateDigest>> digest = DigestState(services);
    REQUIRE(digest.has_value());
    REQUIRE(digest->size() == 1);
    CHECK(digest->front().digest == taken->manifest.state_digest);
  }

  TEST_CASE("TakeBackup: a server hosting several groups backs up every group") {
    testing::TempDir dir;
    std::vector<std::unique_ptr<Storage>> storages;
    auto groups = std::make_shared<std::vector<Services>>();
    for (int g = 1; g <= 3; ++g) {
      StorageOptions options;
      options.path = dir.str() + "/db" + std::to_string(g);
      Result<std::unique_ptr<Storage>> storage = Storage::Open(options);
      REQUIRE(storage.has_value());
      storages.push_back(std::move(*storage));
      Services group;
      group.storage = storages.back().get();
      group.group = static_cast<GroupId>(g);
      groups->push_back(group);
    }
    Services services = (*groups)[0];
    services.backup_dir = dir.str() + "/backups";
    services.groups = groups;
    Result<BackupTaken> taken = TakeBackup(services, "b");
    REQUIRE_MESSAGE(taken.has_value(), taken.status().ToString());
    REQUIRE(taken->groups.size() == 3);
    CHECK(taken->groups[2].source.group == 3);
    CHECK(!services.backup_running->load());
    Result<std::vector<BackupManifest>> verified = VerifyWholeBackup(taken->path);
    REQUIRE_MESSAGE(verified.has_value(), verified.status().ToString());
    CHECK(verified->size() == 3);
    Result<std::vector<StateDigest>> digests = DigestState(services);
    REQUIRE(digests.has_value());
    REQUIRE(digests->size() == 3);
    for (size_t i = 0; i < 3; ++i) CHECK((*digests)[i].digest == taken->groups[i].state_digest);
  }
}

}  // namespace kvatlas::server
