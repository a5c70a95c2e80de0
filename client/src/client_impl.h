// Client::Impl: the transport of kvatlas::Client. One Asio io_context run by one I/O thread
// reads every connection and runs every timer and asynchronous write; all call and
// connection state is guarded by one mutex, so that a caller can send its own request.
//
// A call's life: Call() (caller's thread) encodes the frame, assigns a request id and
// registers the call with its deadline. On the fast path — a connection open, nothing
// queued before it, a free in-flight slot and no write in progress — the caller writes the
// frame itself with a non-blocking send(), so a call crosses threads once (the answer's
// completion), not twice. Otherwise it is queued: Submit() (I/O thread) puts it on a
// connection, Pump() writes it once the connection is open and has a slot. The answer frame,
// the deadline, a lost connection or shutdown completes it — exactly once, whichever comes
// first; later events find no call under that id and are ignored (a late answer is dropped).
//
// Completions (`done`) run on the I/O thread, never under the mutex: the I/O thread's
// handlers collect them in `ready_` and run them after unlocking, so decoding an answer
// never holds up callers.
//
// Streams (kWatch, kSnapshot; CallStream) are calls answered by several frames: `done` runs
// for each, in order, and the call stays registered (holding its in-flight slot) until the
// final one (protocol::IsFinalStreamFrame), a failure or shutdown.
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
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>  // before Asio: toolchain-notes.md #1
#include <vector>

#include "client/src/endpoint.h"
#include "common/internal/tls.h"
#include "common/internal/tls_stream.h"
#include "kvatlas/client/client.h"
#include "kvatlas/common/protocol.h"

namespace kvatlas {
namespace client {
class GroupRouter;
class LeaderRedirector;
}  // namespace client

class KVATLAS_NO_EXPORT Client::Impl {
 public:
  // Receives the answer frame (status OK, the request's type) or the call's failure.
  using Done = std::function<void(Result<protocol::Frame>)>;

  // `tls`: the context of ClientOptions::tls (MakeTlsContext), null for plaintext.
  Impl(ClientOptions options, std::vector<client::Endpoint> endpoints, TlsContextPtr tls);
  // Fails pending calls with kUnavailable and joins the I/O thread.
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Starts the I/O thread and runs one connect round on every connection; OK when at least
  // one connection is open, else the last connect error (kUnavailable).
  [[nodiscard]] Status Start();

  // Makes writes (kIngest) follow not_leader answers to the leader (leader_redirect.h).
  // Call before Start. Impls that the redirector itself opens to leaders do not call it:
  // the redirector counts their hops.
  void FollowLeaders();

  // Makes reads of a context go to a server that holds its group (group_router.h), once
  // Start has fetched the directory. Call before Start.
  void RouteByDirectory();
  // Runs `hook` (on the I/O thread, never blocking) when a server answers a call
  // wrong_group. Call before Start.
  void OnWrongGroup(std::function<void()> hook) { on_wrong_group_ = std::move(hook); }
  // The connection for a read of `context`: a member of its group when routing by the
  // directory, else this one.
  [[nodiscard]] Impl& ForContext(const ContextKey& context);
  // A read of `context` sent by the directory, a wrong_group answer sent again once by the
  // refreshed directory (GroupRouter::Call); Call() when not routing by the directory.
  void CallInGroup(const ContextKey& context, protocol::MessageType type, std::string_view payload,
                   Client::Timeout timeout, Done done);

  // Sends a request of `type` with `payload`; `done` runs exactly once, on the I/O thread
  // (or at once on the caller's thread when the call fails before it is registered: too
  // large, its deadline already past, or the client is closing). `to_leader`: the request
  // follows not_leader answers to the leader, as writes always do (a linearizable read).
  // Thread-safe.
  void Call(protocol::MessageType type, std::string_view payload, Client::Timeout timeout,
            Done done, bool to_leader = false);

  // An id for CallStream, so that the caller knows it before any frame can arrive.
  uint64_t NewRequestId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  // A stream call under request id `id` (from NewRequestId): `done` runs for every answer
  // frame in order, on the I/O thread, error answers included (as frames with their
  // status), then no more after the final frame, or runs once with the call's failure (as
  // Call's). `open_ended`: the deadline applies only until the first frame (a watch runs
  // until it ends). `cancel` is the payload that cancels the stream on the server (empty:
  // none); it is sent by CancelStream, and when the call is abandoned after its request was
  // sent (deadline passed). Thread-safe.
  void CallStream(uint64_t id, protocol::MessageType type, std::string_view payload,
                  Client::Timeout timeout, bool open_ended, std::string cancel, Done done);

  // Cancels the stream call `id`: a request not yet sent completes at once (kCancelled);
  // else its cancel payload is sent under its id, and the server's final frame (or
  // default_deadline) completes it. No effect on a finished call. Thread-safe, asynchronous.
  void CancelStream(uint64_t id);

  size_t OpenConnections() const { return open_connections_.load(std::memory_order_relaxed); }

  // The TLS context of ClientOptions::tls, or null when it is not enabled; kInvalidArgument
  // naming an unreadable or malformed file.
  [[nodiscard]] static Result<TlsContextPtr> MakeTlsContext(const ClientTlsOptions& tls);
  const TlsContextPtr& tls_context() const { return tls_; }

 private:
  using Clock = std::chrono::steady_clock;
  using Tcp = boost::asio::ip::tcp;
  // A connection's stream, shared with the handlers of its operations: a TLS stream must
  // outlive them, and a reconnect makes a new one while the old one's are completing.
  using Stream = MaybeTlsStream<Tcp::socket>;

  using Deadlines = std::set<std::pair<Clock::time_point, uint64_t>>;

  // The request id of a connection's kAuth frame (calls' ids start at 1); the server also
  // uses it for the error frame that ends a connection whose token was removed.
  static constexpr uint64_t kAuthRequestId = 0;

  struct PendingCall {
    protocol::MessageType type = protocol::MessageType::kPing;
    std::string frame;  // the encoded request; emptied once written
    Done done;
    bool stream = false;      // CallStream: several answer frames
    bool to_leader = false;   // follows not_leader answers (writes always do)
    bool open_ended = false;  // a stream whose deadline ends with its first frame (not yet)
    std::string cancel;       // a stream's cancel payload; empty once sent (or none)
    Clock::time_point deadline;
    Deadlines::iterator deadline_entry;  // in deadlines_ once registered
    size_t connection = 0;
  };

  // A completion to run once the mutex is released.
  struct Ready {
    Done done;
    Result<protocol::Frame> result;
  };

  struct Connection {
    explicit Connection(boost::asio::io_context& io)
        : stream(std::make_shared<Stream>(Tcp::socket(io))), connect_timer(io) {}

    enum class State { kIdle, kConnecting, kOpen };
    State state = State::kIdle;
    std::shared_ptr<Stream> stream;  // replaced on every connect attempt
    boost::asio::steady_timer connect_timer;
    // Bumped on every close: handlers of an older socket see a different value and return.
    uint64_t generation = 0;
    size_t endpoint = 0;            // the endpoint connected to or being tried
    size_t attempts_left = 0;       // endpoints still to try in this connect round
    Clock::time_point retry_after;  // no connect round before this (backoff)
    Clock::duration backoff{};
    Status last_error;
    protocol::FrameDecoder decoder{protocol::kMaxPayloadBytes};  // I/O thread only
    // The first bytes the server sent (up to 5), I/O thread only: "HTTP/" is a REST port's
    // answer to the binary protocol, reported as such instead of as a bad frame.
    std::string head;
    std::string out;  // frames waiting for the current (or a posted) write
    // An async_write, or a caller's send(), is in progress: nobody else may write.
    bool writing = false;
    // Held by a caller across its send() (without mu_), and by Close() around closing the
    // socket. Order: mu_ before send_mu.
    std::mutex send_mu;
    std::unordered_set<uint64_t> in_flight;  // written, not answered
    std::deque<uint64_t> waiting;            // not written yet (connecting, or no slot)
    // Called when the connect round ends: once the connection is open and, with a token,
    // once the server accepted it (kAuth answered).
    std::vector<std::function<void(const Status&)>> on_round_done;
    bool authenticating = false;  // the kAuth frame was sent and not answered yet
    std::shared_ptr<std::vector<char>> read_buffer;  // of the current generation
  };

  // Call and CallStream: the deadline, size checks and registration of `call` under `id`.
  void StartCall(uint64_t id, std::string_view payload, Client::Timeout timeout,
                 std::unique_ptr<PendingCall> call);
  // A frame of a registered call, under mu_: completes it or, for a stream's frame that
  // is not final, hands the frame to its `done` and keeps it.
  void Deliver(uint64_t id, protocol::Frame frame);
  // Sends the cancel frame of stream call `id` if it has one and its request was sent.
  void SendCancel(uint64_t id, PendingCall& call);

  // Runs `f` under mu_ (on the I/O thread), then the completions it produced, unlocked.
  template <typename F>
  void Locked(F&& f);
  // Caller's thread, `lock` (on mu_) held: registers `call` and writes it, if the fast path
  // applies (see the file comment); the send itself runs with `lock` released. True: the
  // call is registered (and `lock` is held again). False leaves `call` untouched.
  bool TrySendNow(uint64_t id, std::unique_ptr<PendingCall>& call,
                  std::unique_lock<std::mutex>& lock);
  void AddDeadline(uint64_t id, PendingCall& call);
  void OnDeadlineTimer();

  // All below run with mu_ held, on the I/O thread only.
  void Submit(uint64_t id, std::unique_ptr<PendingCall> call);
  void Complete(uint64_t id, Result<protocol::Frame> result);
  size_t PickConnection();
  void Pump(size_t c);
  void StartConnectRound(size_t c);
  void TryEndpoint(size_t c);
  void OnConnectFailed(size_t c, uint64_t generation, const Status& error);
  // TCP is connected: the TLS handshake (under the connect deadline) when TLS is on.
  void StartHandshake(size_t c, uint64_t generation);
  void OnConnected(size_t c);
  // A frame under kAuthRequestId: the kAuth answer, or the server ending the connection for
  // access control (a removed token). An error closes the connection with it.
  void OnAuthFrame(size_t c, const protocol::Frame& frame);
  // Ends the connect round with `status` (the on_round_done callbacks).
  void RoundDone(size_t c, const Status& status);
  void StartRead(size_t c);
  // Decodes without the lock (the decoder is the I/O thread's), completes under it.
  void OnBytes(size_t c, uint64_t generation, const char* data, size_t size);
  void StartWrite(size_t c);
  // Closes the socket and fails its in-flight calls with kUnavailable (`reason`).
  void Close(size_t c, const Status& reason);
  void FailWaiting(size_t c, const Status& reason);
  void Shutdown();

  const ClientOptions options_;
  const std::vector<client::Endpoint> endpoints_;
  const TlsContextPtr tls_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<size_t> open_connections_{0};

  // Guarded by mu_ (the decoders excepted).
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::unordered_map<uint64_t, std::unique_ptr<PendingCall>> calls_;
  // Every registered call's deadline. One timer, armed for the earliest, replaces a timer
  // per call (whose arming and cancelling cost the I/O thread two reactor operations each).
  Deadlines deadlines_;
  boost::asio::steady_timer deadline_timer_;
  Clock::time_point timer_expiry_ = Clock::time_point::max();  // max: not armed
  std::vector<Ready> ready_;
  size_t next_connection_ = 0;
  size_t queued_ = 0;  // calls posted to Submit and not yet submitted
  bool shut_down_ = false;
  // Set by FollowLeaders; stopped first in ~Impl, destroyed after the I/O thread joined.
  std::unique_ptr<client::LeaderRedirector> redirector_;
  // Set by RouteByDirectory; stopped in ~Impl before the redirector.
  std::unique_ptr<client::GroupRouter> router_;
  std::function<void()> on_wrong_group_;  // set before Start, then read-only
};

}  // namespace kvatlas
