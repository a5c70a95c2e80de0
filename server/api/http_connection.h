// HttpConnection: one REST connection on the HTTP server's io thread (Boost.Beast over
// Boost.Asio). It reads a request with Beast's parser under a whole-request deadline (the
// first byte to the last of the body), a header size limit and the body limit (chunked
// bodies included, refused with 413 as soon as they pass it), hands the complete request to
// the server's bounded worker pool, and writes the answer back under a write deadline.
// Waiting for a request costs a socket and a small buffer, never a thread.
//
// TLS (docs/security.md §TLS): a connection made with a TLS context reads its first bytes
// under the request deadline; a TLS handshake record goes on to the server side of the
// handshake (same deadline), anything else is a plaintext client on the TLS port and gets a
// plaintext 400 naming the problem, then the connection is closed. Requests are then read
// and answered through the TLS stream exactly as in plaintext.
//
// Thread-safety: the connection's socket is used only on the io thread (a single-threaded
// io_context, the connection's implicit strand). A worker running a streamed answer writes
// through BlockingWrite, which posts the write to the io thread and waits for it.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/internal/tls.h"
#include "common/internal/tls_stream.h"
#include "server/api/http_request.h"
#include "server/api/router.h"

namespace kvatlas::server {

// What every connection shares; owned by the HttpServer, outlives its connections.
struct HttpConnectionContext {
  size_t max_header_bytes = 16u << 10;
  size_t max_body_bytes = 16u << 20;
  // From a request's first byte to its last.
  std::chrono::milliseconds request_timeout{10'000};
  // How long a connection may wait for the first byte of its next request.
  std::chrono::milliseconds idle_timeout{5'000};
  // Per answer (or per chunk of a streamed answer).
  std::chrono::milliseconds write_timeout{5'000};
  // Routes a complete request (on a worker thread). Never throws.
  std::function<HttpReply(const HttpRequest&)> handle;
  // Queues `job` on the worker pool; false when the queue is full.
  std::function<bool(std::function<void()> job)> submit;
  // Counts an answer: the request path ("" if it was not parsed), status, seconds spent.
  std::function<void(const std::string& path, int status, std::optional<double> seconds)> record;
  // Counts a TLS handshake that failed or timed out.
  std::function<void()> tls_failed;
  std::atomic<bool> stopping{false};
};

// The bytes of a complete (not streamed) answer. `head`: no body, the length of the GET one.
[[nodiscard]] std::string SerializeReply(const HttpReply& reply, bool head, bool keep_alive);

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // `on_close` runs once when the connection is destroyed (on any thread). `tls`: serve
  // TLS with this context; null: plaintext.
  HttpConnection(boost::asio::ip::tcp::socket socket, HttpConnectionContext* context,
                 std::function<void()> on_close, TlsContextPtr tls = nullptr);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Serves requests until the peer leaves, an error, or Stop. Run on the io thread; `self`
  // (this connection) keeps it alive meanwhile.
  boost::asio::awaitable<void> Serve(std::shared_ptr<HttpConnection> self);

  // Closes the connection if it is waiting for (or reading) a request; one whose request is
  // with a worker is closed after its answer. On the io thread.
  void StopIfIdle();

 private:
  struct Outcome {
    HttpReply reply;  // what was answered (its status is counted)
    bool streamed = false;
  };

  // TLS: the first bytes and the handshake, under the request deadline. False when the
  // connection must close (failed, timed out, or a plaintext client was answered).
  boost::asio::awaitable<bool> Handshake();
  // Waits for and reads one request; nullopt when the connection must close (an error was
  // answered, or the peer left or timed out).
  boost::asio::awaitable<std::optional<HttpRequest>> ReadRequest(bool* keep_alive);
  // Answers an error detected while reading, then closes gracefully.
  boost::asio::awaitable<void> AnswerAndClose(HttpReply reply, const std::string& path);
  // Writes `data` under the write deadline; false on failure or timeout.
  boost::asio::awaitable<bool> Write(std::string data);
  // Runs the request on a worker; the completion comes back on the io thread.
  boost::asio::awaitable<Outcome> RunOnWorker(HttpRequest request);
  // On the worker: the answer of a streamed reply, written chunk by chunk.
  bool Stream(const HttpReply& reply);
  // From a worker: writes `data` on the io thread and waits for it (bounded).
  bool BlockingWrite(std::string data);
  // Half-closes and discards what the peer still sends (briefly), so that it reads our
  // answer instead of a reset, then closes.
  boost::asio::awaitable<void> Linger();

  MaybeTlsStream<boost::beast::tcp_stream> stream_;
  boost::beast::flat_buffer buffer_;
  HttpConnectionContext* context_;
  std::function<void()> on_close_;
  bool busy_ = false;  // a worker has the request (io thread only)
  std::string peer_;
};

}  // namespace kvatlas::server
