// HttpServer: serves a Router over HTTP/1.1 with cpp-httplib's worker pool. It owns the
// cross-cutting rules of the REST API: JSON Content-Type on bodies, 404/405 answers as
// JSON, errors produced by httplib itself (413 oversized body, 400 malformed request) as
// JSON, escaping exceptions as 500 JSON, and request metrics. Every error body is
// ErrorReply(status).
//
// Thread-safety: Start/Stop from one owner thread; handlers run on the worker threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "kvatlas/common/status.h"
#include "server/api/router.h"
#include "server/service/metrics.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace kvatlas::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7070;  // 0 = any free port (see port() after Start)
  // Worker threads, i.e. requests served at once; a request waiting for its write to be
  // applied holds one.
  size_t threads = 8;
  // Larger bodies are refused with 413 before they are read.
  size_t max_body_bytes = 16u << 20;
  std::chrono::milliseconds read_timeout{5'000};
  std::chrono::milliseconds write_timeout{5'000};
};

class HttpServer {
 public:
  // `metrics` must outlive the server.
  HttpServer(HttpServerOptions options, Router router, Metrics* metrics);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and serves on a background thread. Connections made after Start
  // returns are served (the kernel queues them until the accept loop runs).
  // kUnavailable if the address cannot be bound (in use, not local, no permission).
  [[nodiscard]] Status Start();

  // The bound port (the chosen one when options.port was 0). REQUIRES: Start succeeded.
  uint16_t port() const { return port_; }

  // Stops accepting, lets in-flight requests finish and joins the threads. Idempotent.
  void Stop();

 private:
  void Dispatch(const httplib::Request& request, httplib::Response& response) const;
  // Turns an error httplib produced on its own (status set, no body) into ErrorReply.
  void FillLibraryError(const httplib::Request& request, httplib::Response& response) const;

  HttpServerOptions options_;
  Router router_;
  Metrics* metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_ended_{false};
  uint16_t port_ = 0;
};

}  // namespace kvatlas::server
