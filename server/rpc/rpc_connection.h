// RpcConnection: one binary-protocol client connection. Three coroutines share the
// connection's strand (so its members need no lock): a reader that feeds the FrameDecoder
// and dispatches requests through the RpcHandler, a writer that sends the queued answers
// (coalesced: everything queued goes out in one write), and an idle watchdog. When no write
// is in progress, answers are first sent directly (non-blocking) from the handler that
// produced them; the writer takes over whatever the socket does not accept at once. Ingest
// answers come back from the Applier thread by a post to the strand.
//
// Backpressure: a request is in flight from the moment it is decoded until its answer has
// been written. At max_in_flight (or with max_pending_output_bytes of answers unsent) the
// reader stops decoding and reading, so a client that does not read its answers stalls
// itself, not the server's memory; a write stuck for write_timeout closes the connection.
//
// Resuming after such a pause first decodes the frames already buffered: a client that
// pipelined more than max_in_flight requests in one write sends nothing more until they
// are answered.
//
// Large frames (more than kSmallFrameBytes in all): frames up to that size go straight to
// the FrameDecoder (a connection buffers at most about twice that for them). A larger
// frame's bytes are collected apart, under the server's RpcBufferBudget: when its length
// prefix arrives the connection reserves the frame's whole size and reads no more of it
// until the reservation is granted (it waits, reading nothing, while the budget is full).
// The frame must arrive whole within frame_timeout of the grant; a reservation not granted
// within frame_timeout of the length prefix gets a kResourceExhausted error frame, a frame
// not received in time kDeadlineExceeded, and either way the connection is closed, which
// returns the reservation. The whole frame is then decoded at once and the reservation
// returned.
//
// Streams (kWatch, kSnapshot; RpcStreams): a watch is answered by its first frame and then
// pushes records as the ChangeFeed publishes them (its notify hook posts to the strand); a
// snapshot is in flight until its last part is queued. Their frames are produced only while
// less than half of max_pending_output_bytes is queued, so they never pause the reading of
// other requests and a slow reader's backlog stays in its watchers' bounded queues. Open
// watches keep the connection from being idle; they end with `unavailable` when the server
// shuts down or the client stops sending.
//
// TLS (docs/security.md §TLS): a connection made with a TLS context first completes the
// server side of the handshake, within handshake_timeout of Start() (else it is closed,
// like one that fails it: a plaintext client, an untrusted client certificate), and only
// then starts the three coroutines, which read and write through the TLS stream. Answers
// then always go through the writer (a TLS record cannot be sent from a handler with a
// plain send()).
//
// Thread-safety: Start() once after construction; Shutdown() from any thread.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/tls.h"
#include "common/internal/tls_stream.h"
#include "kvatlas/common/protocol.h"
#include "server/rpc/rpc_buffer_budget.h"
#include "server/rpc/rpc_handler.h"
#include "server/rpc/rpc_streams.h"

namespace kvatlas::server {

struct RpcConnectionOptions {
  uint32_t max_frame_bytes = protocol::kDefaultMaxPayloadBytes;
  // Requests decoded and not yet answered on the wire; past it the connection stops reading.
  size_t max_in_flight = 1024;
  // Answer bytes queued and not yet written; past it the connection stops reading too
  // (bounds memory when answers are large, e.g. lookups with locations).
  size_t max_pending_output_bytes = 8u << 20;
  // A connection with no request in flight and no bytes received for this long is closed.
  std::chrono::milliseconds idle_timeout{300'000};
  // A write of queued answers that has not completed for this long (the client stopped
  // reading, so its receive window stays full) closes the connection: backpressure already
  // stops such a client from growing the server's memory, this frees the connection too.
  std::chrono::milliseconds write_timeout{30'000};
  // A large frame (RpcConnection's header) must be granted its share of the server's
  // buffer budget within this long of its length prefix, and then arrive whole within this
  // long of the grant; else an error frame and the connection is closed.
  std::chrono::milliseconds frame_timeout{30'000};
  // Watches open at once on one connection (kResourceExhausted past it); the ChangeFeed's
  // max_watchers bounds them over all connections.
  size_t max_watches = 16;
  // With access control on: a connection must have sent its kAuth frame within this long
  // of being accepted, and a large frame (over kSmallFrameBytes) before it is refused;
  // either way an unauthenticated error frame, and the connection is closed.
  std::chrono::milliseconds auth_timeout{10'000};
  // A TLS connection's handshake must complete within this long of Start(), else it is
  // closed (the server sets rpc_frame_timeout_ms).
  std::chrono::milliseconds handshake_timeout{30'000};
};

class RpcConnection : public std::enable_shared_from_this<RpcConnection> {
 public:
  // Frames of at most this many bytes (length prefix included) are read without the
  // buffer budget; larger ones reserve their size in it first.
  static constexpr size_t kSmallFrameBytes = 64 << 10;

  // `socket`'s executor must be a strand, or an io_context run by exactly one thread (an
  // implicit strand); `handler` and `budget` must outlive the connection's coroutines, and
  // so must `on_closed` (called once, on the strand, when it closes). `tls`: serve TLS
  // with this context; null: plaintext.
  RpcConnection(boost::asio::ip::tcp::socket socket, const RpcHandler* handler,
                RpcBufferBudget* budget, RpcConnectionOptions options,
                std::function<void()> on_closed, TlsContextPtr tls = nullptr);
  ~RpcConnection();
  RpcConnection(const RpcConnection&) = delete;
  RpcConnection& operator=(const RpcConnection&) = delete;

  // Spawns the coroutines on the connection's strand (after the TLS handshake).
  void Start();

  // Graceful close: stops reading, answers what is in flight (ingests included), then
  // closes. Posts to the strand; safe from any thread.
  void Shutdown();

  // Closes at once (answers not yet written are dropped). Posts to the strand.
  void Abort();

  // After a token reload: a connection whose token was removed ends its watches and closes
  // with an unauthenticated error frame (id 0, kError); others go on. Posts to the strand.
  void RecheckCredentials();

 private:
  // The server side of the TLS handshake, under handshake_timeout; then Serve().
  boost::asio::awaitable<void> AsyncHandshake();
  void Serve();
  boost::asio::awaitable<void> AsyncRead();
  boost::asio::awaitable<void> AsyncWrite();
  boost::asio::awaitable<void> AsyncWatchdog();

  // Dispatches buffered frames while under the in-flight cap. False after a stream error
  // (the error answer is queued and the connection closes once it is written).
  bool DrainDecoder();
  // Decodes and dispatches one buffered frame; false when there was none or the stream
  // failed.
  bool DecodeOne();
  // Routes bytes read to the decoder, or to large_frame_ (see the header comment).
  void OnBytes(std::string_view bytes);
  // Reserves the large frame's size in the budget; false while it does not fit (the budget
  // wakes the reader) or when it never can (the stream has failed).
  bool ReserveLargeFrame();
  // At a frame boundary, given the frame's 4-byte length prefix: notes a small frame's size
  // in small_frame_left_ (prefix included) and returns false, or a large one's in
  // large_frame_size_ and returns true.
  bool StartFrame(std::string_view length_prefix);
  // Returns the large frame's reservation (waking the budget's waiters, unless told not
  // to) and drops its bytes.
  void DropLargeFrame(bool wake_waiters = true);
  // The stream cannot go on: queues `status` as an error answer for `header` and closes
  // the connection once the answers queued before it are written.
  void FailStream(const std::optional<protocol::FrameHeader>& header, const Status& status);
  // Stops reading; the connection closes once what is queued is written.
  void CloseAfterFlush();
  // Access control of a decoded request (RpcHandler::Admit); false when Admit answered it.
  bool Admitted(const protocol::Frame& frame);
  // A request the handler could not answer at once (RpcHandler::Handle): an ingest through
  // the Applier, or a read that waits for its barrier and its revision. Answered on the
  // strand, or with kDeadlineExceeded after apply_timeout.
  struct PendingWait;
  void SubmitPending(PendingRequest pending);
  // A linearizable read's barrier in its group, then AwaitRevision.
  void SubmitBarrier(std::shared_ptr<PendingWait> wait);
  // A read of a group this server holds no replica of: to a member, through the group
  // forwarder (PendingRead::remote).
  void SubmitRemoteRead(std::shared_ptr<PendingWait> wait);
  // Answers the read of `wait` once its revision is applied here in its context's group,
  // polling on the strand.
  void AwaitRevision(std::shared_ptr<PendingWait> wait);
  void FinishRead(PendingWait& wait, const Status& failed);
  // Appends frames of the streams that are ready, within the streams' output budget.
  void PumpStreams();
  // A watch has records (or its end) to send: RpcStreams' wake, posted to the strand.
  void OnWatchReady(uint64_t request_id, uint64_t serial);
  // The connection stops reading (shutdown, or the client stopped sending): its watches end.
  void EndWatches(std::string_view why);
  // One answer was appended to out_.
  void Answered();
  // Sends out_ now if no write is in progress and the socket takes it all, else wakes the
  // writer. Call after appending answers.
  void Flush();
  bool ReadPaused() const;
  // Done reading and every answer that will be written has been.
  bool Finished() const;
  void Close(std::string_view reason);

  MaybeTlsStream<boost::asio::ip::tcp::socket> stream_;
  bool handshake_done_ = false;       // TLS: the handshake ended (Start: no handshake)
  bool handshake_timed_out_ = false;  // TLS: the handshake deadline closed the socket
  const RpcHandler* handler_;
  RpcConnectionOptions options_;
  std::function<void()> on_closed_;
  std::string peer_;
  RpcSession session_;  // who the connection authenticated as
  std::chrono::steady_clock::time_point accepted_;
  protocol::FrameDecoder decoder_;
  RpcStreams streams_;
  std::vector<char> read_buffer_;
  RpcBufferBudget* budget_;
  // Framing of the bytes read (OnBytes): the held-back start of a length prefix that a
  // read split, and the bytes of the current small frame not yet seen.
  std::string length_prefix_;
  uint64_t small_frame_left_ = 0;
  // The large frame being received: its size (0 = none), its bytes so far, whether the
  // budget granted it (reserved_ bytes), and when it must be granted or complete.
  uint64_t large_frame_size_ = 0;
  std::string large_frame_;
  size_t reserved_ = 0;
  std::chrono::steady_clock::time_point frame_deadline_;
  std::string out_;         // answers queued for the next write
  std::string writing_;     // answers of the write in progress
  size_t out_answers_ = 0;  // answers in out_
  size_t in_flight_ = 0;
  bool reading_done_ = false;
  bool close_after_flush_ = false;  // stream error: close once the error answer is out
  bool closed_ = false;
  bool write_pending_ = false;  // a write of writing_ is in progress, since write_started_
  std::chrono::steady_clock::time_point write_started_;
  std::chrono::steady_clock::time_point last_activity_;
  // Timers used as condition variables (cancel() wakes the waiter) and the idle deadline.
  boost::asio::steady_timer writer_wake_;
  boost::asio::steady_timer reader_wake_;
  boost::asio::steady_timer idle_timer_;
};

}  // namespace kvatlas::server
