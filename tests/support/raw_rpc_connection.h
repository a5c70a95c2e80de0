// RawRpcConnection: a blocking binary-protocol connection for tests that send frames the
// client library never sends (malformed, pipelined by hand, watches read frame by frame).
// Every read is bounded by a 10 s timeout: a hung server fails the test instead of hanging it.
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "kvatlas/common/protocol.h"

namespace kvatlas::testing {

class RawRpcConnection {
 public:
  // Connects to 127.0.0.1:`port`. `rcvbuf` > 0 shrinks the receive buffer first (a small
  // TCP window, for backpressure tests).
  explicit RawRpcConnection(int port, int rcvbuf = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    const timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawRpcConnection() { close(fd_); }
  RawRpcConnection(const RawRpcConnection&) = delete;
  RawRpcConnection& operator=(const RawRpcConnection&) = delete;

  void SendRaw(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      REQUIRE(n > 0);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

  // Sends what the socket takes without blocking, waiting up to `patience` for room each
  // time it is full; returns the bytes sent (fewer when the server stops reading, or closed
  // the connection). For filling a connection that the server does not read.
  size_t SendSome(std::string_view bytes, std::chrono::milliseconds patience) {
    size_t sent = 0;
    auto give_up = std::chrono::steady_clock::now() + patience;
    while (sent < bytes.size() && std::chrono::steady_clock::now() < give_up) {
      const ssize_t n =
          send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        give_up = std::chrono::steady_clock::now() + patience;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      } else {
        break;
      }
    }
    return sent;
  }

  // Appends one request frame to `out` (for several frames in one send).
  static void Append(protocol::MessageType type, uint64_t id, std::string_view payload,
                     std::string* out) {
    protocol::FrameHeader header;
    header.type = type;
    header.request_id = id;
    protocol::AppendFrame(header, payload, out);
  }

  void Send(protocol::MessageType type, uint64_t id, std::string_view payload) {
    std::string bytes;
    Append(type, id, payload, &bytes);
    SendRaw(bytes);
  }

  // The next frame; nullopt when the server closed the connection. Throws on a timeout
  // (doctest reports it).
  std::optional<protocol::Frame> Read() {
    for (;;) {
      Result<std::optional<protocol::Frame>> next = decoder_.Next();
      REQUIRE(next.has_value());
      if (*next) return std::move(**next);
      char buffer[64 << 10];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n == 0) return std::nullopt;
      if (n < 0) throw std::runtime_error("recv failed or timed out");
      decoder_.Feed(std::string_view(buffer, static_cast<size_t>(n)));
    }
  }

  // The next frame, which must be there and be a response.
  protocol::Frame MustRead() {
    std::optional<protocol::Frame> frame = Read();
    REQUIRE(frame.has_value());
    CHECK(frame->header.is_response());
    return std::move(*frame);
  }

 private:
  int fd_ = -1;
  protocol::FrameDecoder decoder_{protocol::kMaxPayloadBytes};
};

}  // namespace kvatlas::testing
