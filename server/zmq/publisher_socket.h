// PublisherSocket: the SUB socket kvatlas connects to one registered publisher, with a
// socket monitor that tells when the connection is confirmed (a completed ZMTP handshake)
// or lost, and when libzmq has closed it for good, and the recreation of the socket then
// (ConnectionWatch, connection_watch.h). It keeps the stream's `connecting` state
// (stream_stats.h): connecting from Open() and from a lost connection, until the handshake
// or a message. Also the SUB socket options every ZMQ ingest socket shares. Owned and used
// by the ingest thread only.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "server/zmq/connection_watch.h"
#include "server/zmq/stream_stats.h"

namespace kvatlas::server {

// Largest message a SUB or DEALER socket accepts; libzmq closes the connection of a peer
// that sends a bigger one (a protocol error, which it never reconnects).
inline constexpr int64_t kMaxMessageBytes = 64 << 20;

struct SubSocketOptions {
  int receive_hwm = 100'000;
  // libzmq's own reconnection after a connection ends normally: first after the interval,
  // then doubling up to the maximum (a publisher that is gone costs one attempt per max).
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{5'000};
};

// A SUB socket subscribed to `topic` with linger 0, the receive HWM, the message size
// limit and the reconnect backoff. Throws zmq::error_t (EMFILE when out of sockets).
std::unique_ptr<zmq::socket_t> MakeSubSocket(zmq::context_t& context, const std::string& topic,
                                             const SubSocketOptions& options);

class PublisherSocket {
 public:
  using Clock = ConnectionWatch::Clock;

  // Nothing is opened before Open(). `view` (its counters and error) must outlive this.
  PublisherSocket(zmq::context_t* context, std::string endpoint, std::string topic,
                  SubSocketOptions options, StreamView* view);
  ~PublisherSocket();
  PublisherSocket(const PublisherSocket&) = delete;
  PublisherSocket& operator=(const PublisherSocket&) = delete;

  // Creates the SUB socket and its monitor and connects. On failure (EMFILE, ...) the
  // stream's error says why, the sockets are null, and Tick() retries with backoff.
  void Open(Clock::time_point now);

  zmq::socket_t* sub() { return sub_.get(); }
  zmq::socket_t* monitor() { return monitor_.get(); }

  // The monitor socket is readable: reads its events into the watch and the stream's state.
  void DrainMonitor(Clock::time_point now);
  // A valid message came in: the stream is healthy (and connected).
  void OnMessage();
  // Recreates the socket when the watch says so (counted in `reconnects`). Every round.
  void Tick(Clock::time_point now);

 private:
  void Close();
  // The stream has no confirmed connection (again): connecting, since now unless it already
  // was.
  void BeginConnecting();
  void Connected();

  zmq::context_t* context_;
  std::string endpoint_;
  std::string topic_;
  SubSocketOptions options_;
  StreamView* view_;
  ConnectionWatch watch_;
  std::unique_ptr<zmq::socket_t> sub_;
  std::unique_ptr<zmq::socket_t> monitor_;
};

}  // namespace kvatlas::server
