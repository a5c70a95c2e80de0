// LeaderRedirector: follows `not_leader` answers (docs/protocol.md §Not leader). A write
// sent to a follower is answered not_leader with the leader's binary-protocol address in
// the error payload; the redirector connects to that address (one Client::Impl per
// leader address, kept for later redirects) and sends the call again there, at most
// kMaxHops times and within the call's original deadline. What it cannot follow (no
// address in the answer, hops or deadline used up, the leader unreachable) completes the
// call with the not_leader error (or the connect error) as is.
//
// Thread-safety: Wrap() from any thread. Connecting blocks (up to connect_timeout), so it
// runs on the redirector's own worker thread, never on a client's I/O thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "client/src/client_impl.h"

namespace kvatlas::client {

class LeaderRedirector {
 public:
  static constexpr int kMaxHops = 3;
  using Clock = std::chrono::steady_clock;

  // `options` are those of the client (its endpoints are ignored).
  explicit LeaderRedirector(ClientOptions options);
  ~LeaderRedirector();  // Stop()s
  LeaderRedirector(const LeaderRedirector&) = delete;
  LeaderRedirector& operator=(const LeaderRedirector&) = delete;

  // `done` for a call of `type` with `payload` whose deadline is `deadline`: on a not_leader
  // answer naming the leader, retries the call there; otherwise passes the result on.
  [[nodiscard]] Client::Impl::Done Wrap(protocol::MessageType type, std::string_view payload,
                                        Clock::time_point deadline, Client::Impl::Done done);

  // Joins the worker (queued retries complete with their not_leader error) and closes the
  // leader connections (their calls fail with kUnavailable). Idempotent. After it, retries
  // are not attempted.
  void Stop();

 private:
  struct Call {
    protocol::MessageType type;
    std::string payload;
    Clock::time_point deadline;
    int hops_left = kMaxHops;
    Client::Impl::Done done;
  };

  Client::Impl::Done WrapCall(std::shared_ptr<Call> call);
  // Worker thread: connects to `address` (or reuses the connection) and resends `call`.
  void Resend(std::shared_ptr<Call> call, const std::string& address, const Status& not_leader);
  void Run();

  const ClientOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<std::function<void(bool run)>> queue_;               // run=false: stopping, fail it
  std::map<std::string, std::unique_ptr<Client::Impl>> leaders_;  // worker thread only
  std::thread worker_;
};

}  // namespace kvatlas::client
