#include "client/src/leader_redirect.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "client/src/endpoint.h"
#include "kvatlas/common/not_leader.h"

namespace kvatlas::client {
namespace {

// What is left until `deadline`, at least 1 ms (a call's timeout must be positive).
Client::Timeout TimeoutUntil(LeaderRedirector::Clock::time_point deadline) {
  return std::max(
      std::chrono::duration_cast<Client::Timeout>(deadline - LeaderRedirector::Clock::now()),
      Client::Timeout(1));
}

// How a call fails when its deadline passed while no server named a leader.
Status NoLeaderKnown(const Status& not_leader) {
  return not_leader.WithContext("no leader was known within the call's deadline");
}

}  // namespace

LeaderRedirector::LeaderRedirector(ClientOptions options, Client::Impl* origin)
    : options_(std::move(options)), origin_(origin), worker_([this] { Run(); }) {}

LeaderRedirector::~LeaderRedirector() { Stop(); }

void LeaderRedirector::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // Closing a leader connection completes its calls (kUnavailable) on its I/O thread; a
  // not_leader among them finds stopping_ set and completes at once. Destroyed unlocked.
  std::map<std::string, std::unique_ptr<Client::Impl>> leaders;
  {
    std::lock_guard lock(mu_);
    leaders = std::move(leaders_);
    known_leader_.clear();
  }
  leaders.clear();
}

bool LeaderRedirector::SendToKnownLeader(protocol::MessageType type, std::string_view payload,
                                         Clock::time_point deadline, Client::Impl::Done* done) {
  Client::Impl* leader = nullptr;
  std::string address;
  {
    std::lock_guard lock(mu_);
    if (stopping_ || known_leader_.empty()) return false;
    address = known_leader_;
    leader = leaders_.at(address).get();
  }
  auto call = std::make_shared<Call>();
  call->type = type;
  call->payload = std::string(payload);
  call->deadline = deadline;
  call->sent_to = std::move(address);
  call->done = std::move(*done);
  leader->Call(type, call->payload, TimeoutUntil(deadline), WrapCall(call));
  return true;
}

Client::Impl::Done LeaderRedirector::Wrap(protocol::MessageType type, std::string_view payload,
                                          Clock::time_point deadline, Client::Impl::Done done) {
  auto call = std::make_shared<Call>();
  call->type = type;
  call->payload = std::string(payload);
  call->deadline = deadline;
  call->done = std::move(done);
  return WrapCall(std::move(call));
}

Client::Impl::Done LeaderRedirector::WrapCall(std::shared_ptr<Call> call) {
  return [this, call](Result<protocol::Frame> frame) {
    if (!call->sent_to.empty()) Remember(*call, frame);
    if (frame.has_value() || frame.error().code() != StatusCode::kNotLeader ||
        call->hops_left <= 0 || Clock::now() >= call->deadline) {
      call->done(std::move(frame));
      return;
    }
    const std::optional<protocol::NotLeaderHint> hint =
        protocol::ParseNotLeaderHint(frame.error().message());
    if (!hint) {
      call->done(std::move(frame));
      return;
    }
    if (hint->leader_rpc_address.empty()) {
      RetryLater(std::move(call), frame.error());
      return;
    }
    Status not_leader = frame.error();
    std::string address = hint->leader_rpc_address;
    std::unique_lock lock(mu_);
    if (stopping_) {
      lock.unlock();
      call->done(std::move(not_leader));
      return;
    }
    queue_.emplace(Clock::now(), [this, call, address = std::move(address),
                                  not_leader = std::move(not_leader)](bool run) {
      if (run) {
        Resend(call, address, not_leader);
      } else {
        call->done(not_leader);
      }
    });
    lock.unlock();
    cv_.notify_one();
  };
}

void LeaderRedirector::RetryLater(std::shared_ptr<Call> call, Status not_leader) {
  const Clock::time_point at = Clock::now() + kNoLeaderRetryDelay;
  std::unique_lock lock(mu_);
  // The server that answered knows no leader; it is no leader to remember either.
  if (!call->sent_to.empty() && known_leader_ == call->sent_to) known_leader_.clear();
  if (stopping_ || at >= call->deadline) {
    lock.unlock();
    call->done(NoLeaderKnown(not_leader));
    return;
  }
  queue_.emplace(at, [this, call, not_leader = std::move(not_leader)](bool run) {
    if (!run) {
      call->done(not_leader);
      return;
    }
    // A new call through the client's own path (the remembered leader, else the
    // configured endpoints), with what is left of the deadline and fresh hops. If that
    // attempt runs out of time it reports why it was made: no leader was known (a loaded
    // client or server can take the retry's last milliseconds).
    Client::Impl::Done done = [done = std::move(call->done),
                               not_leader](Result<protocol::Frame> frame) {
      if (!frame.has_value() && frame.error().code() == StatusCode::kDeadlineExceeded) {
        done(NoLeaderKnown(not_leader));
        return;
      }
      done(std::move(frame));
    };
    origin_->Call(call->type, call->payload, TimeoutUntil(call->deadline), std::move(done),
                  /*to_leader=*/true);
  });
  lock.unlock();
  cv_.notify_one();
}

void LeaderRedirector::Remember(const Call& call, const Result<protocol::Frame>& frame) {
  std::lock_guard lock(mu_);
  if (frame.has_value()) {
    known_leader_ = call.sent_to;
  } else if (frame.error().code() == StatusCode::kUnavailable && known_leader_ == call.sent_to) {
    known_leader_.clear();  // gone or unreachable: the configured endpoints again
  }
}

void LeaderRedirector::Resend(std::shared_ptr<Call> call, const std::string& address,
                              const Status& not_leader) {
  Client::Impl* leader = nullptr;
  {
    std::lock_guard lock(mu_);
    const auto it = leaders_.find(address);
    if (it != leaders_.end()) leader = it->second.get();
  }
  if (leader == nullptr) {
    Result<Endpoint> endpoint = ParseEndpoint(address);
    if (!endpoint.has_value()) {
      call->done(not_leader.WithContext("the leader's address is malformed"));
      return;
    }
    ClientOptions options = options_;
    options.endpoints = {address};
    options.connections = 1;
    // The leader is verified as the client's servers are (one TLS context for all).
    auto impl = std::make_unique<Client::Impl>(
        std::move(options), std::vector<Endpoint>{std::move(*endpoint)}, origin_->tls_context());
    // Start fails only when no connection opened; the Impl then keeps retrying with its
    // backoff, so it is kept either way and the call below reports the outcome. It
    // connects without mu_ (up to connect_timeout); only this thread adds leaders.
    (void)impl->Start();
    std::lock_guard lock(mu_);
    leader = leaders_.emplace(address, std::move(impl)).first->second.get();
  }
  const auto remaining = call->deadline - Clock::now();
  if (remaining <= Clock::duration::zero()) {
    call->done(Status(StatusCode::kDeadlineExceeded,
                      "deadline exceeded while following not_leader to " + address));
    return;
  }
  --call->hops_left;
  call->sent_to = address;
  leader->Call(call->type, call->payload, TimeoutUntil(call->deadline), WrapCall(call));
}

void LeaderRedirector::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    // Stopping: every task at once (it fails); else the earliest, once it is due.
    if (!stopping_ && queue_.begin()->first > Clock::now()) {
      cv_.wait_until(lock, queue_.begin()->first);
      continue;
    }
    std::function<void(bool)> task = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    const bool run = !stopping_;
    lock.unlock();
    task(run);
    lock.lock();
  }
}

}  // namespace kvatlas::client
