// RaftLog over real libuv I/O on loopback: the loop-blocked warning (one voter) and the
// options of raft's TCP connections (two voters). The state machine here only records
// entries (and can be slow on purpose): the subject is the log.
#include "server/replication/raft_log.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::TempDir;

// Records applied entries; sleeps `apply_delay` in each apply of an entry reading "slow".
class RecordingMachine final : public LogStateMachine {
 public:
  std::chrono::milliseconds apply_delay{0};

  Status ApplyEntry(uint64_t /*index*/, std::string_view entry) override {
    if (entry.substr(0, 4) == "slow") std::this_thread::sleep_for(apply_delay);
    return Status::Ok();
  }
  Result<std::unique_ptr<Capture>> CaptureState() override {
    return Status::FailedPrecondition("no snapshots in this test");
  }
  Status Restore(std::string_view /*snapshot*/) override { return Status::Ok(); }
};

// A loopback port free right now (bound and released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  close(fd);
  return ntohs(address.sin_port);
}

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

// Proposes `entry` and waits for it to be committed and applied.
void ProposeAndWait(RaftLog* log, std::string entry) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::promise<Result<uint64_t>> applied;
    std::future<Result<uint64_t>> result = applied.get_future();
    REQUIRE(
        log->Propose(&entry, [&](Result<uint64_t> r) { applied.set_value(std::move(r)); }).ok());
    if (result.get().has_value()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // not leading yet
  }
  FAIL("the entry was never applied");
}

TEST_CASE("RaftLog warns when its loop was blocked for half an election timeout") {
  TempDir dir;
  RecordingMachine machine;
  machine.apply_delay = std::chrono::milliseconds(700);
  RaftOptions options;
  options.address = "127.0.0.1:" + std::to_string(FreePort());
  options.dir = dir.str() + "/raft";
  options.bootstrap = {{1, options.address}};
  options.election_timeout_ms = 1000;
  const std::string log_text = CaptureStderr(dir.str() + "/stderr", [&] {
    auto log = RaftLog::Start(options, &machine);
    REQUIRE_MESSAGE(log.has_value(), log.status().ToString());
    ProposeAndWait(log->get(), "fast");
    ProposeAndWait(log->get(), "slow");
    // The next status refresh (every 50 ms) notices the gap.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (*log)->Stop();
  });
  CHECK_MESSAGE(log_text.find("raft loop blocked for ") != std::string::npos, log_text);
  // The warning names the apply that blocked it.
  const std::string apply_marker = "longest log entry apply meanwhile ";
  const size_t at = log_text.find(apply_marker);
  REQUIRE_MESSAGE(at != std::string::npos, log_text);
  CHECK(std::stoul(log_text.substr(at + apply_marker.size())) >= 700);
}

TEST_CASE("RaftLog does not warn about a loop that kept up") {
  TempDir dir;
  RecordingMachine machine;
  RaftOptions options;
  options.address = "127.0.0.1:" + std::to_string(FreePort());
  options.dir = dir.str() + "/raft";
  options.bootstrap = {{1, options.address}};
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

// libraft 0.15's TCP transport leaves Nagle's algorithm on: a message sent while the
// previous one is unacknowledged then waits for the peer's delayed ACK (~40 ms), which set
// the commit latency of a loaded cluster (docs/replication.md §Benchmark).
TEST_CASE("RaftLog's raft connections, outgoing and accepted, disable Nagle's algorithm") {
  TempDir dir;
  RecordingMachine machine_1, machine_2;
  const int port_1 = FreePort(), port_2 = FreePort();
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
  auto log_1 = RaftLog::Start(options_1, &machine_1);
  REQUIRE_MESSAGE(log_1.has_value(), log_1.status().ToString());
  auto log_2 = RaftLog::Start(options_2, &machine_2);
  REQUIRE_MESSAGE(log_2.has_value(), log_2.status().ToString());
  // Committing an entry takes both voters, so both have connected to each other by then
  // (each server sends on a connection of its own).
  bool applied = false;
  for (int attempt = 0; attempt < 400 && !applied; ++attempt) {
    for (RaftLog* log : {log_1->get(), log_2->get()}) {
      std::string entry = "fast";
      std::promise<Result<uint64_t>> done;
      std::future<Result<uint64_t>> result = done.get_future();
      if (!log->Propose(&entry, [&](Result<uint64_t> r) { done.set_value(std::move(r)); }).ok()) {
        continue;
      }
      const bool committed = result.get().has_value();  // always waits: `done` is on the stack
      applied = applied || committed;
    }
    if (!applied) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(applied);
  const std::vector<int> no_delay = NoDelayOfConnectionsOn({port_1, port_2});
  // Both ends of both connections live in this process.
  CHECK(no_delay.size() >= 4);
  for (int option : no_delay) CHECK(option != 0);
  (*log_1)->Stop();
  (*log_2)->Stop();
}

}  // namespace
}  // namespace kvatlas::server
