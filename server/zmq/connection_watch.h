// ConnectionWatch: when the SUB socket of a registered publisher must be recreated
// (docs/engine-events.md §Streams), without sockets. The ingest loop feeds it the socket
// monitor's events and the time.
//
// What libzmq does (4.3): a connection that ends normally (the peer closed, a network
// error) is reported as DISCONNECTED immediately followed by CONNECT_RETRIED, and libzmq
// reconnects by itself (ZMQ_RECONNECT_IVL, doubling up to ZMQ_RECONNECT_IVL_MAX). A
// connection closed for a protocol error — above all a message larger than ZMQ_MAXMSGSIZE —
// is reported as DISCONNECTED alone and is never reconnected: the socket is dead for that
// endpoint. So a DISCONNECTED not followed by CONNECT_RETRIED within `retry_grace` means the
// socket must be recreated. A socket that could not be created at all (EMFILE) is retried
// the same way. Recreations back off: the first after `retry_grace`, each next one without
// a valid message in between waits twice as long as the previous, up to `max_backoff`.
//
// Time is a parameter (steady clock) so tests drive it. Not thread-safe (the ingest
// thread's).
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

namespace kvatlas::server {

class ConnectionWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds retry_grace{100};
    std::chrono::milliseconds initial_backoff{100};
    std::chrono::milliseconds max_backoff{5'000};
  };

  explicit ConnectionWatch(Options options) : options_(options) {}

  // Monitor events, in the order the monitor reports them.
  void OnDisconnected(Clock::time_point now) { dead_since_ = now; }
  void OnConnectRetried() { dead_since_.reset(); }  // libzmq reconnects by itself
  // The socket could not be created or connected: retry like a dead connection.
  void OnSocketFailed(Clock::time_point now) { dead_since_ = now; }
  // A valid message arrived: the publisher is healthy again, backoff starts over.
  void OnMessage() { backoff_ = std::chrono::milliseconds{0}; }

  // Whether the socket is dead for good (a disconnect libzmq will not retry, or no socket).
  bool dead(Clock::time_point now) const {
    return dead_since_ && now - *dead_since_ >= options_.retry_grace;
  }
  // Whether to recreate the socket now: dead, and the backoff since it died has passed.
  bool ShouldRecreate(Clock::time_point now) const {
    return dead(now) && now - *dead_since_ >= options_.retry_grace + backoff_;
  }
  // The socket was recreated (successfully or not: a failure calls OnSocketFailed next).
  void Recreated() {
    dead_since_.reset();
    backoff_ = backoff_.count() == 0 ? options_.initial_backoff
                                     : std::min(backoff_ * 2, options_.max_backoff);
  }
  // The wait added before the next recreation (0 after a valid message).
  std::chrono::milliseconds backoff() const { return backoff_; }

 private:
  Options options_;
  std::optional<Clock::time_point> dead_since_;
  std::chrono::milliseconds backoff_{0};
};

}  // namespace kvatlas::server
