// RpcServer: serves the binary protocol (docs/protocol.md) on a TCP port with Boost.Asio
// C++20 coroutines. `threads` io_contexts, each run by exactly one thread; connections are
// dealt to them round robin and live on theirs for good, so a connection's coroutines never
// run concurrently (the single thread is the connection's strand) while different
// connections use all threads. One thread per io_context, rather than one io_context run by
// every thread with a strand per connection, keeps a request's reader -> writer handoff on
// one thread: with a shared io_context each completion could wake another thread (a futex
// round trip, tens of µs on a VM) and the two threads contended for the scheduler's lock. Requests
// are answered by RpcHandler: reads inline on the io thread, ingests through Applier::SubmitAsync,
// whose callback posts the answer back to the connection's strand (no io thread ever waits on the
// Applier).
//
// TLS: with options.tls every accepted connection is served over TLS with the context current
// at its accept (ReloadableTlsContext), handshake first (RpcConnection).
//
// Thread-safety: Start/Stop from one owner thread.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/internal/connection_limiter.h"
#include "common/internal/tls.h"
#include "kvatlas/common/status.h"
#include "server/rpc/rpc_buffer_budget.h"
#include "server/rpc/rpc_connection.h"
#include "server/rpc/rpc_handler.h"

namespace kvatlas::server {

struct RpcServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7071;  // 0 = any free port (see port() after Start)
  // A socket already bound to host:port and not listening (server/runtime/listen_socket.h):
  // Start listens on a duplicate of it instead of binding; -1 = Start binds host:port.
  int listen_fd = -1;
  // io threads (each with its own io_context). Lookups run on them (µs each), so more
  // threads than cores buys nothing; one connection is served by one thread.
  size_t threads = 2;
  RpcConnectionOptions connection;
  // Bytes all connections together may hold for incomplete large frames
  // (RpcBufferBudget); a frame larger than this is refused with kResourceExhausted.
  size_t max_buffered_bytes = 256u << 20;
  // How long Stop() lets connections answer their in-flight requests before it closes
  // them regardless.
  std::chrono::milliseconds shutdown_grace{5'000};
  // Open connections, and open connections from one peer address; past either, a new
  // connection gets an `unavailable` error frame naming the cap and is closed.
  size_t max_connections = 2048;
  size_t max_connections_per_peer = 256;
  // Serve TLS with its current context; null: plaintext. Not owned; outlives the server.
  const ReloadableTlsContext* tls = nullptr;
};

class RpcServer {
 public:
  // `services` (and everything it points to) must outlive the server, including the Applier:
  // ingest callbacks post into this server's io_context, so destroy the server only after
  // the Applier has stopped.
  RpcServer(RpcServerOptions options, const Services* services);
  ~RpcServer();  // Stop()s
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Binds host:port and starts the io threads. kUnavailable if the address cannot be
  // resolved or bound.
  [[nodiscard]] Status Start();

  // The bound port. REQUIRES: Start succeeded.
  uint16_t port() const { return port_; }

  // After the token set was replaced (SIGHUP): every connection re-checks its token;
  // those whose token was removed end (RpcConnection::RecheckCredentials). Thread-safe.
  void RecheckCredentials();

  // Stops accepting, lets each connection answer what it has in flight (up to
  // shutdown_grace), closes the connections and joins the threads. Idempotent. Ingest
  // answers that arrive later are dropped (the Applier still applies the batches).
  void Stop();

 private:
  boost::asio::awaitable<void> AsyncAccept();
  void RunThread(boost::asio::io_context& io);

  RpcServerOptions options_;
  RpcHandler handler_;
  RpcBufferBudget budget_;     // outlives the connections (ios_ below)
  ConnectionLimiter limiter_;  // likewise: closing connections release into it
  uint16_t port_ = 0;
  bool stopped_ = false;

  std::mutex mu_;
  std::condition_variable closed_cv_;
  uint64_t next_connection_id_ = 0;                                  // guarded by mu_
  std::unordered_map<uint64_t, std::weak_ptr<RpcConnection>> live_;  // guarded by mu_
  bool accepting_ = true;                                            // guarded by mu_

  // Declared last: destroyed first, so handlers they still hold (connections) are gone
  // before the members above. The acceptor runs on ios_[0].
  using WorkGuard = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;
  std::vector<std::unique_ptr<boost::asio::io_context>> ios_;
  size_t next_io_ = 0;  // accept loop only
  std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
  std::vector<WorkGuard> work_;
  std::vector<std::thread> threads_;
};

}  // namespace kvatlas::server
