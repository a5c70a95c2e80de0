// LeaderRedirector: follows `not_leader` answers (docs/protocol.md §Not leader). A write
// sent to a follower is answered not_leader with the leader's binary-protocol address in
// the error payload; the redirector connects to that address (one Client::Impl per
// leader address, kept for later redirects) and sends the call again there, at most
// kMaxHops times and within the call's original deadline. An answer that names no leader
// address (an election is under way, or the new leader has not announced itself yet) is
// retried every kNoLeaderRetryDelay as a new call through the client (`origin`: the
// remembered leader, else the configured endpoints), with what is left of the deadline;
// nothing was applied, so resending is safe. What it cannot follow (hops or deadline used
// up, the leader unreachable) completes the call with the not_leader error (or the
// connect error) as is.
//
// Leader memory: once a resent call succeeds at an address, later writes go to that
// leader directly (SendToKnownLeader) instead of paying a follower's not_leader round trip
// each. A known leader that answers not_leader naming another is followed as above (and
// the new one remembered once it answers); one that cannot be reached (kUnavailable) is
// forgotten, and that call fails as any call on a lost connection does — it is not resent,
// since the server may have applied it.
//
// Thread-safety: Wrap() from any thread. Connecting blocks (up to connect_timeout), so it
// runs on the redirector's own worker thread, never on a client's I/O thread.
#pragma once

#include <chrono>
#include <condition_variable>
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
  static constexpr std::chrono::milliseconds kNoLeaderRetryDelay{25};
  using Clock = std::chrono::steady_clock;

  // `options` are those of the client (its endpoints are ignored); `origin` is the client
  // that owns this redirector (it Stop()s it before it goes), used to retry a call whose
  // answer named no leader.
  LeaderRedirector(ClientOptions options, Client::Impl* origin);
  ~LeaderRedirector();  // Stop()s
  LeaderRedirector(const LeaderRedirector&) = delete;
  LeaderRedirector& operator=(const LeaderRedirector&) = delete;

  // `done` for a call of `type` with `payload` whose deadline is `deadline`: on a not_leader
  // answer naming the leader, retries the call there; otherwise passes the result on.
  [[nodiscard]] Client::Impl::Done Wrap(protocol::MessageType type, std::string_view payload,
                                        Clock::time_point deadline, Client::Impl::Done done);

  // Sends the call to the remembered leader, if there is one, taking `*done` (which then
  // completes as a Wrap()ped call's would); false, leaving `*done`, when no leader is known.
  // Never blocks: the leader's connection exists already.
  bool SendToKnownLeader(protocol::MessageType type, std::string_view payload,
                         Clock::time_point deadline, Client::Impl::Done* done);

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
    std::string sent_to;  // the leader address it was last sent to; empty: the endpoints
    Client::Impl::Done done;
  };

  Client::Impl::Done WrapCall(std::shared_ptr<Call> call);
  // Remembers the leader `call` was sent to when it acknowledged; forgets it when it could
  // not be reached.
  void Remember(const Call& call, const Result<protocol::Frame>& frame);
  // Queues `call` to be sent again through origin_ after kNoLeaderRetryDelay, or fails it
  // with `not_leader` when that would pass its deadline.
  void RetryLater(std::shared_ptr<Call> call, Status not_leader);
  // Worker thread: connects to `address` (or reuses the connection) and resends `call`.
  void Resend(std::shared_ptr<Call> call, const std::string& address, const Status& not_leader);
  void Run();

  const ClientOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Client::Impl* const origin_;
  // Tasks by the time they are due; run=false: stopping, fail it.
  std::multimap<Clock::time_point, std::function<void(bool run)>> queue_;
  // Connections by leader address: added by the worker thread, used by callers too, erased
  // only by Stop() (after the worker is joined).
  std::map<std::string, std::unique_ptr<Client::Impl>> leaders_;
  std::string known_leader_;  // a key of leaders_ whose server last acknowledged a call
  std::thread worker_;
};

}  // namespace kvatlas::client
