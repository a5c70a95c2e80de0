// Client::Impl: the transport of kvatlas::Client. One Asio io_context run by one I/O thread
// owns every connection, call and timer, so that state needs no locks: public methods only
// encode on the caller's thread and post the call to the I/O thread.
//
// A call's life: Call() assigns a request id and posts; Submit() (I/O thread) registers it
// with a deadline timer and queues it on a connection; Pump() writes it once the connection
// is open and has an in-flight slot; the answer frame, the deadline, a lost connection or
// shutdown completes it — exactly once, whichever comes first; later events find no call
// under that id and are ignored (a late answer is dropped).
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>  // before Asio: toolchain-notes.md #1
#include <vector>

#include "client/src/endpoint.h"
#include "kvatlas/client/client.h"
#include "kvatlas/common/protocol.h"

namespace kvatlas {

class Client::Impl {
 public:
  // Receives the answer frame (status OK, the request's type) or the call's failure.
  using Done = std::function<void(Result<protocol::Frame>)>;

  Impl(ClientOptions options, std::vector<client::Endpoint> endpoints);
  // Fails pending calls with kUnavailable and joins the I/O thread.
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Starts the I/O thread and runs one connect round on every connection; OK when at least
  // one connection is open, else the last connect error (kUnavailable).
  [[nodiscard]] Status Start();

  // Sends a request of `type` with `payload`; `done` runs exactly once, on the I/O thread.
  // Thread-safe.
  void Call(protocol::MessageType type, std::string_view payload, Client::Timeout timeout,
            Done done);

  size_t OpenConnections() const { return open_connections_.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  using Tcp = boost::asio::ip::tcp;

  struct PendingCall {
    protocol::MessageType type = protocol::MessageType::kPing;
    std::string frame;  // the encoded request; emptied once written
    Done done;
    Clock::time_point deadline;
    std::unique_ptr<boost::asio::steady_timer> timer;
    size_t connection = 0;
  };

  struct Connection {
    explicit Connection(boost::asio::io_context& io) : socket(io), connect_timer(io) {}

    enum class State { kIdle, kConnecting, kOpen };
    State state = State::kIdle;
    Tcp::socket socket;
    boost::asio::steady_timer connect_timer;
    // Bumped on every close: handlers of an older socket see a different value and return.
    uint64_t generation = 0;
    size_t endpoint = 0;            // the endpoint connected to or being tried
    size_t attempts_left = 0;       // endpoints still to try in this connect round
    Clock::time_point retry_after;  // no connect round before this (backoff)
    Clock::duration backoff{};
    Status last_error;
    protocol::FrameDecoder decoder{protocol::kMaxPayloadBytes};
    std::string out;  // frames waiting for the current write to finish
    bool writing = false;
    std::unordered_set<uint64_t> in_flight;  // written, not answered
    std::deque<uint64_t> waiting;            // not written yet (connecting, or no slot)
    std::vector<std::function<void(const Status&)>> on_round_done;
  };

  // All below run on the I/O thread only.
  void Submit(uint64_t id, std::unique_ptr<PendingCall> call);
  void Complete(uint64_t id, Result<protocol::Frame> result);
  size_t PickConnection();
  void Pump(size_t c);
  void StartConnectRound(size_t c);
  void TryEndpoint(size_t c);
  void OnConnectFailed(size_t c, uint64_t generation, const Status& error);
  void OnConnected(size_t c);
  void StartRead(size_t c);
  void OnBytes(size_t c, const char* data, size_t size);
  void StartWrite(size_t c);
  // Closes the socket and fails its in-flight calls with kUnavailable (`reason`).
  void Close(size_t c, const Status& reason);
  void FailWaiting(size_t c, const Status& reason);
  void Shutdown();

  const ClientOptions options_;
  const std::vector<client::Endpoint> endpoints_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<size_t> open_connections_{0};

  // I/O-thread state.
  std::vector<std::unique_ptr<Connection>> connections_;
  std::unordered_map<uint64_t, std::unique_ptr<PendingCall>> calls_;
  size_t next_connection_ = 0;
  bool shut_down_ = false;
};

}  // namespace kvatlas
