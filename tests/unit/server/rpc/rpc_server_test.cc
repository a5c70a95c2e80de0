// RpcServer and RpcConnection over real loopback sockets, with an in-memory state machine:
// transport behaviour that the handler tests cannot see (direct sends, the write timeout).
#include "server/rpc/rpc_server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "tests/support/in_memory_services.h"

namespace kvatlas::server {
namespace {

using protocol::Frame;
using protocol::MessageType;

using TestServer = testing::InMemoryServices;

// A connected loopback socket with a receive timeout; `rcvbuf` > 0 shrinks its receive
// buffer (before connecting, so that the advertised window stays small).
int Connect(uint16_t port, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

std::string Pings(uint64_t first_id, size_t count) {
  std::string bytes;
  for (size_t i = 0; i < count; ++i) {
    protocol::FrameHeader header;
    header.type = MessageType::kPing;
    header.request_id = first_id + i;
    protocol::AppendFrame(header, "", &bytes);
  }
  return bytes;
}

TEST_SUITE("RpcServer") {
  TEST_CASE("RpcServer: pipelined pings on several io threads are all answered by id") {
    TestServer s;
    RpcServerOptions options;
    options.port = 0;
    options.threads = 2;
    RpcServer server(options, &s.services);
    REQUIRE(server.Start().ok());
    // Two connections land on different io threads (round robin).
    for (int connection = 0; connection < 2; ++connection) {
      const int fd = Connect(server.port());
      const std::string requests = Pings(1, 500);
      REQUIRE(send(fd, requests.data(), requests.size(), MSG_NOSIGNAL) ==
              static_cast<ssize_t>(requests.size()));
      protocol::FrameDecoder decoder;
      std::vector<bool> seen(501, false);
      size_t answers = 0;
      while (answers < 500) {
        char buffer[4096];
        const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
        REQUIRE(n > 0);
        decoder.Feed(std::string_view(buffer, static_cast<size_t>(n)));
        for (;;) {
          Result<std::optional<Frame>> next = decoder.Next();
          REQUIRE(next.has_value());
          if (!next->has_value()) break;
          const Frame& frame = **next;
          CHECK(frame.header.is_response());
          CHECK(frame.header.type == MessageType::kPing);
          REQUIRE(frame.header.request_id >= 1);
          REQUIRE(frame.header.request_id <= 500);
          CHECK_FALSE(seen[frame.header.request_id]);
          seen[frame.header.request_id] = true;
          ++answers;
        }
      }
      close(fd);
    }
    server.Stop();
  }

  TEST_CASE("RpcServer: a client that never reads its answers is closed after write_timeout") {
    TestServer s;
    RpcServerOptions options;
    options.port = 0;
    options.threads = 1;
    options.connection.max_in_flight = 1 << 20;
    options.connection.write_timeout = std::chrono::milliseconds(300);
    RpcServer server(options, &s.services);
    REQUIRE(server.Start().ok());
    const int fd = Connect(server.port(), /*rcvbuf=*/4096);
    // Far more answers than the socket buffers hold: the server's write blocks. Send what
    // the server takes (it stops reading at max_pending_output_bytes).
    const std::string requests = Pings(1, 1 << 20);  // 20 MiB of requests and of answers
    size_t sent = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (sent < requests.size() && std::chrono::steady_clock::now() < give_up) {
      const ssize_t n =
          send(fd, requests.data() + sent, requests.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      } else {
        break;  // the server closed the connection already
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
    // The server has closed: reading ends in EOF or a reset, not in the 10 s receive
    // timeout that a connection still open (and idle after the answers) would give.
    const auto start = std::chrono::steady_clock::now();
    ssize_t n = 0;
    do {
      char buffer[64 << 10];
      n = recv(fd, buffer, sizeof(buffer), 0);
    } while (n > 0);
    const bool timed_out = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    CHECK_FALSE(timed_out);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    close(fd);
    server.Stop();
  }
}

}  // namespace
}  // namespace kvatlas::server
