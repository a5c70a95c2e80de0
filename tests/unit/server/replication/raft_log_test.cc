// RaftLog over real libuv I/O, one voter on loopback: the loop-blocked warning. The state
// machine here only records entries (and can be slow on purpose): the subject is the log.
#include "server/replication/raft_log.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace kvatlas::server
