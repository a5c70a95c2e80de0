// ListenSocket: a listener's TCP socket, bound before the server recovers its state, so
// that an address in use (or not this machine's, or not permitted) fails the start before
// the data directory is touched; the socket is then held, bound but not listening (a
// client connecting meanwhile is refused, as before the server bound), until the listener
// takes it over (HttpServerOptions::listen_fd, RpcServerOptions::listen_fd,
// RaftOptions::listen_fd), which listen on a duplicate of it.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvatlas/common/result.h"

namespace kvatlas::server {

class ListenSocket {
 public:
  ListenSocket() = default;
  // Owns `fd`, bound to `port`.
  ListenSocket(int fd, uint16_t port) : fd_(fd), port_(port) {}
  ~ListenSocket() { Close(); }
  ListenSocket(ListenSocket&& other) noexcept : fd_(other.fd_), port_(other.port_) {
    other.fd_ = -1;
  }
  ListenSocket& operator=(ListenSocket&& other) noexcept;
  ListenSocket(const ListenSocket&) = delete;
  ListenSocket& operator=(const ListenSocket&) = delete;

  // The bound socket; -1 when there is none.
  int fd() const { return fd_; }
  // The bound port (the one picked when the address asked for port 0).
  uint16_t port() const { return port_; }
  // Closes the socket (once its listener listens on its own duplicate).
  void Close();

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// Binds a TCP socket (SO_REUSEADDR, as the listeners bind; not listening) to `address`
// ("HOST:PORT", "[V6]:PORT"; a host name is resolved and its first address used;
// `ipv4_only` for the raft transport, which takes numeric IPv4 addresses only). `what`
// names the setting, and errors say what the system said: "--http-listen 127.0.0.1:7070:
// address already in use". kInvalidArgument for an address that does not parse or
// resolve, kUnavailable when the bind fails.
[[nodiscard]] Result<ListenSocket> BindListenSocket(std::string_view what,
                                                    const std::string& address,
                                                    bool ipv4_only = false);

// Checks that the ZMQ bind endpoint `endpoint` can be bound now by binding it and closing
// the socket again (ZMQ binds its own socket later, once the state is recovered): only
// "tcp://HOST:PORT" endpoints whose host is "*" or an IP address and whose port is a
// number other than 0; other endpoints (ipc, interface names, "*" ports) are left to ZMQ.
// Errors as BindListenSocket's.
[[nodiscard]] Status ProbeZmqBind(std::string_view what, const std::string& endpoint);

// What a failed bind's errno means, in words ("address already in use", "not an address of
// this machine"), for the errors above.
[[nodiscard]] std::string BindErrorText(int error);

}  // namespace kvatlas::server
