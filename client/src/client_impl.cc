#include "client/src/client_impl.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <future>

#include "client/src/group_router.h"
#include "client/src/leader_redirect.h"
#include "common/internal/thread_name.h"

namespace kvatlas {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

constexpr size_t kReadChunkBytes = 64 * 1024;

Status Unavailable(std::string what) { return Status::Unavailable(std::move(what)); }

}  // namespace

Client::Impl::Impl(ClientOptions options, std::vector<client::Endpoint> endpoints,
                   TlsContextPtr tls)
    : options_(std::move(options)),
      endpoints_(std::move(endpoints)),
      tls_(std::move(tls)),
      work_(io_.get_executor()),
      deadline_timer_(io_) {
  for (size_t i = 0; i < options_.connections; ++i) {
    auto conn = std::make_unique<Connection>(io_);
    conn->backoff = options_.reconnect_backoff_min;
    connections_.push_back(std::move(conn));
  }
}

Result<TlsContextPtr> Client::Impl::MakeTlsContext(const ClientTlsOptions& tls) {
  if (!tls.enabled) return TlsContextPtr();
  Result<TlsContextPtr> context = MakeClientTlsContext({tls.ca_file, tls.cert_file, tls.key_file});
  if (!context.has_value()) return context.error().WithContext("ClientOptions.tls");
  return context;
}

void Client::Impl::FollowLeaders() {
  redirector_ = std::make_unique<client::LeaderRedirector>(options_, this);
}

void Client::Impl::RouteByDirectory() {
  router_ = std::make_unique<client::GroupRouter>(options_, this);
  OnWrongGroup([router = router_.get()] { router->RefreshSoon(); });
}

Client::Impl& Client::Impl::ForContext(const ContextKey& context) {
  return router_ ? router_->For(context) : *this;
}

void Client::Impl::CallInGroup(const ContextKey& context, protocol::MessageType type,
                               std::string_view payload, Client::Timeout timeout, Done done) {
  if (!router_) return Call(type, payload, timeout, std::move(done));
  const auto wait = timeout.count() > 0
                        ? std::chrono::duration_cast<Clock::duration>(timeout)
                        : std::chrono::duration_cast<Clock::duration>(options_.default_deadline);
  router_->Call(context, type, payload, Clock::now() + wait, std::move(done));
}

Client::Impl::~Impl() {
  // The members' connections close first (their calls fail kUnavailable), then retries
  // waiting for a leader connection complete (with their not_leader error).
  if (router_) router_->Stop();
  if (redirector_) redirector_->Stop();
  if (thread_.joinable()) {
    asio::post(io_, [this] { Locked([this] { Shutdown(); }); });
    work_.reset();
    thread_.join();
  }
}

template <typename F>
void Client::Impl::Locked(F&& f) {
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mu_);
    f();
    ready.swap(ready_);
  }
  for (Ready& r : ready) r.done(std::move(r.result));
}

Status Client::Impl::Start() {
  try {
    thread_ = std::thread([this] {
      SetCurrentThreadName("kvatlas-client");
      io_.run();
    });
  } catch (const std::exception& e) {
    return Status::Internal(std::string("cannot start the client I/O thread: ") + e.what());
  }
  // One promise per connection, fulfilled when its first connect round ends.
  std::vector<std::promise<Status>> rounds(connections_.size());
  std::vector<std::future<Status>> results;
  for (auto& p : rounds) results.push_back(p.get_future());
  asio::post(io_, [this, &rounds] {
    Locked([this, &rounds] {
      for (size_t c = 0; c < connections_.size(); ++c) {
        connections_[c]->on_round_done.push_back(
            [&rounds, c](const Status& s) { rounds[c].set_value(s); });
        StartConnectRound(c);
      }
    });
  });
  Status last;
  bool any_open = false;
  for (auto& f : results) {
    Status s = f.get();
    if (s.ok()) {
      any_open = true;
    } else {
      last = std::move(s);
    }
  }
  if (any_open && router_) router_->Start();
  return any_open ? Status::Ok() : last;
}

void Client::Impl::Call(protocol::MessageType type, std::string_view payload,
                        Client::Timeout timeout, Done done, bool to_leader) {
  auto call = std::make_unique<PendingCall>();
  call->type = type;
  call->done = std::move(done);
  call->to_leader = to_leader;
  StartCall(NewRequestId(), payload, timeout, std::move(call));
}

void Client::Impl::CallStream(uint64_t id, protocol::MessageType type, std::string_view payload,
                              Client::Timeout timeout, bool open_ended, std::string cancel,
                              Done done) {
  auto call = std::make_unique<PendingCall>();
  call->type = type;
  call->done = std::move(done);
  call->stream = true;
  call->open_ended = open_ended;
  call->cancel = std::move(cancel);
  StartCall(id, payload, timeout, std::move(call));
}

void Client::Impl::CancelStream(uint64_t id) {
  asio::post(io_, [this, id] {
    Locked([this, id] {
      const auto it = calls_.find(id);
      if (it == calls_.end()) return;  // finished (or failed) already
      PendingCall& call = *it->second;
      if (!connections_[call.connection]->in_flight.contains(id)) {
        // Never sent: the server knows nothing of it.
        Complete(id, Status(StatusCode::kCancelled, "cancelled before it was sent"));
        return;
      }
      if (call.cancel.empty()) return;  // sent already (or not a cancellable stream)
      SendCancel(id, call);
      // The server's final frame completes the call; should it never come, this does.
      if (call.deadline_entry == deadlines_.end()) {
        call.deadline = Clock::now() + options_.default_deadline;
        AddDeadline(id, call);
      }
    });
  });
}

void Client::Impl::SendCancel(uint64_t id, PendingCall& call) {
  if (call.cancel.empty()) return;
  Connection& conn = *connections_[call.connection];
  // Only a request the server may have read (written, on the connection it was written to)
  // has anything to cancel there.
  if (conn.state != Connection::State::kOpen || !conn.in_flight.contains(id)) return;
  protocol::FrameHeader header;
  header.type = call.type;
  header.request_id = id;
  protocol::AppendFrame(header, call.cancel, &conn.out);
  call.cancel.clear();
  StartWrite(call.connection);
}

void Client::Impl::StartCall(uint64_t id, std::string_view payload, Client::Timeout timeout,
                             std::unique_ptr<PendingCall> call) {
  const auto now = Clock::now();
  const protocol::MessageType type = call->type;
  call->deadline =
      now + (timeout.count() > 0
                 ? std::chrono::duration_cast<Clock::duration>(timeout)
                 : std::chrono::duration_cast<Clock::duration>(options_.default_deadline));
  // Writes, heartbeats, load reports and linearizable reads must reach the leader: follow a
  // follower's not_leader answer.
  if (redirector_ &&
      (call->to_leader || type == protocol::MessageType::kIngest ||
       type == protocol::MessageType::kHeartbeat || type == protocol::MessageType::kLoadReport)) {
    // Straight to the leader a redirect found earlier, when there is one.
    if (redirector_->SendToKnownLeader(type, payload, call->deadline, &call->done)) return;
    call->done = redirector_->Wrap(type, payload, call->deadline, std::move(call->done));
  }
  if (payload.size() > options_.max_request_bytes) {
    call->done(Status::PayloadTooLarge("request payload of " + std::to_string(payload.size()) +
                                       " bytes is over max_request_bytes (" +
                                       std::to_string(options_.max_request_bytes) + ")"));
    return;
  }
  // A deadline already past (e.g. 1 µs) fails without a round trip.
  if (Clock::now() >= call->deadline) {
    call->done(Status(StatusCode::kDeadlineExceeded, "deadline exceeded before the call was sent"));
    return;
  }
  protocol::FrameHeader header;
  header.type = type;
  header.request_id = id;
  protocol::AppendFrame(header, payload, &call->frame);
  {
    std::unique_lock lock(mu_);
    if (shut_down_) {
      lock.unlock();
      call->done(Unavailable("the client is closing"));
      return;
    }
    if (TrySendNow(id, call, lock)) return;
    ++queued_;
  }
  asio::post(io_, [this, id, c = std::move(call)]() mutable {
    Locked([&] { Submit(id, std::move(c)); });
  });
}

bool Client::Impl::TrySendNow(uint64_t id, std::unique_ptr<PendingCall>& call,
                              std::unique_lock<std::mutex>& lock) {
  // Calls queued through the I/O thread go first: one thread's calls stay in order.
  if (queued_ > 0) return false;
  const size_t c = PickConnection();
  Connection& conn = *connections_[c];
  if (conn.state != Connection::State::kOpen || !conn.waiting.empty() ||
      conn.in_flight.size() >= options_.max_in_flight) {
    return false;
  }
  call->connection = c;
  AddDeadline(id, *call);
  conn.in_flight.insert(id);
  const std::string frame = std::exchange(call->frame, std::string());
  calls_.emplace(id, std::move(call));
  if (conn.writing || !conn.out.empty()) {
    // A write is in progress (or posted): it takes everything in `out`, in order.
    conn.out.append(frame);
    return true;
  }
  if (conn.stream->is_tls()) {
    // TLS records are made by the stream on the I/O thread: no send from here.
    conn.out.append(frame);
    const uint64_t generation = conn.generation;
    asio::post(io_, [this, c, generation] {
      Locked([this, c, generation] {
        if (connections_[c]->generation == generation) StartWrite(c);
      });
    });
    return true;
  }
  // Claim the socket's write side, then send without mu_, so that the I/O thread can
  // complete other calls meanwhile (a loopback send() runs the receiver's TCP path too).
  // Calls made meanwhile queue behind this frame in `out`; send_mu keeps Close() from
  // closing (and a reconnect from reusing) the descriptor under the send.
  conn.writing = true;
  const uint64_t generation = conn.generation;
  std::unique_lock send_lock(conn.send_mu);
  const int fd = conn.stream->next_layer().native_handle();
  lock.unlock();
  // Non-blocking for this send only (MSG_DONTWAIT): what the kernel does not take at once,
  // and any error, is left to the I/O thread's asynchronous write, which reports errors by
  // closing the connection (failing its calls) on the I/O thread.
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n =
        ::send(fd, frame.data() + sent, frame.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  send_lock.unlock();
  lock.lock();
  if (conn.generation != generation) return true;  // closed meanwhile; Close failed the call
  conn.writing = false;
  if (sent < frame.size()) conn.out.insert(0, frame, sent);  // ahead of frames queued since
  if (!conn.out.empty()) {
    asio::post(io_, [this, c, generation] {
      Locked([this, c, generation] {
        if (connections_[c]->generation == generation) StartWrite(c);
      });
    });
  }
  return true;
}

void Client::Impl::AddDeadline(uint64_t id, PendingCall& call) {
  call.deadline_entry = deadlines_.emplace(call.deadline, id).first;
  if (call.deadline >= timer_expiry_) return;
  // Re-arming cancels the earlier wait (its handler sees operation_aborted). The timer is
  // only touched under mu_, which serialises it as a strand would.
  timer_expiry_ = call.deadline;
  deadline_timer_.expires_at(call.deadline);
  deadline_timer_.async_wait([this](const error_code& ec) {
    if (ec) return;  // re-armed or shut down
    Locked([this] { OnDeadlineTimer(); });
  });
}

void Client::Impl::OnDeadlineTimer() {
  timer_expiry_ = Clock::time_point::max();
  if (shut_down_) return;
  const auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    const auto it = calls_.find(id);
    if (it == calls_.end()) continue;
    it->second->deadline_entry = deadlines_.end();
    Complete(id, Status(StatusCode::kDeadlineExceeded, "deadline exceeded waiting for the answer"));
  }
  if (deadlines_.empty()) return;
  const auto [next, next_id] = *deadlines_.begin();
  timer_expiry_ = next;
  deadline_timer_.expires_at(next);
  deadline_timer_.async_wait([this](const error_code& ec) {
    if (ec) return;
    Locked([this] { OnDeadlineTimer(); });
  });
}

void Client::Impl::Submit(uint64_t id, std::unique_ptr<PendingCall> call) {
  --queued_;
  if (shut_down_) {
    ready_.push_back({std::move(call->done), Unavailable("the client is closing")});
    return;
  }
  if (Clock::now() >= call->deadline) {
    ready_.push_back({std::move(call->done), Status(StatusCode::kDeadlineExceeded,
                                                    "deadline exceeded before the call was sent")});
    return;
  }
  AddDeadline(id, *call);
  const size_t c = PickConnection();
  call->connection = c;
  calls_.emplace(id, std::move(call));
  connections_[c]->waiting.push_back(id);
  Pump(c);
}

// Round robin over open connections; a closed one only when none is open (its next use
// starts a connect round).
size_t Client::Impl::PickConnection() {
  const size_t n = connections_.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t c = (next_connection_ + i) % n;
    if (connections_[c]->state == Connection::State::kOpen) {
      next_connection_ = c + 1;
      return c;
    }
  }
  return next_connection_++ % n;
}

void Client::Impl::Complete(uint64_t id, Result<protocol::Frame> result) {
  const auto it = calls_.find(id);
  if (it == calls_.end()) return;  // already completed (e.g. an answer after the deadline)
  std::unique_ptr<PendingCall> call = std::move(it->second);
  calls_.erase(it);
  if (call->deadline_entry != deadlines_.end()) deadlines_.erase(call->deadline_entry);
  // A stream abandoned by the client (its deadline) may be running on the server: stop it.
  if (call->stream && !result.has_value()) SendCancel(id, *call);
  Connection& conn = *connections_[call->connection];
  const bool had_slot = conn.in_flight.erase(id) > 0;
  ready_.push_back({std::move(call->done), std::move(result)});
  // A freed slot lets a waiting call go; a call that expired while waiting leaves its id in
  // `waiting`, where Pump skips it.
  if (had_slot && !conn.waiting.empty()) Pump(call->connection);
}

void Client::Impl::Pump(size_t c) {
  Connection& conn = *connections_[c];
  if (shut_down_) {
    FailWaiting(c, Unavailable("the client is closing"));
    return;
  }
  switch (conn.state) {
    case Connection::State::kConnecting:
      return;
    case Connection::State::kIdle:
      if (Clock::now() < conn.retry_after) {
        FailWaiting(c, Unavailable("not connected (" + conn.last_error.ToString() +
                                   "); the next connect attempt is backing off"));
      } else {
        StartConnectRound(c);
      }
      return;
    case Connection::State::kOpen:
      break;
  }
  while (!conn.waiting.empty() && conn.in_flight.size() < options_.max_in_flight) {
    const uint64_t id = conn.waiting.front();
    conn.waiting.pop_front();
    const auto it = calls_.find(id);
    if (it == calls_.end()) continue;
    conn.out.append(it->second->frame);
    it->second->frame = std::string();
    conn.in_flight.insert(id);
  }
  StartWrite(c);
}

void Client::Impl::StartConnectRound(size_t c) {
  Connection& conn = *connections_[c];
  conn.state = Connection::State::kConnecting;
  conn.attempts_left = endpoints_.size();
  TryEndpoint(c);
}

void Client::Impl::TryEndpoint(size_t c) {
  Connection& conn = *connections_[c];
  const uint64_t gen = ++conn.generation;
  conn.stream = std::make_shared<Stream>(Tcp::socket(io_), tls_);
  const client::Endpoint& endpoint = endpoints_[conn.endpoint];
  // Numeric hosts (the common case) resolve without a lookup; names block this thread (and,
  // since mu_ is held, callers) for the resolver's duration, which the connect deadline
  // below cannot bound.
  error_code ec;
  auto resolved = Tcp::resolver(io_).resolve(endpoint.host, std::to_string(endpoint.port), ec);
  if (ec) {
    OnConnectFailed(c, gen,
                    Unavailable("cannot resolve " + endpoint.ToString() + ": " + ec.message()));
    return;
  }
  conn.connect_timer.expires_after(options_.connect_timeout);
  conn.connect_timer.async_wait([this, c, gen](const error_code& timer_ec) {
    if (timer_ec) return;
    Locked([this, c, gen] {
      Connection& k = *connections_[c];
      if (k.generation != gen || k.state != Connection::State::kConnecting) return;
      error_code ignored;
      k.stream->next_layer().close(ignored);  // the connect (or handshake) is aborted
    });
  });
  asio::async_connect(
      conn.stream->next_layer(), resolved,
      [this, c, gen, stream = conn.stream](const error_code& connect_ec, const Tcp::endpoint&) {
        Locked([&] {
          Connection& k = *connections_[c];
          if (k.generation != gen) return;
          if (!connect_ec && stream->is_tls()) {
            StartHandshake(c, gen);  // under the same deadline
            return;
          }
          k.connect_timer.cancel();
          if (connect_ec) {
            const std::string why =
                connect_ec == asio::error::operation_aborted ? "timed out" : connect_ec.message();
            OnConnectFailed(
                c, gen,
                Unavailable("cannot connect to " + endpoints_[k.endpoint].ToString() + ": " + why));
            return;
          }
          OnConnected(c);
        });
      });
}

void Client::Impl::StartHandshake(size_t c, uint64_t generation) {
  Connection& conn = *connections_[c];
  std::shared_ptr<Stream> stream = conn.stream;
  const client::Endpoint& endpoint = endpoints_[conn.endpoint];
  const std::string& name =
      options_.tls.server_name.empty() ? endpoint.host : options_.tls.server_name;
  if (Status named = SetTlsPeerName(stream->native_handle(), name); !named.ok()) {
    conn.connect_timer.cancel();
    OnConnectFailed(c, generation, Unavailable(named.message()));
    return;
  }
  stream->tls().async_handshake(
      asio::ssl::stream_base::client, [this, c, generation, stream](const error_code& ec) {
        Locked([&] {
          Connection& k = *connections_[c];
          if (k.generation != generation) return;
          k.connect_timer.cancel();
          if (ec) {
            const std::string why = ec == asio::error::operation_aborted
                                        ? "timed out"
                                        : TlsFailureReason(ec, stream->native_handle());
            OnConnectFailed(c, generation,
                            Unavailable("TLS handshake with " + endpoints_[k.endpoint].ToString() +
                                        " failed: " + why));
            return;
          }
          OnConnected(c);
        });
      });
}

void Client::Impl::OnConnectFailed(size_t c, uint64_t generation, const Status& error) {
  Connection& conn = *connections_[c];
  if (conn.generation != generation) return;
  conn.last_error = error;
  conn.endpoint = (conn.endpoint + 1) % endpoints_.size();
  if (--conn.attempts_left > 0 && !shut_down_) {
    TryEndpoint(c);
    return;
  }
  conn.state = Connection::State::kIdle;
  ++conn.generation;
  error_code ignored;
  conn.stream->next_layer().close(ignored);
  conn.retry_after = Clock::now() + conn.backoff;
  conn.backoff = std::min<Clock::duration>(conn.backoff * 2, options_.reconnect_backoff_max);
  FailWaiting(c, error);
  RoundDone(c, error);
}

void Client::Impl::OnConnected(size_t c) {
  Connection& conn = *connections_[c];
  error_code ignored;
  // Requests are small and latency-bound: never wait for a delayed ACK.
  conn.stream->next_layer().set_option(Tcp::no_delay(true), ignored);
  conn.state = Connection::State::kOpen;
  conn.backoff = options_.reconnect_backoff_min;
  conn.decoder = protocol::FrameDecoder(protocol::kMaxPayloadBytes);
  conn.head.clear();
  conn.read_buffer = std::make_shared<std::vector<char>>(kReadChunkBytes);
  conn.out.clear();
  conn.writing = false;
  open_connections_.fetch_add(1, std::memory_order_relaxed);
  if (!options_.token.empty()) {
    // First on the wire; the calls pipeline behind it (the server reads frames in order).
    protocol::FrameHeader header;
    header.type = protocol::MessageType::kAuth;
    header.request_id = kAuthRequestId;
    protocol::AppendFrame(header, protocol::EncodeAuthRequest({options_.token}), &conn.out);
    conn.authenticating = true;
  } else {
    RoundDone(c, Status::Ok());
  }
  StartRead(c);
  Pump(c);
}

void Client::Impl::RoundDone(size_t c, const Status& status) {
  for (auto& f : std::exchange(connections_[c]->on_round_done, {})) f(status);
}

void Client::Impl::OnAuthFrame(size_t c, const protocol::Frame& frame) {
  Connection& conn = *connections_[c];
  Status status;
  if (frame.header.status != StatusCode::kOk) {
    status = protocol::DecodeErrorPayload(frame.header.status, frame.payload);
  } else if (frame.header.type != protocol::MessageType::kAuth || !conn.authenticating) {
    return;  // nothing that concerns the connection
  } else if (Result<protocol::AuthAnswer> answer = protocol::DecodeAuthAnswer(frame.payload);
             !answer) {
    status = Status::Corruption("the server's kAuth answer: " + answer.error().message());
  }
  conn.authenticating = false;
  if (status.ok()) {
    RoundDone(c, status);
    return;
  }
  // A refused token is not retried at once: the waiting calls fail with the server's
  // answer, and new ones only after the reconnect backoff.
  FailWaiting(c, status);
  Close(c, status);
  conn.retry_after = Clock::now() + conn.backoff;
  conn.backoff = std::min<Clock::duration>(conn.backoff * 2, options_.reconnect_backoff_max);
  RoundDone(c, status);
}

void Client::Impl::StartRead(size_t c) {
  Connection& conn = *connections_[c];
  const uint64_t gen = conn.generation;
  // The buffer belongs to the connection's generation (one allocation per connect, not per
  // read); the handler holds it, so a handler finishing after a reconnect never touches the
  // new socket's state.
  std::shared_ptr<std::vector<char>> buffer = conn.read_buffer;
  conn.stream->async_read_some(asio::buffer(*buffer), [this, c, gen, buffer, stream = conn.stream](
                                                          const error_code& ec, size_t n) {
    if (ec) {
      Locked([&] {
        if (connections_[c]->generation != gen) return;
        Close(c, Unavailable(ec == asio::error::eof ? "the server closed the connection"
                                                    : "connection lost: " + ec.message()));
      });
      return;
    }
    OnBytes(c, gen, buffer->data(), n);
  });
}

void Client::Impl::OnBytes(size_t c, uint64_t generation, const char* data, size_t size) {
  Connection& conn = *connections_[c];
  // `generation` and the decoder change only on this thread: no lock needed to read them.
  if (conn.generation != generation) return;
  conn.decoder.Feed(std::string_view(data, size));
  constexpr std::string_view kHttp = "HTTP/";
  if (conn.head.size() < kHttp.size()) {
    conn.head.append(data, std::min(size, kHttp.size() - conn.head.size()));
  }
  std::vector<protocol::Frame> frames;
  Status malformed;
  bool http_peer = false;
  while (true) {
    Result<std::optional<protocol::Frame>> next = conn.decoder.Next();
    if (!next) {
      http_peer = conn.head == kHttp;
      malformed = Unavailable("malformed frame from the server: " + next.error().ToString());
      break;
    }
    if (!next->has_value()) break;
    frames.push_back(std::move(**next));
  }
  Locked([&] {
    if (conn.generation != generation) return;
    const auto now = Clock::now();
    for (protocol::Frame& frame : frames) {
      const uint64_t id = frame.header.request_id;
      if (id == kAuthRequestId) {
        OnAuthFrame(c, frame);
        if (conn.generation != generation) return;  // closed
        continue;
      }
      const auto it = calls_.find(id);
      if (it == calls_.end() || it->second->connection != c) continue;  // late: deadline passed
      if (now >= it->second->deadline) {
        // The deadline timer has not run yet: the answer is late all the same.
        Complete(id,
                 Status(StatusCode::kDeadlineExceeded, "deadline exceeded waiting for the answer"));
      } else {
        // The server closes a connection once it refused a call for access control (no or
        // a bad token: docs/protocol.md §Transport). Closing it here first makes a call
        // made after this answer open a new connection, not fail on the closing one.
        const bool refused = frame.header.status == StatusCode::kUnauthenticated;
        Deliver(id, std::move(frame));
        if (refused) {
          Close(c, Unavailable("the server refused a call for access control and closed the "
                               "connection"));
          return;
        }
      }
    }
    if (http_peer) {
      malformed = Unavailable(endpoints_[conn.endpoint].ToString() +
                              " answered in HTTP: this looks like a REST (HTTP) port, not the "
                              "binary protocol's (kvatlas-server --rpc-listen, 7071 by default)");
    }
    if (!malformed.ok()) {
      Close(c, malformed);
      return;
    }
    if (conn.generation == generation) StartRead(c);
  });
}

void Client::Impl::Deliver(uint64_t id, protocol::Frame frame) {
  PendingCall& call = *calls_.at(id);
  if (frame.header.status == StatusCode::kWrongGroup && on_wrong_group_) on_wrong_group_();
  const bool ok = frame.header.status == StatusCode::kOk;
  if (ok && (!frame.header.is_response() || frame.header.type != call.type)) {
    Complete(id, Status::Corruption("the server answered a request of type " +
                                    std::to_string(static_cast<int>(call.type)) +
                                    " with a frame of type " +
                                    std::to_string(static_cast<int>(frame.header.type))));
    return;
  }
  if (!call.stream) {
    if (ok) {
      Complete(id, std::move(frame));
    } else {
      Complete(id, protocol::DecodeErrorPayload(frame.header.status, frame.payload));
    }
    return;
  }
  // A stream's frames all go to `done`, error answers included (a watch's carries hints).
  if (protocol::IsFinalStreamFrame(frame.header.status, frame.payload)) {
    Complete(id, std::move(frame));
    return;
  }
  if (call.open_ended) {
    // The first frame: from now on the stream runs until it ends (a deadline set later by
    // CancelStream stays).
    call.open_ended = false;
    if (call.deadline_entry != deadlines_.end()) deadlines_.erase(call.deadline_entry);
    call.deadline_entry = deadlines_.end();
    call.deadline = Clock::time_point::max();
  }
  ready_.push_back({call.done, std::move(frame)});
}

void Client::Impl::StartWrite(size_t c) {
  Connection& conn = *connections_[c];
  if (conn.writing || conn.out.empty()) return;
  conn.writing = true;
  const uint64_t gen = conn.generation;
  // Frames queued while this write is in progress accumulate in `out` and go in one write.
  auto buffer = std::make_shared<std::string>(std::move(conn.out));
  conn.out = std::string();
  asio::async_write(*conn.stream, asio::buffer(*buffer),
                    [this, c, gen, buffer, stream = conn.stream](const error_code& ec, size_t) {
                      Locked([&] {
                        Connection& k = *connections_[c];
                        if (k.generation != gen) return;
                        k.writing = false;
                        if (ec) {
                          Close(c, Unavailable("connection lost while sending: " + ec.message()));
                          return;
                        }
                        StartWrite(c);
                      });
                    });
}

void Client::Impl::Close(size_t c, const Status& reason) {
  Connection& conn = *connections_[c];
  if (conn.state != Connection::State::kOpen) return;
  ++conn.generation;
  error_code ignored;
  {
    // Waits out a caller's send() in progress (TrySendNow) before the descriptor goes.
    std::lock_guard send_lock(conn.send_mu);
    conn.stream->next_layer().close(ignored);
  }
  conn.state = Connection::State::kIdle;
  conn.last_error = reason;
  // The server went away: the next call reconnects at once (backoff only after a round
  // in which no endpoint answered).
  conn.retry_after = Clock::now();
  conn.out.clear();
  conn.writing = false;
  open_connections_.fetch_sub(1, std::memory_order_relaxed);
  if (conn.authenticating) {
    // Closed before the kAuth answer: the connect round ends with the reason.
    conn.authenticating = false;
    RoundDone(c, reason);
  }
  const std::vector<uint64_t> lost(conn.in_flight.begin(), conn.in_flight.end());
  conn.in_flight.clear();
  for (const uint64_t id : lost) Complete(id, reason);
  // Calls not written yet were never seen by the server: they may go on a new connection.
  if (!conn.waiting.empty() && !shut_down_) Pump(c);
}

void Client::Impl::FailWaiting(size_t c, const Status& reason) {
  Connection& conn = *connections_[c];
  while (!conn.waiting.empty()) {
    const uint64_t id = conn.waiting.front();
    conn.waiting.pop_front();
    Complete(id, reason);
  }
}

void Client::Impl::Shutdown() {
  shut_down_ = true;
  const Status closing = Unavailable("the client is closing");
  for (size_t c = 0; c < connections_.size(); ++c) {
    Connection& conn = *connections_[c];
    Close(c, closing);
    ++conn.generation;
    conn.state = Connection::State::kIdle;
    error_code ignored;
    conn.stream->next_layer().close(ignored);
    conn.connect_timer.cancel();
    FailWaiting(c, closing);
  }
  std::vector<uint64_t> rest;
  for (const auto& [id, call] : calls_) rest.push_back(id);
  for (const uint64_t id : rest) Complete(id, closing);
  deadline_timer_.cancel();
  timer_expiry_ = Clock::time_point::max();
  io_.stop();  // handlers still queued only hold buffers and check generations
}

}  // namespace kvatlas
