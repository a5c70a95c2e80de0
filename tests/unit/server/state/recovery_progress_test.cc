// RecoveryProgress with several phases at once: a server's parts (one per group opening
// side by side), what runs, how it is described, where a stop reaches, and when the
// process may be ended at once.
#include "server/state/recovery_progress.h"

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace kvatlas::server {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("RecoveryProgress: without parts, the own phase is what runs, described as before") {
  RecoveryProgress progress;
  CHECK(progress.ReadRunning().empty());
  progress.BeginPhase("loading the state from RocksDB", "entries", 0, 2'000'000);
  progress.Add(4096, 0);
  const std::vector<RecoveryProgress::View> running = progress.ReadRunning();
  REQUIRE(running.size() == 1);
  CHECK(running[0].label.empty());
  CHECK(running[0].phase == "loading the state from RocksDB");
  CHECK(running[0].records == 4096);
  const std::string line = RecoveryProgress::Describe(running);
  CHECK(line.starts_with("loading the state from RocksDB: 4096 entries ("));
  CHECK(line.find(", 2.0 MB on disk, ") != std::string::npos);
  CHECK(line.ends_with(" since the server began recovering)"));
  CHECK(RecoveryProgress::Names(running) == "loading the state from RocksDB");
  CHECK_FALSE(RecoveryProgress::AllUninterruptible(running));
  progress.MarkUninterruptible();
  CHECK(RecoveryProgress::AllUninterruptible(progress.ReadRunning()));
  progress.EndPhase();
  CHECK(progress.ReadRunning().empty());
  CHECK_FALSE(RecoveryProgress::AllUninterruptible(progress.ReadRunning()));
}

TEST_CASE("RecoveryProgress: parts that run a phase are listed, labelled, in the order added") {
  RecoveryProgress server;
  server.BeginPhase("opening 3 groups");
  RecoveryProgress* one = server.AddPart("group 1");
  RecoveryProgress* two = server.AddPart("group 2");
  RecoveryProgress* three = server.AddPart("group 3");
  CHECK(two->label() == "group 2");
  // No part runs yet: the server's own phase is what runs.
  std::vector<RecoveryProgress::View> running = server.ReadRunning();
  REQUIRE(running.size() == 1);
  CHECK(running[0].phase == "opening 3 groups");

  three->BeginPhase("loading the state from RocksDB", "entries");
  one->BeginPhase("opening RocksDB");
  three->Add(7);
  running = server.ReadRunning();
  REQUIRE(running.size() == 2);
  CHECK(running[0].label == "group 1");
  CHECK(running[0].phase == "opening RocksDB");
  CHECK(running[1].label == "group 3");
  CHECK(running[1].records == 7);
  CHECK(one->Read().records == 0);  // each part counts its own

  const std::string line = RecoveryProgress::Describe(running);
  CHECK(line.starts_with("group 1: opening RocksDB: "));
  CHECK(line.find("; group 3: loading the state from RocksDB: 7 entries") != std::string::npos);
  CHECK(Count(line, "since the server began recovering") == 1);
  CHECK(RecoveryProgress::Names(running) ==
        "group 1: opening RocksDB; group 3: loading the state from RocksDB");

  // A part whose phase ended is no longer listed; once none runs, the server's is again.
  one->EndPhase();
  three->EndPhase();
  running = server.ReadRunning();
  REQUIRE(running.size() == 1);
  CHECK(running[0].label.empty());
  CHECK(running[0].phase == "opening 3 groups");
  CHECK(three->Read().records == 7);  // the counters stay
}

TEST_CASE("RecoveryProgress: a part's time since recovery began counts from its owner's start") {
  RecoveryProgress server;
  server.BeginPhase("checking the configuration");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  RecoveryProgress* part = server.AddPart("group 2");
  part->BeginPhase("opening RocksDB");
  const RecoveryProgress::View view = part->Read();
  CHECK(view.total_seconds >= 0.05);
  CHECK(view.phase_seconds < view.total_seconds);

  // Without an owner's phase, a part counts from its own first phase.
  RecoveryProgress idle;
  RecoveryProgress* alone = idle.AddPart("group 1");
  alone->BeginPhase("opening RocksDB");
  CHECK(alone->Read().total_seconds < 0.05);
}

TEST_CASE("RecoveryProgress: a stop of the server reaches every part, a part's stop only it") {
  RecoveryProgress server;
  RecoveryProgress* one = server.AddPart("group 1");
  RecoveryProgress* two = server.AddPart("group 2");
  // AddPart on a part adds a sibling: parts do not nest.
  RecoveryProgress* three = two->AddPart("group 3");
  CHECK(server.ReadRunning().empty());
  three->BeginPhase("opening RocksDB");
  REQUIRE(server.ReadRunning().size() == 1);
  CHECK(server.ReadRunning()[0].label == "group 3");

  two->RequestStop();  // e.g. a sibling failed
  CHECK(two->stop_requested());
  CHECK_FALSE(one->stop_requested());
  CHECK_FALSE(three->stop_requested());
  CHECK_FALSE(server.stop_requested());
  CHECK(one->CheckStop("loading").ok());
  CHECK(two->CheckStop("loading").code() == StatusCode::kCancelled);

  server.RequestStop();  // SIGTERM while starting
  for (RecoveryProgress* part : {one, two, three}) {
    CHECK(part->stop_requested());
    const Status stopped = part->CheckStop("loading the state");
    CHECK(stopped.code() == StatusCode::kCancelled);
    CHECK(stopped.message().find("while loading the state") != std::string::npos);
  }
}

TEST_CASE(
    "RecoveryProgress: the process may end at once only while every running phase is "
    "uninterruptible") {
  RecoveryProgress server;
  server.BeginPhase("opening 2 groups");
  RecoveryProgress* one = server.AddPart("group 1");
  RecoveryProgress* two = server.AddPart("group 2");
  one->BeginPhase("loading the raft snapshot and log");
  one->MarkUninterruptible();
  two->BeginPhase("loading the state from RocksDB", "entries");
  CHECK_FALSE(RecoveryProgress::AllUninterruptible(server.ReadRunning()));
  // The interruptible one stopped at its check: only libraft's load runs now.
  two->EndPhase();
  CHECK(RecoveryProgress::AllUninterruptible(server.ReadRunning()));
  two->BeginPhase("loading the raft snapshot and log");
  CHECK_FALSE(RecoveryProgress::AllUninterruptible(server.ReadRunning()));  // a new phase is not
  two->MarkUninterruptible();
  // The server's own phase (interruptible), shadowed by the parts, does not count.
  CHECK(RecoveryProgress::AllUninterruptible(server.ReadRunning()));
  // The next phase of a part is interruptible again.
  one->BeginPhase("electing itself (a one-voter cluster)");
  CHECK_FALSE(RecoveryProgress::AllUninterruptible(server.ReadRunning()));
  // Once no part runs, the server's own phase decides.
  one->EndPhase();
  two->EndPhase();
  CHECK_FALSE(RecoveryProgress::AllUninterruptible(server.ReadRunning()));
  server.MarkUninterruptible();
  CHECK(RecoveryProgress::AllUninterruptible(server.ReadRunning()));
}

TEST_CASE("RecoveryProgress: parts updated on their own threads while another reads them all") {
  RecoveryProgress server;
  constexpr int kParts = 4;
  std::vector<RecoveryProgress*> parts;
  for (int i = 0; i < kParts; ++i) parts.push_back(server.AddPart("group " + std::to_string(i)));
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const std::vector<RecoveryProgress::View> running = server.ReadRunning();
      CHECK(running.size() <= kParts);
      (void)RecoveryProgress::Describe(running);
    }
  });
  std::vector<std::thread> workers;
  for (RecoveryProgress* part : parts) {
    workers.emplace_back([part] {
      for (int round = 0; round < 200; ++round) {
        part->BeginPhase("loading", "entries");
        for (int i = 0; i < 50; ++i) part->Add(1, 10);
        part->MarkUninterruptible();
        part->EndPhase();
      }
      part->BeginPhase("loading", "entries");
      part->Add(5);
    });
  }
  for (std::thread& worker : workers) worker.join();
  done.store(true);
  reader.join();
  const std::vector<RecoveryProgress::View> running = server.ReadRunning();
  REQUIRE(running.size() == kParts);
  for (const RecoveryProgress::View& view : running) CHECK(view.records == 5);
}

}  // namespace
}  // namespace kvatlas::server
