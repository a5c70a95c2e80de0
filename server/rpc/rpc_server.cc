#include "server/rpc/rpc_server.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <utility>

#include "common/internal/log.h"
#include "common/internal/tcp_acceptor.h"
#include "common/internal/thread_name.h"

namespace kvatlas::server {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

Result<tcp::endpoint> Resolve(asio::io_context& io, const std::string& host, uint16_t port) {
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(address, port);
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    return Status::Unavailable("rpc_listen: cannot resolve \"" + host +
                               "\": " + (ec ? ec.message() : "no address"));
  }
  return results.begin()->endpoint();
}

// Answers a connection past a cap with an `unavailable` error frame (id 0, kError) and
// closes it, without blocking the accept loop: a client that does not read loses the
// frame. A TLS client gets no frame (it expects a handshake) and sees the close.
void Refuse(tcp::socket& socket, const std::string& why, bool tls) {
  const Status status = Status::Unavailable(why);
  std::string frame;
  protocol::FrameHeader header;
  header.type = protocol::MessageType::kError;
  header.flags = protocol::kFlagResponse;
  header.status = status.code();
  protocol::AppendFrame(header, protocol::EncodeErrorPayload(status), &frame);
  error_code ec;
  socket.non_blocking(true, ec);
  if (!ec && !tls) (void)socket.write_some(asio::buffer(frame), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

}  // namespace

RpcServer::RpcServer(RpcServerOptions options, const Services* services)
    : options_(std::move(options)),
      handler_(services),
      budget_(options_.max_buffered_bytes, services->metrics),
      limiter_(options_.max_connections, options_.max_connections_per_peer) {
  // Concurrency hint 1: each io_context is run by one thread, which lets Asio skip locking
  // on that thread's own queue (posts from other threads, e.g. the applier, stay safe).
  const size_t n = std::max<size_t>(1, options_.threads);
  for (size_t i = 0; i < n; ++i) ios_.push_back(std::make_unique<asio::io_context>(1));
}

RpcServer::~RpcServer() { Stop(); }

Status RpcServer::Start() {
  KVATLAS_ASSIGN_OR_RETURN(const tcp::endpoint endpoint,
                           Resolve(*ios_[0], options_.host, options_.port));
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  acceptor_.emplace(*ios_[0]);
  if (const error_code ec = ListenOn(*acceptor_, endpoint, options_.listen_fd)) {
    return Status::Unavailable("rpc_listen: cannot listen on " + where + ": " + ec.message());
  }
  port_ = acceptor_->local_endpoint().port();

  for (const auto& io : ios_) work_.emplace_back(io->get_executor());
  asio::co_spawn(*ios_[0], AsyncAccept(), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      LogError(std::string("rpc accept loop failed: ") + ex.what());
    }
  });
  for (const auto& io : ios_) threads_.emplace_back([this, &io = *io] { RunThread(io); });
  return Status::Ok();
}

void RpcServer::RunThread(asio::io_context& io) {
  SetCurrentThreadName("rpc-io");
  // Handlers report their errors themselves; an exception here is a bug in one handler and
  // must not take the other connections down with the thread.
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      LogError(std::string("rpc io thread: unexpected exception: ") + e.what());
    }
  }
}

asio::awaitable<void> RpcServer::AsyncAccept() {
  asio::steady_timer backoff(*ios_[0]);
  for (;;) {
    // Each connection lives on one single-threaded io_context, its implicit strand: its
    // reader, writer and watchdog never overlap.
    asio::io_context& io = *ios_[next_io_++ % ios_.size()];
    tcp::socket socket(io);
    error_code ec;
    co_await acceptor_->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
    if (ec) {
      // E.g. out of file descriptors: wait a little instead of spinning.
      LogWarning("rpc accept failed: " + ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);  // answers are small; never wait for ACKs
    const auto remote = socket.remote_endpoint(ec);
    if (ec) continue;  // already gone
    const std::string peer = remote.address().to_string();
    if (!limiter_.Admit(peer)) {
      Refuse(socket,
             "too many binary-protocol connections (rpc_max_connections " +
                 std::to_string(options_.max_connections) + ", rpc_max_connections_per_peer " +
                 std::to_string(options_.max_connections_per_peer) + ")",
             options_.tls != nullptr);
      continue;
    }
    Metrics* metrics = handler_.services().metrics;
    uint64_t id = 0;
    {
      std::lock_guard lock(mu_);
      if (!accepting_) {
        limiter_.Release(peer);
        co_return;
      }
      id = next_connection_id_++;
    }
    metrics->RpcConnectionOpened();
    auto connection = std::make_shared<RpcConnection>(
        std::move(socket), &handler_, &budget_, options_.connection,
        [this, id, metrics, peer] {
          metrics->RpcConnectionClosed();
          limiter_.Release(peer);
          std::lock_guard lock(mu_);
          live_.erase(id);
          closed_cv_.notify_all();
        },
        options_.tls != nullptr ? options_.tls->Current() : nullptr);
    {
      std::lock_guard lock(mu_);
      live_.emplace(id, connection);
    }
    connection->Start();
  }
}

void RpcServer::RecheckCredentials() {
  std::vector<std::shared_ptr<RpcConnection>> connections;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, weak] : live_) {
      if (auto connection = weak.lock()) connections.push_back(std::move(connection));
    }
  }
  for (const auto& connection : connections) connection->RecheckCredentials();
}

void RpcServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (threads_.empty()) return;  // never started
  std::vector<std::shared_ptr<RpcConnection>> connections;
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    for (const auto& [id, weak] : live_) {
      if (auto connection = weak.lock()) connections.push_back(std::move(connection));
    }
  }
  asio::post(*ios_[0], [this] {
    error_code ec;
    acceptor_->close(ec);
  });
  for (const auto& connection : connections) connection->Shutdown();
  connections.clear();
  {
    std::unique_lock lock(mu_);
    if (!closed_cv_.wait_for(lock, options_.shutdown_grace, [this] { return live_.empty(); })) {
      LogWarning("rpc: " + std::to_string(live_.size()) +
                 " connection(s) still answering after the shutdown grace; closing them");
    }
  }
  work_.clear();
  for (const auto& io : ios_) io->stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

}  // namespace kvatlas::server
