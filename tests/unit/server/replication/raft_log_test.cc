// RaftLog over real libuv I/O on loopback: the loop-blocked warning, the apply thread (one
// voter) and the options of raft's TCP connections (two voters). The state machine here only
// records entries (and can be slow on purpose): the subject is the log.
#include "server/replication/raft_log.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "server/replication/peer_handshake.h"
#include "server/replication/tcp_transport.h"
#include "tests/support/free_port.h"
#include "tests/support/temp_dir.h"

#ifndef __has_feature  // clang's; gcc says __SANITIZE_ADDRESS__
#define __has_feature(feature) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
// Freed memory is filled, so that uninstrumented code (libraft) reading a freed object of
// ours reads garbage, not the values it held (see the leadership transfer case).
extern "C" const char* __asan_default_options() {
  return "max_free_fill_size=4096:free_fill_byte=255";
}
#endif

namespace kvatlas::server {
namespace {

using testing::FreePort;
using testing::TempDir;

// Records the last applied index; sleeps `apply_delay` in each apply of an entry reading
// "slow". Its snapshots record the index they were captured at, padded to
// `snapshot_bytes`.
class RecordingMachine final : public LogStateMachine {
 public:
  std::chrono::milliseconds apply_delay{0};
  size_t snapshot_bytes = 0;
  std::atomic<bool> fail_serialize{false};  // snapshots cannot be serialised while set
  std::atomic<int> serialize_delay_ms{0};   // each snapshot's serialisation takes this long
  std::atomic<uint64_t> last_applied{0};
  std::mutex mu;
  std::vector<uint64_t> captured_at;  // guarded by mu

  Status ApplyEntry(uint64_t index, std::string_view entry) override {
    if (entry.substr(0, 4) == "slow") std::this_thread::sleep_for(apply_delay);
    last_applied = index;
    return Status::Ok();
  }
  Result<std::unique_ptr<Capture>> CaptureState() override {
    std::lock_guard lock(mu);
    captured_at.push_back(last_applied);
    std::string bytes = std::to_string(last_applied);
    bytes.resize(std::max(bytes.size(), snapshot_bytes), ' ');
    return std::unique_ptr<Capture>(
        new FixedCapture(std::move(bytes), &fail_serialize, &serialize_delay_ms));
  }
  Status Restore(std::string_view /*snapshot*/) override { return Status::Ok(); }

 private:
  struct FixedCapture final : Capture {
    FixedCapture(std::string text, const std::atomic<bool>* fail, const std::atomic<int>* delay)
        : bytes(std::move(text)), fail_serialize(fail), serialize_delay_ms(delay) {}
    Status SerializeInto(ChunkedBytes* out) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(serialize_delay_ms->load()));
      if (fail_serialize->load()) return Status::IOError("serialisation failed (test)");
      out->Append(bytes);
      return Status::Ok();
    }
    std::string bytes;
    const std::atomic<bool>* fail_serialize;
    const std::atomic<int>* serialize_delay_ms;
  };
};

// Everything written to stderr while `run` runs.
template <typename Fn>
std::string CaptureStderr(const std::string& path, Fn run) {
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  dup2(fileno(file), 2);
  run();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Proposes `entry` and waits for it to be committed and applied. Returns its index and
// what machine.last_applied was when the proposal completed.
std::pair<uint64_t, uint64_t> ProposeAndWait(RaftLog* log, std::string entry,
                                             const RecordingMachine* machine = nullptr) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::promise<std::pair<Result<uint64_t>, uint64_t>> applied;
    auto result = applied.get_future();
    REQUIRE(log->Propose(
                   &entry,
                   [&](Result<uint64_t> r) {
                     applied.set_value({std::move(r), machine ? machine->last_applied.load() : 0});
                   })
                .ok());
    auto [index, seen] = result.get();
    if (index.has_value()) return {*index, seen};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // not leading yet
  }
  FAIL("the entry was never applied");
  return {0, 0};
}

RaftOptions OneVoter(const TempDir& dir) {
  RaftOptions options;
  options.address = "127.0.0.1:" + std::to_string(FreePort());
  options.dir = dir.str() + "/raft";
  options.bootstrap = {{1, options.address}};
  return options;
}

// What one run of a "fast" then a "slow" entry (700 ms apply) through a one-voter log
// showed: its stderr, the slow entry's index, the machine's applied index when the slow
// entry was acknowledged, and the log's applied index 200 ms later.
struct SlowApplyRun {
  std::string log_text;
  uint64_t index = 0;
  uint64_t applied_at_ack = 0;
  uint64_t status_applied = 0;
};

SlowApplyRun RunSlowApply(const TempDir& dir, RaftOptions options) {
  RecordingMachine machine;
  machine.apply_delay = std::chrono::milliseconds(700);
  options.election_timeout_ms = 1000;
  SlowApplyRun run;
  run.log_text = CaptureStderr(dir.str() + "/stderr", [&] {
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    ProposeAndWait(log->get(), "fast");
    std::tie(run.index, run.applied_at_ack) = ProposeAndWait(log->get(), "slow", &machine);
    // The next status refresh (every 50 ms) notices a gap.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    run.status_applied = (*log)->GetStatus().applied_index;
    (*log)->Stop();
  });
  return run;
}

TEST_CASE(
    "RaftLog applying on its loop warns when the loop was blocked for half an election timeout") {
  TempDir dir;
  RaftOptions options = OneVoter(dir);
  options.apply_queue = 0;  // apply on the loop thread
  const SlowApplyRun run = RunSlowApply(dir, options);
  CHECK_MESSAGE(run.log_text.find("raft loop blocked for ") != std::string::npos, run.log_text);
  // The warning names the apply that blocked it.
  const std::string apply_marker = "longest log entry apply meanwhile ";
  const size_t at = run.log_text.find(apply_marker);
  REQUIRE_MESSAGE(at != std::string::npos, run.log_text);
  CHECK(std::stoul(run.log_text.substr(at + apply_marker.size())) >= 700);
}

// libraft says "server ID is not valid" for a change or transfer naming a server that is not
// in the cluster: the refusal says which server and what is wrong.
TEST_CASE("RaftLog's membership refusals name the server and what is wrong") {
  TempDir dir;
  RecordingMachine machine;
  auto log = RaftLog::Start(OneVoter(dir), &machine);
  REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
  ProposeAndWait(log->get(), "leading");  // the one voter leads once this commits
  const auto refusal = [&](auto call) {
    std::promise<Status> done;
    call([&done](Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  };
  const Status remove =
      refusal([&](ReplicatedLog::Done d) { (*log)->RemoveServer(4, std::move(d)); });
  CHECK(remove.code() == StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(
      remove.message().find("server 4 is not a member of the cluster") != std::string::npos,
      remove.message());
  const Status transfer =
      refusal([&](ReplicatedLog::Done d) { (*log)->TransferLeadership(9, std::move(d)); });
  CHECK_MESSAGE(transfer.message().find("server 9 is not a member") != std::string::npos,
                transfer.message());
  (*log)->Stop();
}

TEST_CASE("RaftLog does not warn about a loop that kept up") {
  TempDir dir;
  RecordingMachine machine;
  RaftOptions options = OneVoter(dir);
  // Generous, so that a loaded test machine does not trip it.
  options.election_timeout_ms = 20'000;
  const std::string log_text = CaptureStderr(dir.str() + "/stderr", [&] {
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    for (int i = 0; i < 20; ++i) ProposeAndWait(log->get(), "fast");
    (*log)->Stop();
  });
  CHECK_MESSAGE(log_text.find("raft loop blocked") == std::string::npos, log_text);
}

// libraft 0.15 applies on its loop thread, and a follower before it answers an append: an
// apply thread takes the apply out of the loop (and out of the next entry's commit), but
// the write must still be acknowledged only once its entry is applied.
TEST_CASE("RaftLog with an apply thread: a slow apply leaves the loop free and is acked after") {
  TempDir dir;
  const SlowApplyRun run = RunSlowApply(dir, OneVoter(dir));
  CHECK(run.applied_at_ack >= run.index);
  CHECK(run.status_applied >= run.index);
  CHECK_MESSAGE(run.log_text.find("raft loop blocked") == std::string::npos, run.log_text);
}

// 0.15 records a snapshot at its last applied index: when it asks for one, the apply thread
// must first catch up, or the snapshot would claim entries it does not hold.
TEST_CASE("RaftLog with an apply thread: a snapshot holds the state at its index") {
  TempDir dir;
  RecordingMachine machine;
  machine.apply_delay = std::chrono::milliseconds(15);
  RaftOptions options = OneVoter(dir);
  options.snapshot_threshold = 8;
  options.snapshot_trailing = 2;
  auto log = RaftLog::Start(options, &machine);
  REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
  ProposeAndWait(log->get(), "fast");
  // Proposed back to back, so that the apply thread lags behind raft's applied index.
  constexpr int kEntries = 40;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < kEntries; ++i) {
    std::string entry = "slow";
    REQUIRE((*log)
                ->Propose(&entry,
                          [&](Result<uint64_t> r) {
                            CHECK(r.has_value());
                            std::lock_guard lock(mu);
                            ++done;
                            cv.notify_all();
                          })
                .ok());
  }
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done == kEntries; }));
  }
  (*log)->Stop();
  // libraft names snapshots snapshot-TERM-INDEX-TIMESTAMP(.meta).
  std::set<uint64_t> snapshot_indexes;
  for (const auto& file : std::filesystem::directory_iterator(options.dir)) {
    const std::string name = file.path().filename().string();
    if (name.rfind("snapshot-", 0) != 0 || name.find(".meta") != std::string::npos) continue;
    const size_t term_end = name.find('-', 9);
    REQUIRE(term_end != std::string::npos);
    snapshot_indexes.insert(std::stoull(name.substr(term_end + 1)));
  }
  REQUIRE(!snapshot_indexes.empty());
  std::lock_guard lock(machine.mu);
  const std::set<uint64_t> captured(machine.captured_at.begin(), machine.captured_at.end());
  for (uint64_t index : snapshot_indexes) {
    CHECK_MESSAGE(captured.contains(index), "snapshot at index " << index);
  }
}

// libraft 0.15 only traces a snapshot it could not write; RaftLog counts it, names its index
// until a later snapshot is written, and logs it.
TEST_CASE("RaftLog counts a snapshot that was not written, until one is") {
  TempDir dir;
  RecordingMachine machine;
  machine.fail_serialize = true;
  RaftOptions options = OneVoter(dir);
  options.snapshot_threshold = 4;
  options.snapshot_trailing = 2;
  LogMetrics failed;
  LogMetrics recovered;
  const std::string text = CaptureStderr(dir.str() + "/stderr", [&] {
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    for (int i = 0; i < 200 && (*log)->GetMetrics().snapshot_failures == 0; ++i) {
      ProposeAndWait(log->get(), "fast");
    }
    failed = (*log)->GetMetrics();
    machine.fail_serialize = false;
    for (int i = 0; i < 200 && (*log)->GetMetrics().failed_snapshot_index != 0; ++i) {
      ProposeAndWait(log->get(), "fast");
    }
    recovered = (*log)->GetMetrics();
    (*log)->Stop();
  });
  CHECK(failed.snapshot_failures >= 1);
  CHECK(failed.failed_snapshot_index >= 4);
  CHECK(recovered.failed_snapshot_index == 0);
  CHECK(recovered.snapshot_failures >= failed.snapshot_failures);
  CHECK(recovered.snapshots_taken > recovered.snapshot_failures);
  CHECK_MESSAGE(text.find("was not written") != std::string::npos, text);
}

// A stop while a snapshot is being serialised cancels it (libraft does not write it once
// closing): not a failure, and nothing is logged as one.
TEST_CASE("RaftLog does not count a snapshot that a stop cancelled") {
  TempDir dir;
  RecordingMachine machine;
  machine.serialize_delay_ms = 500;
  RaftOptions options = OneVoter(dir);
  options.snapshot_threshold = 4;
  options.snapshot_trailing = 2;
  LogMetrics stopped;
  bool snapshot_started = false;
  const std::string text = CaptureStderr(dir.str() + "/stderr", [&] {
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    for (int i = 0; i < 200 && !snapshot_started; ++i) {
      ProposeAndWait(log->get(), "fast");
      std::lock_guard lock(machine.mu);
      snapshot_started = !machine.captured_at.empty();
    }
    (*log)->Stop();  // within the 500 ms the serialisation takes
    stopped = (*log)->GetMetrics();
  });
  REQUIRE(snapshot_started);
  CHECK(stopped.snapshot_failures == 0);
  CHECK(stopped.failed_snapshot_index == 0);
  CHECK_MESSAGE(text.find("was not written") == std::string::npos, text);
}

// A bulk ingest applies few, large entries: far fewer than snapshot_threshold, so only the
// bytes the log holds can bring a snapshot due. 64 KiB entries against a 1 MiB budget: a
// snapshot within 256 entries (4x the budget), reported to snapshot_done; with the byte
// trigger off, none.
TEST_CASE("RaftLog takes a snapshot once the log held in memory reaches snapshot_log_bytes") {
  for (const size_t budget : {size_t{1} << 20, size_t{0}}) {
    CAPTURE(budget);
    TempDir dir;
    RecordingMachine machine;
    RaftOptions options = OneVoter(dir);
    options.snapshot_threshold = 1'000'000;
    options.snapshot_log_bytes = budget;
    std::atomic<int> reported{0};
    options.snapshot_done = [&reported] { ++reported; };
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    for (int i = 0; i < 256 && (*log)->GetMetrics().snapshots_taken == 0; ++i) {
      ProposeAndWait(log->get(), "fast" + std::string(64 << 10, 'x'));
    }
    CHECK(((*log)->GetMetrics().snapshots_taken > 0) == (budget != 0));
    // snapshot_done reports it (within 50 ms: the loop's status refresh).
    for (int i = 0; i < 100 && budget != 0 && reported == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK((reported > 0) == (budget != 0));
    (*log)->Stop();
  }
}

// The byte budget grows with the state: 1/16 of the last snapshot when that is more than
// snapshot_log_bytes. An 8 MiB snapshot against a 128 KiB budget: after the first snapshot,
// the next waits for 512 KiB of 32 KiB entries (16; the trailing quarter of the budget
// counts), where the floor alone brings one after 4. Entries go on while a snapshot is
// written (8 MiB here, slower on a loaded machine), so each count allows a few more.
TEST_CASE("RaftLog's log byte budget grows to a sixteenth of the last snapshot") {
  TempDir dir;
  RecordingMachine machine;
  machine.snapshot_bytes = 8 << 20;
  RaftOptions options = OneVoter(dir);
  options.snapshot_threshold = 1'000'000;
  options.snapshot_log_bytes = 128 << 10;
  auto log = RaftLog::Start(options, &machine);
  REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
  const auto propose_until_snapshots = [&](uint64_t snapshots) {
    int proposed = 0;
    for (; proposed < 200 && (*log)->GetMetrics().snapshots_taken < snapshots; ++proposed) {
      ProposeAndWait(log->get(), "fast" + std::string(32 << 10, 'x'));
      // The budget is checked every 50 ms: give each entry that long, so that the count
      // measures the budget rather than the check's period.
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
    }
    return proposed;
  };
  // 4 by the floor, up to 12 while the first snapshot is being written: still short of the
  // 16 a budget grown too early would take.
  CHECK(propose_until_snapshots(1) <= 12);
  CHECK((*log)->GetMetrics().last_snapshot_bytes >= size_t{8} << 20);
  // Between snapshots the log's memory is measured: each 32 KiB entry shows (the check ran
  // since the last proposal, which waited 60 ms), and it stays under the 512 KiB budget.
  ProposeAndWait(log->get(), "fast" + std::string(32 << 10, 'x'));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const LogMetrics between = (*log)->GetMetrics();
  CHECK(between.log_memory_entries >= 1);
  CHECK(between.log_memory_bytes >= size_t{32} << 10);
  CHECK(between.log_memory_bytes < size_t{1} << 20);
  const int second = propose_until_snapshots(2);
  CHECK(second >= 11);
  CHECK(second <= 23);
  (*log)->Stop();
}

// So does the count trigger: after an 8 MiB snapshot, 16 small entries are not worth
// rewriting it; the next snapshot waits for 16 times the threshold (the entries never hold
// 512 KiB). Before the first snapshot, and with the byte trigger off, the threshold holds.
TEST_CASE("RaftLog's count trigger waits while the entries are small against the last snapshot") {
  for (const size_t floor : {size_t{1} << 30, size_t{0}}) {
    CAPTURE(floor);
    TempDir dir;
    RecordingMachine machine;
    machine.snapshot_bytes = 8 << 20;
    RaftOptions options = OneVoter(dir);
    options.snapshot_threshold = 16;
    options.snapshot_trailing = 2;
    options.snapshot_log_bytes = floor;
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    // Snapshots are counted where they are captured (their index), not when written:
    // entries applied while one is written count toward the next.
    const auto captured = [&machine] {
      std::lock_guard lock(machine.mu);
      return machine.captured_at;
    };
    for (int i = 0; i < 100 && captured().empty(); ++i) ProposeAndWait(log->get(), "fast");
    REQUIRE(captured().size() == 1);
    for (int i = 0; i < 500 && (*log)->GetMetrics().snapshots_taken == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // The budget check (every 50 ms) sees the written snapshot before the next entries.
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    for (int i = 0; i < 400 && captured().size() < 2; ++i) ProposeAndWait(log->get(), "fast");
    const std::vector<uint64_t> at = captured();
    REQUIRE(at.size() == 2);
    const uint64_t between = at[1] - at[0];
    if (floor == 0) {
      CHECK(between >= 16);
      CHECK(between <= 18);
    } else {
      CHECK(between >= 250);
      CHECK(between <= 260);
    }
    (*log)->Stop();
  }
}

// libraft preallocates each segment file at its full size: the option reaches it.
TEST_CASE("RaftLog preallocates log segments of segment_bytes") {
  for (const size_t bytes : {size_t{64} << 20, size_t{3} << 20}) {
    CAPTURE(bytes);
    TempDir dir;
    RecordingMachine machine;
    RaftOptions options = OneVoter(dir);
    if (bytes != RaftOptions{}.segment_bytes) options.segment_bytes = bytes;
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    ProposeAndWait(log->get(), "fast");  // written to open-1, so it exists
    const std::filesystem::path segment = std::filesystem::path(options.dir) / "open-1";
    REQUIRE(std::filesystem::exists(segment));
    CHECK(std::filesystem::file_size(segment) == bytes);
    (*log)->Stop();
  }
}

// The TCP_NODELAY option of every connected TCP socket of this process that has `ports` at
// one of its ends.
std::vector<int> NoDelayOfConnectionsOn(const std::set<int>& ports) {
  std::vector<int> options;
  for (const auto& fd_entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(fd_entry.path().filename().string());
    int type = 0;
    socklen_t length = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_STREAM) continue;
    sockaddr_in local{}, peer{};
    socklen_t local_length = sizeof(local), peer_length = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 ||
        local.sin_family != AF_INET) {
      continue;  // not connected (a listener), or not TCP over IPv4
    }
    if (!ports.contains(ntohs(local.sin_port)) && !ports.contains(ntohs(peer.sin_port))) continue;
    int no_delay = -1;
    length = sizeof(no_delay);
    REQUIRE(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &no_delay, &length) == 0);
    options.push_back(no_delay);
  }
  return options;
}

// Proposes on either log until one commits, for at most `attempts` x 20 ms.
bool AnyCommits(std::vector<RaftLog*> logs, int attempts) {
  for (int attempt = 0; attempt < attempts; ++attempt) {
    for (RaftLog* log : logs) {
      std::string entry = "fast";
      std::promise<Result<uint64_t>> done;
      std::future<Result<uint64_t>> result = done.get_future();
      if (!log->Propose(&entry, [&](Result<uint64_t> r) { done.set_value(std::move(r)); }).ok()) {
        continue;
      }
      if (result.get().has_value()) return true;  // always waits: `done` is on the stack
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Two voters on loopback ports `port_1` and `port_2`, in `dir`.
std::pair<RaftOptions, RaftOptions> TwoVoters(const TempDir& dir, int port_1, int port_2) {
  RaftOptions options_1;
  options_1.id = 1;
  options_1.address = "127.0.0.1:" + std::to_string(port_1);
  options_1.dir = dir.str() + "/raft1";
  options_1.bootstrap = {{1, options_1.address}, {2, "127.0.0.1:" + std::to_string(port_2)}};
  options_1.election_timeout_ms = 300;
  RaftOptions options_2 = options_1;
  options_2.id = 2;
  options_2.address = "127.0.0.1:" + std::to_string(port_2);
  options_2.dir = dir.str() + "/raft2";
  return {options_1, options_2};
}

// libraft 0.15's TCP transport leaves Nagle's algorithm on: a message sent while the
// previous one is unacknowledged then waits for the peer's delayed ACK (~40 ms), which set
// the commit latency of a loaded cluster (docs/replication.md §Benchmark).
TEST_CASE("RaftLog's raft connections, outgoing and accepted, disable Nagle's algorithm") {
  TempDir dir;
  RecordingMachine machine_1, machine_2;
  const int port_1 = FreePort(), port_2 = FreePort();
  const auto [options_1, options_2] = TwoVoters(dir, port_1, port_2);
  auto log_1 = RaftLog::Start(options_1, &machine_1);
  REQUIRE_MESSAGE(log_1.has_value(), log_1.status().ToString());
  auto log_2 = RaftLog::Start(options_2, &machine_2);
  REQUIRE_MESSAGE(log_2.has_value(), log_2.status().ToString());
  // Committing an entry takes both voters, so both have connected to each other by then
  // (each server sends on a connection of its own).
  REQUIRE(AnyCommits({log_1->get(), log_2->get()}, 400));
  const std::vector<int> no_delay = NoDelayOfConnectionsOn({port_1, port_2});
  // Both ends of both connections live in this process.
  CHECK(no_delay.size() >= 4);
  for (int option : no_delay) CHECK(option != 0);
  (*log_1)->Stop();
  (*log_2)->Stop();
}

uint64_t Refused(const PeerAuth& auth, PeerChannel channel, PeerRefusal reason) {
  return auth.counters().refused[static_cast<size_t>(channel)][static_cast<size_t>(reason)];
}

// The peer handshake (tcp_transport.h): two voters with different cluster secrets never
// form a majority, and each counts the other's connections as refused.
TEST_CASE("RaftLog: voters with another cluster secret refuse each other's raft connections") {
  TempDir dir;
  RecordingMachine machine_1, machine_2;
  PeerAuth auth_1(1, "prod", "the cluster secret, 32 bytes....");
  PeerAuth auth_2(2, "prod", "another secret, also 32 bytes...");
  auto [options_1, options_2] = TwoVoters(dir, FreePort(), FreePort());
  options_1.election_timeout_ms = options_2.election_timeout_ms = 100;
  options_1.peer_auth = &auth_1;
  options_2.peer_auth = &auth_2;
  auto log_1 = RaftLog::Start(options_1, &machine_1);
  REQUIRE_MESSAGE(log_1.has_value(), log_1.status().ToString());
  auto log_2 = RaftLog::Start(options_2, &machine_2);
  REQUIRE_MESSAGE(log_2.has_value(), log_2.status().ToString());
  CHECK_FALSE(AnyCommits({log_1->get(), log_2->get()}, 50));
  CHECK(machine_1.last_applied == 0);
  CHECK(machine_2.last_applied == 0);
  for (PeerAuth* auth : {&auth_1, &auth_2}) {
    CHECK(Refused(*auth, PeerChannel::kRaftIn, PeerRefusal::kBadProof) > 0);
    CHECK(Refused(*auth, PeerChannel::kRaftOut, PeerRefusal::kRefusedByPeer) > 0);
    CHECK(auth->counters().handshakes == 0);
  }
  (*log_1)->Stop();
  (*log_2)->Stop();
}

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  timeval limit{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  return fd;
}

// True once the server closed `fd` (reads until EOF or reset; false on the 5 s limit).
bool ClosedByServer(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;
  }
}

// What reaches the raft port before the handshake is bounded: a silent connection is closed
// after the handshake timeout, a bad preamble (libraft itself would allocate any address
// length it is sent) at once; raft goes on committing.
TEST_CASE("RaftLog: silent and malformed raft connections are closed before raft reads them") {
  TempDir dir;
  RecordingMachine machine;
  PeerAuth auth(1, "prod", "the cluster secret, 32 bytes....");
  RaftOptions options = OneVoter(dir);
  options.peer_auth = &auth;
  options.handshake_timeout_ms = 200;
  auto log = RaftLog::Start(options, &machine);
  REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
  const int port = std::stoi(options.address.substr(options.address.rfind(':') + 1));

  const int silent = ConnectTo(port);
  const auto started = std::chrono::steady_clock::now();
  CHECK(ClosedByServer(silent));
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(150));
  close(silent);
  CHECK(Refused(auth, PeerChannel::kRaftIn, PeerRefusal::kTimeout) == 1);

  const int greedy = ConnectTo(port);
  uint8_t preamble[24] = {1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,
                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40};  // an address of 2^62 bytes
  REQUIRE(send(greedy, preamble, sizeof(preamble), 0) == sizeof(preamble));
  CHECK(ClosedByServer(greedy));
  close(greedy);
  CHECK(Refused(auth, PeerChannel::kRaftIn, PeerRefusal::kMalformed) == 1);

  CHECK(AnyCommits({log->get()}, 100));
  (*log)->Stop();
}

// libraft's connection preamble from server `id` with raft address `address`.
std::vector<uint8_t> PreambleOf(uint64_t id, const std::string& address) {
  const size_t length = (address.size() / 8 + 1) * 8;  // NUL-terminated, a multiple of 8
  std::vector<uint8_t> bytes(24 + length, 0);
  for (int i = 0; i < 8; ++i) {
    bytes[i] = i == 0 ? 1 : 0;  // protocol 1
    bytes[8 + i] = static_cast<uint8_t>(id >> (8 * i));
    bytes[16 + i] = static_cast<uint8_t>(length >> (8 * i));
  }
  std::copy(address.begin(), address.end(), bytes.begin() + 24);
  return bytes;
}

// Groups on one port (tcp_transport.h): three servers each host groups 1 and 2, and each
// listens once. Group 2's logs bind nothing (a second bind of the port would fail their
// start), so its commits prove that its connections went through group 1's listener to
// group 2's own handshake. A connection for a group the server does not host is closed.
TEST_CASE("RaftLog: raft groups hosted on the same servers share one raft port") {
  TempDir dir;
  constexpr size_t kServers = 3;
  std::vector<int> ports;
  std::vector<std::unique_ptr<PeerAuth>> auths;
  std::vector<std::unique_ptr<RaftPortShare>> shares;
  for (size_t i = 0; i < kServers; ++i) {
    ports.push_back(FreePort());
    auths.push_back(std::make_unique<PeerAuth>(i + 1, "prod", "the cluster secret, 32 bytes...."));
    shares.push_back(std::make_unique<RaftPortShare>());
  }
  auto address = [&](size_t server, uint32_t group) {
    return RaftAddressOfGroup("127.0.0.1:" + std::to_string(ports[server]), group);
  };
  RecordingMachine machines[2][kServers];
  std::vector<std::unique_ptr<RaftLog>> logs[2];
  // Group 2 first: its peers' connections are refused until group 1 listens, then retried.
  for (uint32_t group : {2u, 1u}) {
    for (size_t i = 0; i < kServers; ++i) {
      RaftOptions options;
      options.id = i + 1;
      options.address = address(i, group);
      options.dir = dir.str() + "/raft-" + std::to_string(group) + "-" + std::to_string(i);
      for (size_t j = 0; j < kServers; ++j)
        options.bootstrap.emplace_back(j + 1, address(j, group));
      options.election_timeout_ms = 300;
      options.peer_auth = auths[i].get();
      options.port_share = shares[i].get();
      options.listen = group == 1;
      auto log = RaftLog::Start(options, &machines[group - 1][i]);
      REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
      logs[group - 1].push_back(std::move(*log));
    }
  }
  for (size_t g = 0; g < 2; ++g) {
    std::vector<RaftLog*> raw;
    for (auto& log : logs[g]) raw.push_back(log.get());
    REQUIRE_MESSAGE(AnyCommits(raw, 1500), "group ", g + 1, " never committed");
  }
  for (auto& auth : auths) CHECK(auth->counters().handshakes >= 2);

  PeerAuth& first = *auths[0];
  const uint64_t not_member = Refused(first, PeerChannel::kRaftIn, PeerRefusal::kNotMember);
  const uint64_t malformed = Refused(first, PeerChannel::kRaftIn, PeerRefusal::kMalformed);
  for (const std::string& foreign : {address(1, 7), address(1, 1) + "/01"}) {
    const int fd = ConnectTo(ports[0]);
    const std::vector<uint8_t> preamble = PreambleOf(2, foreign);
    REQUIRE(send(fd, preamble.data(), preamble.size(), 0) == static_cast<ssize_t>(preamble.size()));
    CHECK_MESSAGE(ClosedByServer(fd), foreign);
    close(fd);
  }
  CHECK(Refused(first, PeerChannel::kRaftIn, PeerRefusal::kNotMember) == not_member + 1);
  CHECK(Refused(first, PeerChannel::kRaftIn, PeerRefusal::kMalformed) == malformed + 1);

  // Group 2 stops first, group 1 (the listener) goes on.
  for (auto& log : logs[1]) log->Stop();
  std::vector<RaftLog*> group_1;
  for (auto& log : logs[0]) group_1.push_back(log.get());
  CHECK(AnyCommits(group_1, 400));
  for (auto& log : logs[0]) log->Stop();
}

// libraft 0.15 can still hold a transfer's TimeoutNow, queued for a target it cannot reach,
// after the transfer ended (canonical/raft#396); evicting it later read the freed request
// and called through it. libraft is not instrumented, so ASan sees no use after free; the
// freed memory it filled (__asan_default_options below) makes the call crash instead.
TEST_CASE("RaftLog: a leadership transfer to a stopped voter fails, and the leader goes on") {
  TempDir dir;
  constexpr size_t kServers = 3;
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<PeerAuth>> auths;
  for (size_t i = 0; i < kServers; ++i) {
    addresses.push_back("127.0.0.1:" + std::to_string(FreePort()));
    auths.push_back(std::make_unique<PeerAuth>(i + 1, "prod", "the cluster secret, 32 bytes...."));
  }
  RecordingMachine machines[kServers];
  std::vector<std::unique_ptr<RaftLog>> logs;
  for (size_t i = 0; i < kServers; ++i) {
    RaftOptions options;
    options.id = i + 1;
    options.address = addresses[i];
    options.dir = dir.str() + "/raft-" + std::to_string(i);
    for (size_t j = 0; j < kServers; ++j) options.bootstrap.emplace_back(j + 1, addresses[j]);
    options.election_timeout_ms = 300;
    options.peer_auth = auths[i].get();
    auto log = RaftLog::Start(options, &machines[i]);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    logs.push_back(std::move(*log));
  }
  std::vector<RaftLog*> raw;
  for (auto& log : logs) raw.push_back(log.get());
  REQUIRE(AnyCommits(raw, 1500));
  RaftLog* leader = nullptr;
  for (int i = 0; i < 200 && leader == nullptr; ++i) {
    for (RaftLog* log : raw) {
      if (log->is_leader()) leader = log;
    }
    if (leader == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(leader != nullptr);
  RaftLog* stopped = raw[0] == leader ? raw[1] : raw[0];
  const uint64_t target = stopped->GetStatus().id;
  stopped->Stop();
  // Once the leader's connection to it is found broken (nothing proposed meanwhile, so the
  // stopped voter stays up to date and is sent a TimeoutNow), two transfers, each ending
  // after an election timeout with its TimeoutNow queued; then the leader keeps sending to
  // the stopped voter while its connection attempts fail, which evicts the oldest queued
  // messages.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  for (int round = 0; round < 2; ++round) {
    std::promise<Status> done;
    std::future<Status> result = done.get_future();
    leader->TransferLeadership(target, [&](Status s) { done.set_value(std::move(s)); });
    const Status transferred = result.get();
    CHECK_MESSAGE(!transferred.ok(), "leadership moved to a stopped server");
  }
  std::vector<RaftLog*> running;
  for (RaftLog* log : raw) {
    if (log != stopped) running.push_back(log);
  }
  bool committing = true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (committing && std::chrono::steady_clock::now() < until) {
    committing = AnyCommits(running, 50);
  }
  CHECK(committing);
  for (RaftLog* log : running) log->Stop();
}

}  // namespace
}  // namespace kvatlas::server
