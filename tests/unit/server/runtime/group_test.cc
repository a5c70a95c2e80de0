// Group: one replicated state's life over real storage and a one-voter raft log on
// loopback: opened, replicated, written through its applier, stopped in phases (each stop
// idempotent), and recovered by the next group in the same directory.
#include "server/runtime/group.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "tests/support/free_port.h"
#include "tests/support/state_machine_helpers.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::FreePort;
using testing::TempDir;

// A single server's group in `dir` (a one-voter cluster), with RocksDB kept small.
GroupOptions SingleServer(const TempDir& dir) {
  GroupOptions options;
  options.dir = dir.str();
  options.storage.path = dir.str() + "/db";
  options.storage.block_cache_bytes = 1 << 20;
  options.storage.write_buffer_bytes = 1 << 20;
  options.placement.single = true;
  options.placement.address = "127.0.0.1:" + std::to_string(FreePort());
  options.raft.dir = dir.str() + "/raft";
  options.raft.address = options.placement.address;
  options.raft.bootstrap = {{1, options.raft.address}};
  options.audit_interval = std::chrono::milliseconds(0);
  return options;
}

struct Fixture {
  TempDir dir;
  RecoveryProgress progress;
  MemoryTrimmer trimmer;
  PeerAuth peer_auth{1, "", "", /*random_if_no_secret=*/true};
};

TEST_CASE("Group: starts in phases, applies a write, stops in reverse, and recovers it") {
  Fixture f;
  const CommandBatch batch =
      testing::StoreBatch(ContextKey{"t", "m", "", 16, ""}, HolderKey{"h", 0}, {1, 2, 3});
  Revision written = 0;
  {
    Group group(SingleServer(f.dir), &f.progress, &f.trimmer);
    CHECK(group.machine() == nullptr);  // nothing before Open
    REQUIRE(group.Open().ok());
    REQUIRE(group.machine() != nullptr);
    CHECK(group.raft() == nullptr);
    std::atomic<int> registry_changes{0};
    REQUIRE(group.StartReplication(&f.peer_auth, -1, [&] { ++registry_changes; }).ok());
    CHECK(group.raft()->is_leader());  // a single server returns once it leads
    CHECK_FALSE(group.awaiting_membership());
    REQUIRE(group.applier() != nullptr);
    REQUIRE(group.leases() != nullptr);
    group.StartPolicies();
    std::future<Result<Revision>> applied = group.applier()->Submit(batch);
    REQUIRE(applied.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    const Result<Revision> revision = applied.get();
    REQUIRE(revision.has_value());
    written = *revision;
    CHECK(group.machine()->applied_revision() >= written);
    CHECK_FALSE(group.failed());
    group.StopPolicies();
    group.StopPolicies();
    group.StopReplication();
    group.StopReplication();
    CHECK(group.Flush().ok());
  }
  // The next group in the directory recovers the write from storage alone.
  Group again(SingleServer(f.dir), &f.progress, &f.trimmer);
  REQUIRE(again.Open().ok());
  CHECK(again.machine()->applied_revision() >= written);
}

TEST_CASE("Group: destroyed unstopped, or after Open alone, it stops what it started") {
  Fixture f;
  {
    Group opened(SingleServer(f.dir), &f.progress, &f.trimmer);
    REQUIRE(opened.Open().ok());
    CHECK(opened.Flush().ok());
  }
  {
    Group started(SingleServer(f.dir), &f.progress, &f.trimmer);
    REQUIRE(started.Open().ok());
    REQUIRE(started.StartReplication(&f.peer_auth, -1, [] {}).ok());
    started.StartPolicies();
  }  // the destructor stops the policies, the applier and raft
  Group never_opened(SingleServer(f.dir), &f.progress, &f.trimmer);
  CHECK(never_opened.Flush().ok());
  CHECK_FALSE(never_opened.failed());
}

TEST_CASE("Group: the rebuild marker of a failed raft log makes Open start storage afresh") {
  Fixture f;
  {
    Group group(SingleServer(f.dir), &f.progress, &f.trimmer);
    REQUIRE(group.Open().ok());
  }
  const std::filesystem::path marker = f.dir.path() / "raft" / RaftLog::kRebuildMarker;
  std::filesystem::create_directories(marker.parent_path());
  { std::ofstream touch(marker); }
  const std::filesystem::path stale = f.dir.path() / "db" / "stale-file";
  { std::ofstream touch(stale); }
  Group group(SingleServer(f.dir), &f.progress, &f.trimmer);
  REQUIRE(group.Open().ok());
  CHECK_FALSE(std::filesystem::exists(marker));
  CHECK_FALSE(std::filesystem::exists(stale));  // the old database was removed
}

}  // namespace
}  // namespace kvatlas::server
