// HttpServer: serves a Router over HTTP/1.1 (Boost.Beast on Boost.Asio). It owns the
// cross-cutting rules of the REST API: access control through the router's HttpAccess (the
// Host header before routing; token and role before the handler; the admin audit after
// it), JSON Content-Type on bodies (strict on write routes), 404/405 answers as JSON, errors
// found while reading a request (413 oversized body, 431 oversized header, 400 malformed
// request) as JSON, escaping exceptions as 500 JSON, and request metrics. Every error body
// is ErrorReply(status).
//
// Threading: one io thread accepts connections and reads requests (HttpConnection: a
// whole-request deadline, header and body limits, chunked bodies included); a waiting or
// idle connection costs a socket and a small buffer, no thread. Connections are capped in
// total and per peer address (past either, a new connection gets a 503 and is closed). A
// complete request runs on a worker of a bounded pool (`threads`), because handlers block
// (a write waiting to be applied, forwarding, an SSE stream); past the pool's queue the
// answer is 503. The answer is written back by the io thread under a write deadline.
//
// TLS: with options.tls every connection is served over TLS with the context current at its
// accept; its handshake is bounded by request_timeout and the connection counts toward the
// caps from its accept (HttpConnection). Past a cap, a TLS connection is closed without an
// answer (a plaintext 503 would mean nothing to a TLS client).
//
// Thread-safety: Start/Stop from one owner thread; handlers run on the worker threads.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/internal/connection_limiter.h"
#include "common/internal/tls.h"
#include "common/internal/worker_pool.h"
#include "kvatlas/common/status.h"
#include "server/api/http_connection.h"
#include "server/api/router.h"
#include "server/service/metrics.h"

namespace kvatlas::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7070;  // 0 = any free port (see port() after Start)
  // A socket already bound to host:port and not listening (server/runtime/listen_socket.h):
  // Start listens on a duplicate of it instead of binding; -1 = Start binds host:port.
  int listen_fd = -1;
  // Worker threads, i.e. requests served at once; a request waiting for its write to be
  // applied holds one.
  size_t threads = 8;
  // Complete requests waiting for a worker; past it, 503.
  size_t max_queued_requests = 1024;
  // Larger bodies (Content-Length or chunked) are refused with 413 before they are read.
  size_t max_body_bytes = 16u << 20;
  // Request line and headers; past it, 431.
  size_t max_header_bytes = 16u << 10;
  // From a request's first byte to its last; past it the connection is closed.
  std::chrono::milliseconds request_timeout{10'000};
  // A keep-alive connection waiting for its next request is closed after this.
  std::chrono::milliseconds idle_timeout{5'000};
  std::chrono::milliseconds write_timeout{5'000};
  size_t max_connections = 2048;
  size_t max_connections_per_peer = 256;
  // Serve TLS with its current context; null: plaintext. Not owned; outlives the server.
  const ReloadableTlsContext* tls = nullptr;
};

class HttpServer {
 public:
  // `metrics` must outlive the server.
  HttpServer(HttpServerOptions options, Router router, Metrics* metrics);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and serves on background threads. Connections made after Start
  // returns are served (the kernel queues them until the accept loop runs).
  // kUnavailable if the address cannot be bound (in use, not local, no permission).
  [[nodiscard]] Status Start();

  // The bound port (the chosen one when options.port was 0). REQUIRES: Start succeeded.
  uint16_t port() const { return port_; }

  // Stops accepting, closes idle connections, lets in-flight requests finish (their
  // answers are written) and joins the threads. Idempotent.
  void Stop();

 private:
  // Routes one request (worker thread): Host, HEAD as GET, 404/405, access, Content-Type,
  // exceptions.
  HttpReply Handle(const HttpRequest& request) const;
  boost::asio::awaitable<void> AsyncAccept();
  // Uncounts a connection from `peer` (limiter_) and forgets it (live_).
  void Release(const std::string& peer, uint64_t id);

  HttpServerOptions options_;
  Router router_;
  Metrics* metrics_;
  HttpConnectionContext context_;
  std::unique_ptr<WorkerPool> pool_;
  std::thread thread_;
  uint16_t port_ = 0;

  ConnectionLimiter limiter_;
  std::mutex mu_;  // guards the members below
  std::condition_variable closed_cv_;
  std::map<uint64_t, std::weak_ptr<HttpConnection>> live_;
  uint64_t next_id_ = 0;

  // Last, so destroyed first: connections still queued in the io_context release their
  // counts (Release) while the members above exist.
  boost::asio::io_context io_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
};

}  // namespace kvatlas::server
