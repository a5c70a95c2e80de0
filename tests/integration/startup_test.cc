// kvatlas-server's start, through the real binary: what it shows of its place in raft.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
    }
    const std::string raft = FreeAddress();
    ServerProcess addressed(dir.path() / "addressed", {"--raft-listen", raft});
    auto client = addressed.Client();
    const Answer cluster = Get(client, "/v1/cluster");
    REQUIRE(cluster.status == 200);
    CHECK(cluster.body["members"][0]["raft_address"] == raft);
    CHECK(cluster.body["leader_raft_address"] == raft);
  }
}

}  // namespace
}  // namespace kvatlas::testing
