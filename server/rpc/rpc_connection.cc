#include "server/rpc/rpc_connection.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <exception>
#include <utility>

#include "common/internal/bytes.h"
#include "common/internal/log.h"
#include "server/service/ingest_service.h"
#include "server/service/lookup_service.h"
#include "server/service/placement_service.h"

namespace kvatlas::server {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunkBytes = 64 << 10;
// How often a read waiting for a revision (min_revision, a linearizable read's barrier)
// looks at the applied revision again.
constexpr std::chrono::microseconds kRevisionPoll{500};

bool IsStreamRequest(const protocol::FrameHeader& header) {
  return !header.is_response() && (header.type == protocol::MessageType::kWatch ||
                                   header.type == protocol::MessageType::kSnapshot);
}

// The completion handler of every connection coroutine: expected failures are error codes
// handled inside; anything thrown is a bug, logged here, and closes the connection.
auto LogExceptions(std::shared_ptr<RpcConnection> connection, std::string_view what) {
  return [connection = std::move(connection), what](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      LogError("rpc connection " + std::string(what) + " failed: " + ex.what());
    }
    connection->Abort();
  };
}

// The header of a frame whose first bytes are `frame`, once they hold one.
std::optional<protocol::FrameHeader> HeaderOf(std::string_view frame) {
  if (frame.size() < protocol::kHeaderBytes) return std::nullopt;
  protocol::FrameHeader header;
  header.type = static_cast<protocol::MessageType>(frame[5]);
  header.flags = static_cast<uint8_t>(frame[6]);
  ByteReader in(frame.substr(12, 8));
  header.request_id = in.Fixed64();
  return header;
}

std::string PeerOf(const asio::ip::tcp::socket& socket) {
  error_code ec;
  const auto endpoint = socket.remote_endpoint(ec);
  if (ec) return "unknown peer";
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

}  // namespace

RpcConnection::RpcConnection(asio::ip::tcp::socket socket, const RpcHandler* handler,
                             RpcBufferBudget* budget, RpcConnectionOptions options,
                             std::function<void()> on_closed, TlsContextPtr tls)
    : stream_(std::move(socket), std::move(tls)),
      handler_(handler),
      options_(options),
      on_closed_(std::move(on_closed)),
      peer_(PeerOf(stream_.next_layer())),
      session_{peer_, std::nullopt},
      accepted_(Clock::now()),
      decoder_(options.max_frame_bytes),
      streams_(&handler->services(), options.max_watches),
      read_buffer_(kReadChunkBytes),
      budget_(budget),
      last_activity_(Clock::now()),
      writer_wake_(stream_.get_executor()),
      reader_wake_(stream_.get_executor()),
      idle_timer_(stream_.get_executor()) {}

// Only at the server's teardown is a connection destroyed unclosed: its io_context (and
// maybe those of waiting connections) is gone, so its release wakes nobody.
RpcConnection::~RpcConnection() { DropLargeFrame(/*wake_waiters=*/false); }

void RpcConnection::Start() {
  if (stream_.is_tls()) {
    asio::co_spawn(stream_.get_executor(), AsyncHandshake(),
                   LogExceptions(shared_from_this(), "TLS handshake"));
    return;
  }
  // Non-blocking for the direct sends of Flush(); Asio's asynchronous operations work on
  // either kind of socket.
  error_code ec;
  stream_.next_layer().non_blocking(true, ec);
  handshake_done_ = true;
  Serve();
}

asio::awaitable<void> RpcConnection::AsyncHandshake() {
  // The deadline closes the socket, which fails the handshake. A handshake that completes
  // first cancels it (the strand orders the two).
  idle_timer_.expires_after(options_.handshake_timeout);
  idle_timer_.async_wait([self = shared_from_this()](error_code timer_ec) {
    if (timer_ec || self->handshake_done_ || self->closed_) return;
    self->handshake_timed_out_ = true;
    error_code ignored;
    self->stream_.next_layer().close(ignored);
  });
  error_code ec;
  co_await stream_.tls().async_handshake(asio::ssl::stream_base::server,
                                         asio::redirect_error(asio::use_awaitable, ec));
  handshake_done_ = true;
  idle_timer_.cancel();
  if (ec) {
    const std::string why = handshake_timed_out_
                                ? "not completed within " +
                                      std::to_string(options_.handshake_timeout.count()) +
                                      " ms (rpc_frame_timeout_ms)"
                                : TlsFailureReason(ec, stream_.native_handle());
    LogInfo("rpc " + peer_ + ": TLS handshake failed: " + why);
    handler_->services().metrics->TlsHandshakeFailed(/*http=*/false);
    Close("TLS handshake failed");
    co_return;
  }
  last_activity_ = Clock::now();
  Serve();
}

void RpcConnection::Serve() {
  if (closed_) return;
  auto self = shared_from_this();
  // Called by watchers' notify hooks on the applying thread: only a post, never a wait.
  streams_.SetWake(
      [weak = weak_from_this(), executor = stream_.get_executor()](uint64_t id, uint64_t serial) {
        asio::post(executor, [weak, id, serial] {
          if (auto connection = weak.lock()) connection->OnWatchReady(id, serial);
        });
      });
  asio::co_spawn(stream_.get_executor(), AsyncRead(), LogExceptions(self, "reader"));
  asio::co_spawn(stream_.get_executor(), AsyncWrite(), LogExceptions(self, "writer"));
  asio::co_spawn(stream_.get_executor(), AsyncWatchdog(), LogExceptions(self, "watchdog"));
}

void RpcConnection::Shutdown() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    // The pending read completes with EOF (or an error): the reader stops, the writer
    // answers what is in flight and then closes.
    error_code ec;
    self->stream_.next_layer().shutdown(asio::ip::tcp::socket::shutdown_receive, ec);
    self->reading_done_ = true;
    self->EndWatches("the server is shutting down");
    self->reader_wake_.cancel();
    self->writer_wake_.cancel();
  });
}

void RpcConnection::RecheckCredentials() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->closed_ || self->close_after_flush_) return;
    const Status valid = self->handler_->Recheck(&self->session_);
    if (valid.ok()) return;
    LogInfo("rpc " + self->peer_ + ": closing the connection: " + valid.ToString());
    if (self->streams_.has_watches()) self->streams_.EndWatches(valid, &self->out_);
    self->handler_->AppendStreamError(std::nullopt, valid, &self->out_);
    self->CloseAfterFlush();
    self->Flush();
  });
}

void RpcConnection::Abort() {
  asio::post(stream_.get_executor(),
             [self = shared_from_this()] { self->Close("closed by the server"); });
}

bool RpcConnection::ReadPaused() const {
  return in_flight_ >= options_.max_in_flight || out_.size() >= options_.max_pending_output_bytes;
}

bool RpcConnection::Finished() const {
  if (close_after_flush_) return out_.empty();
  return reading_done_ && in_flight_ == 0;
}

asio::awaitable<void> RpcConnection::AsyncRead() {
  error_code ec;
  while (!closed_ && !reading_done_) {
    if (!DrainDecoder()) co_return;
    if (ReadPaused()) {
      // Backpressure: the writer wakes us when answers have drained.
      reader_wake_.expires_at(Clock::time_point::max());
      co_await reader_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (large_frame_size_ > 0 && reserved_ == 0 && !ReserveLargeFrame()) {
      if (reading_done_) break;
      // The budget is full: its next release wakes us (the watchdog bounds the wait).
      reader_wake_.expires_at(Clock::time_point::max());
      co_await reader_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    // A large frame is read up to its end only, so that it is decoded alone and its
    // reservation returned at once.
    size_t want = read_buffer_.size();
    if (large_frame_size_ > 0)
      want = std::min<uint64_t>(want, large_frame_size_ - large_frame_.size());
    const size_t n = co_await stream_.async_read_some(
        asio::buffer(read_buffer_.data(), want), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec != asio::error::eof && ec != asio::error::operation_aborted && !closed_) {
        LogDebug("rpc " + peer_ + ": read failed: " + ec.message());
      }
      break;
    }
    if (reading_done_) break;  // e.g. the watchdog failed a large frame meanwhile
    last_activity_ = Clock::now();
    OnBytes(std::string_view(read_buffer_.data(), n));
  }
  // The peer stopped sending (or we stopped reading): answer what is in flight, then close.
  reading_done_ = true;
  EndWatches("the connection is closing (the client stopped sending)");
  writer_wake_.cancel();
}

bool RpcConnection::DrainDecoder() {
  // Decodes until the decoder runs dry or the in-flight cap is reached *after* the answers
  // produced so far were flushed: a direct send can end a pause at once, and the frames
  // still buffered must then be decoded here, since the client may send nothing more.
  for (;;) {
    bool dry = false;
    while (!dry && !ReadPaused()) dry = !DecodeOne();
    if (close_after_flush_) return false;
    // Everything one read produced goes out together (pipelined answers coalesce).
    Flush();
    if (dry || ReadPaused()) break;
  }
  return true;
}

bool RpcConnection::DecodeOne() {
  if (close_after_flush_) return false;  // failing: nothing more is served
  Result<std::optional<protocol::Frame>> next = decoder_.Next();
  if (!next.has_value()) {
    // The stream can never resynchronise: tell the client why, then close.
    FailStream(decoder_.failed_header(), next.error());
    return false;
  }
  if (!next->has_value()) return false;
  if (reserved_ > 0 && large_frame_size_ == 0 && decoder_.buffered_bytes() == 0) {
    // The large frame is out of the decoder (its payload moved into the frame): free the
    // decoder's buffer (a fresh decoder holds nothing) and return the reservation.
    decoder_ = protocol::FrameDecoder(options_.max_frame_bytes);
    DropLargeFrame();
  }
  ++in_flight_;
  if (!Admitted(**next)) return !close_after_flush_;
  if (IsStreamRequest((*next)->header)) {
    switch (streams_.Handle(**next, &out_)) {
      case RpcStreams::Handled::kAnswered:
        Answered();
        break;
      case RpcStreams::Handled::kPending:  // answered by its last frame (PumpStreams)
        break;
      case RpcStreams::Handled::kIgnored:
        --in_flight_;
        break;
    }
    return true;
  }
  std::optional<PendingRequest> pending = handler_->Handle(**next, &out_);
  if (pending) {
    SubmitPending(std::move(*pending));
  } else {
    Answered();
  }
  return true;
}

bool RpcConnection::Admitted(const protocol::Frame& frame) {
  switch (handler_->Admit(frame, &session_, &out_)) {
    case RpcHandler::Admission::kServe:
      return true;
    case RpcHandler::Admission::kAnswered:
      Answered();
      return false;
    case RpcHandler::Admission::kClose:
      Answered();
      LogInfo("rpc " + peer_ + ": closing the connection: refused by access control");
      if (streams_.has_watches()) {
        streams_.EndWatches(Status::Unauthenticated("the connection's token is not valid"), &out_);
      }
      CloseAfterFlush();
      return false;
  }
  return false;
}

void RpcConnection::OnBytes(std::string_view bytes) {
  while (!bytes.empty()) {
    if (large_frame_size_ > 0) {
      const size_t take = std::min<uint64_t>(bytes.size(), large_frame_size_ - large_frame_.size());
      large_frame_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (large_frame_.size() < large_frame_size_) continue;
      // Complete. The decoder is empty (nothing is read while it holds a whole frame), so
      // this frame is decoded next, alone, and DrainDecoder returns its reservation.
      decoder_.Feed(large_frame_);
      std::string().swap(large_frame_);
      large_frame_size_ = 0;
      continue;
    }
    if (!length_prefix_.empty()) {  // a length prefix that the previous read split
      const size_t take = std::min(4 - length_prefix_.size(), bytes.size());
      length_prefix_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (length_prefix_.size() < 4) return;
      std::string prefix = std::exchange(length_prefix_, std::string());
      if (StartFrame(prefix)) {
        large_frame_ = std::move(prefix);
      } else {
        decoder_.Feed(prefix);
        small_frame_left_ -= prefix.size();
      }
      continue;
    }
    // Small frames go to the decoder as they are, up to a large frame's length prefix (or
    // a length prefix that this read split, held back until the next).
    size_t n = 0;
    while (n < bytes.size()) {
      if (small_frame_left_ > 0) {
        const uint64_t step = std::min<uint64_t>(small_frame_left_, bytes.size() - n);
        n += step;
        small_frame_left_ -= step;
      } else if (bytes.size() - n < 4 || StartFrame(bytes.substr(n, 4))) {
        break;
      }
    }
    decoder_.Feed(bytes.substr(0, n));
    bytes.remove_prefix(n);
    if (large_frame_size_ == 0) {
      length_prefix_.assign(bytes);  // fewer than 4 bytes, or none
      return;
    }
  }
}

bool RpcConnection::StartFrame(std::string_view length_prefix) {
  ByteReader in(length_prefix);
  const uint32_t length = in.Fixed32();
  const uint64_t size = uint64_t{4} + length;
  // A frame that the decoder rejects by its header (shorter than a header, or a payload
  // over max_frame_bytes) goes to it: it answers the error without buffering the payload.
  constexpr uint32_t kHeaderBody = protocol::kHeaderBytes - 4;
  const bool decodable = length >= kHeaderBody && length - kHeaderBody <= options_.max_frame_bytes;
  if (size <= kSmallFrameBytes || !decodable) {
    small_frame_left_ = size;
    return false;
  }
  large_frame_size_ = size;
  frame_deadline_ = Clock::now() + options_.frame_timeout;
  idle_timer_.cancel();  // the watchdog keeps the frame's deadline from now on
  return true;
}

bool RpcConnection::ReserveLargeFrame() {
  if (handler_->AwaitingAuth(session_)) {
    // The frames before it were decoded first (DrainDecoder), so a kAuth frame sent ahead
    // of this one has been seen: a client that has not authenticated gets no share of the
    // budget, only the small-frame buffer.
    FailStream(HeaderOf(large_frame_),
               Status::Unauthenticated("this server requires a token: the connection's first "
                                       "frame must be kAuth"));
    return false;
  }
  if (large_frame_size_ > budget_->limit()) {
    FailStream(HeaderOf(large_frame_),
               Status::ResourceExhausted("frame: " + std::to_string(large_frame_size_) +
                                         " bytes exceed the server's buffer for incomplete "
                                         "frames (rpc_max_buffered_bytes = " +
                                         std::to_string(budget_->limit()) + ")"));
    return false;
  }
  // Called by a release on any thread: only a post to the strand, to wake the reader.
  auto wake = [weak = weak_from_this(), executor = stream_.get_executor()] {
    asio::post(executor, [weak] {
      if (auto self = weak.lock()) self->reader_wake_.cancel();
    });
  };
  if (!budget_->AcquireOrWait(large_frame_size_, std::move(wake))) return false;
  reserved_ = large_frame_size_;
  large_frame_.reserve(large_frame_size_);
  frame_deadline_ = Clock::now() + options_.frame_timeout;
  return true;
}

void RpcConnection::DropLargeFrame(bool wake_waiters) {
  if (reserved_ > 0) budget_->Release(std::exchange(reserved_, 0), wake_waiters);
  large_frame_size_ = 0;
  std::string().swap(large_frame_);
}

void RpcConnection::FailStream(const std::optional<protocol::FrameHeader>& header,
                               const Status& status) {
  LogWarning("rpc " + peer_ + ": closing the connection: " + status.ToString());
  handler_->AppendStreamError(header, status, &out_);
  CloseAfterFlush();
}

void RpcConnection::CloseAfterFlush() {
  close_after_flush_ = true;
  reading_done_ = true;
  DropLargeFrame();
  reader_wake_.cancel();
  writer_wake_.cancel();
}

void RpcConnection::Answered() { ++out_answers_; }

void RpcConnection::PumpStreams() {
  if (closed_ || close_after_flush_ || !streams_.pending()) return;
  const size_t finished = streams_.Produce(options_.max_pending_output_bytes / 2, &out_);
  for (size_t i = 0; i < finished; ++i) Answered();
}

void RpcConnection::OnWatchReady(uint64_t request_id, uint64_t serial) {
  if (closed_) return;
  streams_.OnReady(request_id, serial);
  Flush();
}

void RpcConnection::EndWatches(std::string_view why) {
  if (closed_ || !streams_.has_watches()) return;
  streams_.EndWatches(Status::Unavailable(std::string(why)), &out_);
  Flush();
}

void RpcConnection::Flush() {
  PumpStreams();
  if (closed_ || out_.empty()) return;
  if (!write_pending_ && !stream_.is_tls()) {
    // Send from here when no write is in progress: a lookup's answer then leaves in the
    // handler that read its request, instead of one more handler run (and reactor round) to
    // resume the writer. What the socket does not take is left to the writer.
    error_code ec;
    const size_t n = stream_.next_layer().send(asio::buffer(out_), 0, ec);
    if (!ec && n == out_.size()) {
      out_.clear();
      in_flight_ -= out_answers_;
      out_answers_ = 0;
      last_activity_ = Clock::now();
      reader_wake_.cancel();
      // A draining connection (shutdown, or the peer stopped sending) may be finished now;
      // streams with more to send continue from the writer (one handler run later).
      if (reading_done_ || streams_.pending()) writer_wake_.cancel();
      return;
    }
    // would_block or an error: the writer's write retries and reports the error.
    if (!ec) out_.erase(0, n);
  }
  writer_wake_.cancel();
}

// Shared by the Applier's callback and the timers, all completing on the strand: whichever
// comes first answers.
struct RpcConnection::PendingWait {
  PendingWait(PendingRequest p, const asio::any_io_executor& executor)
      : pending(std::move(p)), deadline(executor), poll(executor) {}
  PendingRequest pending;
  asio::steady_timer deadline;
  asio::steady_timer poll;  // a read waiting for its revision looks again
  bool barrier_done = false;
  bool answered = false;
  // A read's group (ServicesFor its context), whose revisions it waits for; null before
  // the first look. Its barrier and revisions start again when the directory moves it.
  const Services* group = nullptr;
  // When the read's group was first seen to have given the context away (GaveAway).
  std::optional<std::chrono::steady_clock::time_point> gave_away_at;
};

void RpcConnection::SubmitPending(PendingRequest pending) {
  const bool read = pending.read.has_value();
  const bool barrier = read && pending.read->barrier;
  // A read waits in its context's group: for a linearizable one, after a barrier there.
  CommandBatch batch = std::move(pending.batch);
  auto wait = std::make_shared<PendingWait>(std::move(pending), stream_.get_executor());
  auto self = shared_from_this();
  const Services& services = handler_->services();
  wait->deadline.expires_after(services.options.apply_timeout);
  wait->deadline.async_wait([self, wait](error_code ec) {
    if (ec || wait->answered) return;
    const Services& current = self->handler_->services();
    if (wait->pending.read && wait->pending.read->remote) {
      self->FinishRead(*wait, Status(StatusCode::kDeadlineExceeded,
                                     "no member of the read's group answered within "
                                     "apply_timeout_ms (this server holds no replica of it)"));
      return;
    }
    if (wait->pending.read) {
      self->FinishRead(*wait,
                       wait->barrier_done || !wait->pending.read->barrier
                           ? RevisionNotApplied(wait->group != nullptr ? *wait->group : current,
                                                wait->pending.read->wanted)
                           : ApplyDeadlineExceeded(current));
      return;
    }
    wait->answered = true;
    self->handler_->AppendIngestAnswer(wait->pending, ApplyDeadlineExceeded(current), &self->out_);
    self->Answered();
    self->Flush();
  });
  if (read && wait->pending.read->remote) {
    SubmitRemoteRead(wait);
    return;
  }
  if (read) {
    wait->group = &ServicesFor(services, wait->pending.read->route.lookup.context);
    if (barrier) {
      SubmitBarrier(wait);
    } else {
      AwaitRevision(wait);
    }
    return;
  }
  // Runs on the applier thread (or here, at once, when refused): only post from it.
  SubmitAsync(services, std::move(batch), [self, wait](Result<Revision> applied) {
    asio::post(self->stream_.get_executor(), [self, wait, applied = std::move(applied)] {
      if (wait->answered) return;
      wait->answered = true;
      wait->deadline.cancel();
      self->handler_->AppendIngestAnswer(wait->pending, applied, &self->out_);
      self->Answered();
      self->Flush();
    });
  });
}

void RpcConnection::SubmitRemoteRead(std::shared_ptr<PendingWait> wait) {
  const Services& services = handler_->services();
  PendingRead& read = *wait->pending.read;
  // Answered on a forwarder thread: only post from it.
  const Status queued = services.group_forwarder->TryRead(
      ServicesFor(services, read.route.lookup.context), static_cast<uint8_t>(read.type),
      std::move(read.payload), [self = shared_from_this(), wait](Result<std::string> answer) {
        asio::post(self->stream_.get_executor(), [self, wait, answer = std::move(answer)] {
          if (wait->answered) return;
          wait->answered = true;
          wait->deadline.cancel();
          self->handler_->AppendRemoteReadAnswer(wait->pending, answer, &self->out_);
          self->Answered();
          self->Flush();
        });
      });
  if (!queued.ok()) FinishRead(*wait, queued);
}

void RpcConnection::SubmitBarrier(std::shared_ptr<PendingWait> wait) {
  // A linearizable read's empty batch, through its group's leader (forwarded when this
  // server does not lead the group). Runs on the applier thread (or here, at once, when
  // refused): only post from it.
  SubmitAsync(
      *wait->group, CommandBatch{}, [self = shared_from_this(), wait](Result<Revision> applied) {
        asio::post(self->stream_.get_executor(), [self, wait, applied = std::move(applied)] {
          if (wait->answered) return;
          if (!applied.has_value()) {
            self->FinishRead(*wait, applied.error());
            return;
          }
          wait->barrier_done = true;
          wait->pending.read->wanted = std::max(wait->pending.read->wanted, *applied);
          self->AwaitRevision(wait);
        });
      });
}

void RpcConnection::AwaitRevision(std::shared_ptr<PendingWait> wait) {
  if (wait->answered) return;
  const Services& services = handler_->services();
  PendingRead& read = *wait->pending.read;
  const ContextKey& context = read.route.lookup.context;
  if (const Services* now = &ServicesFor(services, context); now != wait->group) {
    // The directory placed the context on another group meanwhile: wait there, from the
    // request's own consistency again.
    wait->group = now;
    wait->gave_away_at.reset();
    read.wanted = read.min_revision;
    if (read.barrier) {
      wait->barrier_done = false;
      SubmitBarrier(wait);
      return;
    }
  }
  if (wait->group->machine->applied_revision() >= read.wanted) {
    // A group that gave the context away: the directory's placement is on its way (or
    // never comes: answered from here after kPlacementWait).
    const auto now = std::chrono::steady_clock::now();
    const bool gave_away = GaveAway(services, *wait->group, context);
    if (gave_away && !wait->gave_away_at) wait->gave_away_at = now;
    if (!gave_away || now - *wait->gave_away_at >= kPlacementWait) {
      wait->answered = true;
      wait->deadline.cancel();
      handler_->AppendReadAnswer(wait->pending, &out_);
      Answered();
      Flush();
      return;
    }
  }
  // Applied revisions come from the applier thread with no notification to hook: look
  // again shortly (the strand is free meanwhile), until the deadline answers.
  wait->poll.expires_after(kRevisionPoll);
  wait->poll.async_wait([self = shared_from_this(), wait](error_code ec) {
    if (!ec) self->AwaitRevision(wait);
  });
}

void RpcConnection::FinishRead(PendingWait& wait, const Status& failed) {
  wait.answered = true;
  wait.deadline.cancel();
  wait.poll.cancel();
  handler_->AppendReadFailure(wait.pending, failed, &out_);
  Answered();
  Flush();
}

asio::awaitable<void> RpcConnection::AsyncWrite() {
  error_code ec;
  while (!closed_) {
    PumpStreams();
    if (out_.empty()) {
      if (Finished()) break;
      writer_wake_.expires_at(Clock::time_point::max());
      co_await writer_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    writing_.swap(out_);
    out_.clear();
    const size_t answers = out_answers_;
    out_answers_ = 0;
    write_pending_ = true;
    write_started_ = Clock::now();
    co_await asio::async_write(stream_, asio::buffer(writing_),
                               asio::redirect_error(asio::use_awaitable, ec));
    write_pending_ = false;
    if (ec) {
      if (!closed_) LogDebug("rpc " + peer_ + ": write failed: " + ec.message());
      break;
    }
    writing_.clear();
    in_flight_ -= answers;
    last_activity_ = Clock::now();
    reader_wake_.cancel();
  }
  Close(close_after_flush_ ? "protocol error" : "done");
}

asio::awaitable<void> RpcConnection::AsyncWatchdog() {
  error_code ec;
  while (!closed_) {
    const Clock::time_point now = Clock::now();
    if (write_pending_ && now - write_started_ >= options_.write_timeout) {
      LogWarning("rpc " + peer_ + ": closing the connection: answers not read by the client for " +
                 std::to_string(options_.write_timeout.count()) + " ms (write timeout)");
      Close("write timeout");
      co_return;
    }
    if (large_frame_size_ > 0 && now >= frame_deadline_) {
      const std::string limit = std::to_string(options_.frame_timeout.count()) + " ms";
      FailStream(
          HeaderOf(large_frame_),
          reserved_ == 0
              ? Status::ResourceExhausted("frame: the server's buffer for incomplete frames "
                                          "(rpc_max_buffered_bytes) stayed full for " +
                                          limit + " (rpc_frame_timeout_ms); retry later")
              : Status(StatusCode::kDeadlineExceeded,
                       "frame: " + std::to_string(large_frame_size_) +
                           " bytes not received within " + limit + " (rpc_frame_timeout_ms)"));
      continue;
    }
    const bool awaiting_auth = !close_after_flush_ && handler_->AwaitingAuth(session_);
    if (awaiting_auth && now >= accepted_ + options_.auth_timeout) {
      FailStream(std::nullopt,
                 Status::Unauthenticated("no kAuth frame within " +
                                         std::to_string(options_.auth_timeout.count()) +
                                         " ms of connecting (this server requires a token)"));
      continue;
    }
    const Clock::time_point idle_at = last_activity_ + options_.idle_timeout;
    if (now >= idle_at) {
      if (in_flight_ == 0 && !streams_.has_watches()) {
        LogInfo("rpc " + peer_ + ": closing the connection: idle for " +
                std::to_string(options_.idle_timeout.count()) + " ms (rpc_idle_timeout_ms)");
        Close("idle");
        co_return;
      }
      // Requests in flight (e.g. an ingest waiting for the applier) or open watches: not
      // idle. A quiet watch gets an empty frame, so that a vanished client is found by the
      // write failing rather than holding its watcher for good.
      if (in_flight_ == 0) {
        streams_.KeepAlive(&out_);
        Flush();
      }
      last_activity_ = Clock::now();
      continue;
    }
    // Wake for whichever comes first: the idle deadline, or the write deadline of a write in
    // progress (one that starts while we sleep is checked within write_timeout after it).
    Clock::time_point wake_at =
        std::min(idle_at, (write_pending_ ? write_started_ : now) + options_.write_timeout);
    if (large_frame_size_ > 0) wake_at = std::min(wake_at, frame_deadline_);
    if (awaiting_auth) wake_at = std::min(wake_at, accepted_ + options_.auth_timeout);
    idle_timer_.expires_at(wake_at);
    co_await idle_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void RpcConnection::Close(std::string_view reason) {
  if (closed_) return;
  closed_ = true;
  reading_done_ = true;
  LogDebug("rpc " + peer_ + ": connection closed (" + std::string(reason) + ")");
  error_code ec;
  stream_.next_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  stream_.next_layer().close(ec);
  streams_.Clear();  // unsubscribes the watchers
  DropLargeFrame();
  writer_wake_.cancel();
  reader_wake_.cancel();
  idle_timer_.cancel();
  if (on_closed_) on_closed_();
}

}  // namespace kvatlas::server
