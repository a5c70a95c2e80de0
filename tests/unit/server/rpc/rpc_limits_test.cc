// RpcConnection's read limits over real loopback sockets, with an in-memory state machine:
// a connection paused at max_in_flight resumes by decoding what it already buffered (it
// must not wait for more bytes from a client that sent everything in one write); and the
// listener's connection caps.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
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
    RpcServer server(options, &s.services);
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

  // Past a cap the new connection reads one `unavailable` frame naming the caps, then EOF.
  void CheckRefused(uint16_t port) {
    testing::RawRpcConnection refused(port);
    const protocol::Frame frame = refused.MustRead();
    CHECK(frame.header.type == MessageType::kError);
    CHECK(frame.header.status == StatusCode::kUnavailable);
    CHECK(frame.payload.find("rpc_max_connections") != std::string::npos);
    CHECK_FALSE(refused.Read().has_value());
  }

  // A ping answered on a fresh connection, within a few seconds (a closed connection's
  // count is released on its io thread).
  bool PingAnswered(uint16_t port) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < give_up) {
      testing::RawRpcConnection c(port);
      c.Send(MessageType::kPing, 9, "");
      const std::optional<protocol::Frame> frame = c.Read();
      if (frame && frame->header.type == MessageType::kPing) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  TEST_CASE("RpcServer: past the per-peer and total connection caps a connection is refused") {
    testing::InMemoryServices s;
    for (const bool per_peer : {true, false}) {
      CAPTURE(per_peer);
      RpcServerOptions options;
      options.port = 0;
      options.threads = 1;
      options.max_connections = per_peer ? 100 : 2;
      options.max_connections_per_peer = per_peer ? 2 : 100;
      RpcServer server(options, &s.services);
      REQUIRE(server.Start().ok());
      auto a = std::make_unique<testing::RawRpcConnection>(server.port());
      testing::RawRpcConnection b(server.port());
      a->Send(MessageType::kPing, 1, "");
      CHECK(a->MustRead().header.type == MessageType::kPing);
      b.Send(MessageType::kPing, 2, "");
      CHECK(b.MustRead().header.type == MessageType::kPing);
      CheckRefused(server.port());
      CheckRefused(server.port());  // a refusal holds no count
      a.reset();                    // one closes: room for one again
      CHECK(PingAnswered(server.port()));
      b.Send(MessageType::kPing, 3, "");  // the admitted ones are served throughout
      CHECK(b.MustRead().header.type == MessageType::kPing);
      server.Stop();
    }
  }
}

}  // namespace
}  // namespace kvatlas::server
