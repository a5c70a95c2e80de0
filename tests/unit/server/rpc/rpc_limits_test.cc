// RpcConnection's read limits over real loopback sockets, with an in-memory state machine:
// a connection paused at max_in_flight resumes by decoding what it already buffered (it
// must not wait for more bytes from a client that sent everything in one write).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/rpc/rpc_server.h"
#include "tests/support/in_memory_services.h"
#include "tests/support/raw_rpc_connection.h"

namespace kvatlas::server {
namespace {

using protocol::MessageType;

TEST_SUITE("RpcConnection limits") {
  TEST_CASE("RpcConnection: 3,000 pipelined pings in one write get 3,000 answers") {
    testing::InMemoryServices s;
    RpcServerOptions options;
    options.port = 0;
    options.threads = 1;
    options.connection.max_in_flight = 1024;  // the default: 3,000 pings pause it twice
    RpcServer server(options, &s.api);
    REQUIRE(server.Start().ok());
    testing::RawRpcConnection connection(server.port());
    constexpr size_t kPings = 3000;
    std::string bytes;
    for (size_t i = 0; i < kPings; ++i) {
      testing::RawRpcConnection::Append(MessageType::kPing, i + 1, "", &bytes);
    }
    connection.SendRaw(bytes);  // everything at once; nothing more is ever sent
    std::vector<bool> seen(kPings + 1, false);
    const auto start = std::chrono::steady_clock::now();
    size_t answers = 0;
    // Read() throws after 10 s without a frame: a stalled connection fails here.
    while (answers < kPings) {
      const protocol::Frame frame = connection.MustRead();
      REQUIRE(frame.header.type == MessageType::kPing);
      REQUIRE(frame.header.request_id >= 1);
      REQUIRE(frame.header.request_id <= kPings);
      CHECK_FALSE(seen[frame.header.request_id]);
      seen[frame.header.request_id] = true;
      ++answers;
    }
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    server.Stop();
  }
}

}  // namespace
}  // namespace kvatlas::server
