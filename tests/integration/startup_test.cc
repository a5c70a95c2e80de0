// kvatlas-server's start, through the real binary: what it checks before it touches the
// data directory, and what it logs and shows of its place in raft.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

namespace fs = std::filesystem;

// A loopback TCP socket listening on a port the kernel picked; closed on destruction.
class TakenPort {
 public:
  TakenPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(listen(fd_, 1) == 0);
    socklen_t length = sizeof(address);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
  }
  ~TakenPort() { close(fd_); }
  TakenPort(const TakenPort&) = delete;
  TakenPort& operator=(const TakenPort&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A port free a moment ago (bound to :0, then closed): for a server's raft address.
std::string FreeAddress() {
  const TakenPort taken;
  return taken.address();
}

TEST_SUITE("Integration.Startup") {
  TEST_CASE("Startup: a failed check leaves no data directory and names the setting") {
    TempDir dir;
    const TakenPort taken;
    const fs::path fresh = dir.path() / "fresh";
    const std::string data = (fresh / "data").string();
    const fs::path tokens = dir.path() / "tokens";
    std::ofstream(tokens) << "reader:read:" << std::string(64, 'a') << "\nnot a token line\n";
    const std::vector<std::string> base = {"--data-dir", data};
    struct Case {
      std::vector<std::string> args;
      std::string expected;
    };
    const std::vector<Case> cases = {
        {{"--http-listen", taken.address(), "--rpc-listen", "127.0.0.1:0"},
         "--http-listen " + taken.address() + ": address already in use"},
        {{"--http-listen", "127.0.0.1:0", "--rpc-listen", taken.address()},
         "--rpc-listen " + taken.address() + ": address already in use"},
        {{"--http-listen", "127.0.0.1:0", "--rpc-listen", "127.0.0.1:0", "--raft-listen",
          taken.address()},
         "--raft-listen " + taken.address() + ": address already in use"},
        // 192.0.2.0/24 is TEST-NET-1: no machine has it.
        {{"--http-listen", "192.0.2.1:0", "--rpc-listen", "127.0.0.1:0", "--insecure"},
         "--http-listen 192.0.2.1:0: not an address of this machine"},
        {{"--http-listen", "127.0.0.1:0", "--rpc-listen", "127.0.0.1:0", "--token-file",
          tokens.string()},
         tokens.string() + ":2: "},
        {{"--http-listen", "127.0.0.1:0", "--rpc-listen", "127.0.0.1:0", "--tls-peer-ca",
          (dir.path() / "absent-ca.pem").string()},
         "tls_peer_ca: "},
    };
    for (const Case& c : cases) {
      std::vector<std::string> args = base;
      args.insert(args.end(), c.args.begin(), c.args.end());
      const RunResult run = RunServerToExit(args, dir.path());
      CAPTURE(c.expected);
      CAPTURE(run.err);
      CHECK(run.exit_code == 1);
      CHECK(run.err.find(c.expected) != std::string::npos);
      // Found before the data directory was created (or recovered), not after.
      CHECK_FALSE(fs::exists(fresh));
      CHECK(run.err.find("recovering") == std::string::npos);
    }
  }

  TEST_CASE("Startup: a single server has no raft address; one with --raft-listen has its own") {
    TempDir dir;
    {
      ServerProcess single(dir.path() / "single");
      auto client = single.Client();
      const Answer cluster = Get(client, "/v1/cluster");
      REQUIRE(cluster.status == 200);
      REQUIRE(cluster.body["members"].size() == 1);
      CHECK(cluster.body["members"][0]["raft_address"].is_null());
      CHECK(cluster.body["leader_raft_address"].is_null());
      CHECK(cluster.body["leader_id"] == 1);
      CHECK(single.Log().find("no raft address") != std::string::npos);
    }
    const std::string raft = FreeAddress();
    ServerProcess addressed(dir.path() / "addressed", {"--raft-listen", raft});
    auto client = addressed.Client();
    const Answer cluster = Get(client, "/v1/cluster");
    REQUIRE(cluster.status == 200);
    CHECK(cluster.body["members"][0]["raft_address"] == raft);
    CHECK(cluster.body["leader_raft_address"] == raft);
  }

  TEST_CASE("Startup: a joining server logs that it waits to be added") {
    TempDir dir;
    // Initial voters nobody runs: the joining server does not contact them by itself.
    const std::string peers = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3";
    const std::string raft = FreeAddress();
    ServerProcess joining(dir.path() / "n4",
                          {"--id", "4", "--peers", peers, "--raft-listen", raft});
    const std::string log = joining.Log();
    CAPTURE(log);
    CHECK(log.find("raft: server 4 at " + raft +
                   ", joining a running cluster (not one of the 3 initial voters") !=
          std::string::npos);
    CHECK(log.find("raft: waiting to be added to the cluster (on the leader: `kvatlas cluster add "
                   "4 " +
                   raft + "`") != std::string::npos);
    CHECK(log.find("initial voters)") == std::string::npos);
    auto client = joining.Client();
    const Answer cluster = Get(client, "/v1/cluster");
    REQUIRE(cluster.status == 200);
    CHECK(cluster.body["members"].empty());
  }
}

}  // namespace
}  // namespace kvatlas::testing
