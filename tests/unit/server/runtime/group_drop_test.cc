// Group::DropReplica over three servers' groups on loopback (real storage, real raft): a
// member the leader removed drops its copy — state, storage and raft log emptied — never
// bootstraps its directory again, and takes the group back whole when the leader adds it
// again; a member not released keeps its copy and goes on following the log.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/runtime/group.h"
#include "tests/support/free_port.h"
#include "tests/support/state_machine_helpers.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::FreePort;
using testing::TempDir;

constexpr size_t kServers = 3;
const char kSecret[] = "the cluster secret, 32 bytes....";

struct Cluster {
  TempDir dir;
  RecoveryProgress progress;
  MemoryTrimmer trimmer;
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<PeerAuth>> auths;
  std::vector<std::unique_ptr<Group>> groups;

  Cluster() {
    for (size_t i = 0; i < kServers; ++i) {
      addresses.push_back("127.0.0.1:" + std::to_string(FreePort()));
      auths.push_back(std::make_unique<PeerAuth>(i + 1, "prod", kSecret));
    }
    for (size_t i = 0; i < kServers; ++i) groups.push_back(Start(i));
  }

  GroupOptions OptionsOf(size_t i) const {
    GroupOptions options;
    options.group = 2;
    options.server_id = i + 1;
    options.dir = dir.str() + "/server-" + std::to_string(i + 1);
    options.storage.path = options.dir + "/db";
    options.storage.block_cache_bytes = 1 << 20;
    options.storage.write_buffer_bytes = 1 << 20;
    options.placement.initial_voter = true;
    options.placement.address = addresses[i];
    options.raft.id = i + 1;
    options.raft.dir = options.dir + "/raft";
    options.raft.address = addresses[i];
    options.raft.election_timeout_ms = 300;
    for (size_t j = 0; j < kServers; ++j) {
      options.placement.peers.emplace_back(j + 1, addresses[j]);
      options.raft.bootstrap.emplace_back(j + 1, addresses[j]);
    }
    options.audit_interval = std::chrono::milliseconds(0);
    return options;
  }

  std::unique_ptr<Group> Start(size_t i) {
    std::filesystem::create_directories(dir.str() + "/server-" + std::to_string(i + 1));
    auto group = std::make_unique<Group>(OptionsOf(i), &progress, &trimmer);
    REQUIRE(group->Open().ok());
    const Status started = group->StartReplication(auths[i].get(), -1, [] {});
    REQUIRE_MESSAGE(started.ok(), started.ToString());
    group->StartPolicies();
    return group;
  }

  Group* Leader() {
    for (int attempt = 0; attempt < 500; ++attempt) {
      for (auto& group : groups) {
        if (group->raft()->is_leader()) return group.get();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("no leader");
    return nullptr;
  }

  // Stores `batches` batches of three fresh blocks through the leader.
  void Write(int batches, uint64_t first_key) {
    for (int b = 0; b < batches; ++b) {
      const uint64_t key = first_key + 3 * static_cast<uint64_t>(b);
      const CommandBatch batch = testing::StoreBatch(ContextKey{"t", "m", "", 16, ""},
                                                     HolderKey{"h", 0}, {key, key + 1, key + 2});
      for (int attempt = 0;; ++attempt) {
        std::future<Result<Revision>> applied = Leader()->applier()->Submit(batch);
        REQUIRE(applied.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
        if (applied.get().has_value()) break;
        REQUIRE(attempt < 100);  // leadership moving
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  Status Change(bool add, size_t i) {
    std::promise<Status> done;
    std::future<Status> result = done.get_future();
    auto finish = [&](Status s) { done.set_value(std::move(s)); };
    if (add) {
      Leader()->raft()->AddServer(i + 1, addresses[i], finish);
    } else {
      Leader()->raft()->RemoveServer(i + 1, finish);
    }
    return result.get();
  }
};

uint64_t Entries(const Group& group) {
  return group.machine()->Read([](const Index& index, Revision) { return index.Stats().entries; });
}

// Waits until `group` holds what `leader` does (same revision and replica digest).
bool CaughtUp(const Group& group, const Group& leader) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    if (group.machine()->applied_revision() == leader.machine()->applied_revision() &&
        group.machine()->ReplicaDigest() == leader.machine()->ReplicaDigest()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Writes `batches` batches from key 1,000 and returns a follower that holds them all.
size_t CaughtUpFollower(Cluster& cluster, int batches) {
  cluster.Write(batches, 1'000);
  Group* leader = cluster.Leader();
  for (size_t i = 0; i < kServers; ++i) {
    if (cluster.groups[i].get() == leader) continue;
    REQUIRE(CaughtUp(*cluster.groups[i], *leader));
    REQUIRE(Entries(*cluster.groups[i]) == 3 * static_cast<uint64_t>(batches));
    return i;
  }
  FAIL("no follower");
  return 0;
}

TEST_CASE("Group: a removed member drops its copy, and takes the group back whole when added") {
  Cluster cluster;
  const size_t victim = CaughtUpFollower(cluster, 40);
  Group& dropped = *cluster.groups[victim];
  const std::string raft_dir = cluster.OptionsOf(victim).raft.dir;

  REQUIRE(cluster.Change(/*add=*/false, victim).ok());
  int asked = 0;
  const Result<bool> outcome = dropped.DropReplica([&]() -> Result<bool> {
    ++asked;
    return true;
  });
  REQUIRE_MESSAGE(outcome.has_value(), outcome.error().ToString());
  CHECK(*outcome);
  CHECK(asked == 1);
  CHECK_FALSE(dropped.failed());
  CHECK(dropped.machine()->applied_revision() == 0);
  CHECK(Entries(dropped) == 0);
  CHECK(std::filesystem::exists(std::filesystem::path(raft_dir) / RaftLog::kDroppedMarker));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a status refresh or more
  ClusterStatus status = dropped.raft()->GetStatus();
  CHECK(status.members.empty());  // in no configuration: it never bootstrapped again
  CHECK(status.last_index == 0);

  // The others go on without it; it stays empty, also across a restart of its process
  // (its directory keeps the bootstrap list of --peers, and is not bootstrapped).
  cluster.Write(10, 5'000);
  cluster.groups[victim].reset();
  cluster.groups[victim] = cluster.Start(victim);
  Group& restarted = *cluster.groups[victim];
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(restarted.raft()->GetStatus().members.empty());
  CHECK(Entries(restarted) == 0);

  // Added back, it receives the group whole, as any new member.
  REQUIRE(cluster.Change(/*add=*/true, victim).ok());
  cluster.Write(5, 9'000);
  CHECK(CaughtUp(restarted, *cluster.Leader()));
  CHECK(Entries(restarted) == 165);
}

TEST_CASE("Group: a member not released keeps its copy and follows the log again") {
  Cluster cluster;
  Group& group = *cluster.groups[CaughtUpFollower(cluster, 20)];
  const Revision before = group.machine()->applied_revision();

  for (const bool failed_to_ask : {false, true}) {
    const Result<bool> outcome = group.DropReplica([&]() -> Result<bool> {
      if (failed_to_ask) return Status::Unavailable("no member answered (test)");
      return false;
    });
    REQUIRE(outcome.has_value());
    CHECK_FALSE(*outcome);
    CHECK_FALSE(group.failed());
    CHECK(group.machine()->applied_revision() >= before);
    CHECK(Entries(group) >= 60);
  }
  cluster.Write(10, 5'000);
  CHECK(CaughtUp(group, *cluster.Leader()));
  CHECK(Entries(group) == 90);
}

}  // namespace
}  // namespace kvatlas::server
