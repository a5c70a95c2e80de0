// Server::Start of a server hosting several groups, in this process: its groups open side
// by side, and when one group's data is damaged the start fails naming that group, with
// every thread it started ended.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "server/runtime/server.h"
#include "server/storage/backup.h"
#include "tests/support/temp_dir.h"
#include "tests/support/thread_count.h"

namespace kvatlas::server {
namespace {

using testing::TempDir;
using testing::ThreadCount;

// A single server (no raft address) with `groups` groups in `dir`, on ephemeral ports.
Config SmallServer(const TempDir& dir, uint64_t groups) {
  Config config;
  config.data_dir = dir.str() + "/data";
  config.http_listen = "127.0.0.1:0";
  config.rpc_listen = "127.0.0.1:0";
  config.groups = groups;
  config.http_threads = 1;
  config.rpc_threads = 1;
  config.storage_memory_bytes = 8ull << 20;
  config.storage_block_cache_bytes = 1ull << 20;
  config.storage_write_buffer_bytes = 1ull << 20;
  return config;
}

// Starts a server on `config` and shuts it down: it makes the groups (and the threads a
// process keeps once started: RocksDB's and libuv's pools).
void StartAndStop(const Config& config) {
  Result<std::unique_ptr<Server>> server = Server::Start(config);
  REQUIRE_MESSAGE(server.has_value(), server.status().ToString());
  CHECK((*server)->Shutdown().ok());
}

TEST_CASE("Server: a start of 3 groups with group 2 damaged fails naming it, leaving no thread") {
  TempDir dir;
  const Config config = SmallServer(dir, 3);
  StartAndStop(config);
  StartAndStop(config);  // again, on the groups it made
  const size_t before = ThreadCount();

  // Group 2's RocksDB names a manifest that is not there.
  const std::filesystem::path current =
      std::filesystem::path(GroupPartDir(config.data_dir, 2)) / "db" / "CURRENT";
  REQUIRE(std::filesystem::exists(current));
  {
    std::ofstream out(current, std::ios::trunc);
    out << "MANIFEST-999999\n";
  }
  RecoveryProgress progress;
  Result<std::unique_ptr<Server>> failed = Server::Start(config, &progress);
  REQUIRE_FALSE(failed.has_value());
  INFO(failed.status().ToString());
  CHECK(failed.status().message().starts_with("group 2: "));
  CHECK(failed.status().code() != StatusCode::kCancelled);
  CHECK(ThreadCount() == before);
  // The other groups' data is untouched, and the data directory stays.
  CHECK(std::filesystem::exists(std::filesystem::path(config.data_dir) / "db" / "CURRENT"));
}

TEST_CASE("Server: a stop requested while 3 groups open reaches them and the start fails") {
  TempDir dir;
  const Config config = SmallServer(dir, 3);
  StartAndStop(config);
  const size_t before = ThreadCount();
  RecoveryProgress progress;
  std::atomic<bool> ended{false};
  std::atomic<bool> seen{false};
  // SIGTERM while starting, as soon as a group opens its RocksDB (every group checks for a
  // stop again before its raft starts).
  std::thread signal([&] {
    while (!ended.load()) {
      for (const RecoveryProgress::View& view : progress.ReadRunning()) {
        if (view.label.starts_with("group ") && view.phase.find("RocksDB") != std::string::npos) {
          seen.store(true);
        }
      }
      if (seen.load()) {
        progress.RequestStop();
        return;
      }
    }
  });
  Result<std::unique_ptr<Server>> stopped = Server::Start(config, &progress);
  ended.store(true);
  signal.join();
  REQUIRE(seen.load());  // the watcher saw a group open, and stopped the start then
  REQUIRE_FALSE(stopped.has_value());
  INFO(stopped.status().ToString());
  CHECK(stopped.status().code() == StatusCode::kCancelled);
  CHECK(stopped.status().message().starts_with("group "));
  CHECK(ThreadCount() == before);
}

}  // namespace
}  // namespace kvatlas::server
