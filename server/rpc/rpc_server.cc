#include "server/rpc/rpc_server.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <utility>

#include "kvatlas/common/log.h"

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

}  // namespace

RpcServer::RpcServer(RpcServerOptions options, const ApiServices* api)
    : options_(std::move(options)), handler_(api), io_(static_cast<int>(options_.threads)) {}

RpcServer::~RpcServer() { Stop(); }

Status RpcServer::Start() {
  KVATLAS_ASSIGN_OR_RETURN(const tcp::endpoint endpoint,
                           Resolve(io_, options_.host, options_.port));
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  acceptor_.emplace(io_);
  error_code ec;
  acceptor_->open(endpoint.protocol(), ec);
  if (!ec) acceptor_->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_->bind(endpoint, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("rpc_listen: cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_->local_endpoint().port();

  work_.emplace(io_.get_executor());
  asio::co_spawn(io_, AsyncAccept(), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      LogError(std::string("rpc accept loop failed: ") + ex.what());
    }
  });
  for (size_t i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { RunThread(); });
  return Status::Ok();
}

void RpcServer::RunThread() {
  // Handlers report their errors themselves; an exception here is a bug in one handler and
  // must not take the other connections down with the thread.
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      LogError(std::string("rpc io thread: unexpected exception: ") + e.what());
    }
  }
}

asio::awaitable<void> RpcServer::AsyncAccept() {
  asio::steady_timer backoff(io_);
  for (;;) {
    // Each connection gets its own strand: its reader, writer and watchdog never overlap.
    tcp::socket socket(asio::make_strand(io_));
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
    Metrics* metrics = handler_.api().metrics;
    uint64_t id = 0;
    {
      std::lock_guard lock(mu_);
      if (!accepting_) co_return;
      id = next_connection_id_++;
    }
    metrics->RpcConnectionOpened();
    auto connection = std::make_shared<RpcConnection>(std::move(socket), &handler_,
                                                      options_.connection, [this, id, metrics] {
                                                        metrics->RpcConnectionClosed();
                                                        std::lock_guard lock(mu_);
                                                        live_.erase(id);
                                                        closed_cv_.notify_all();
                                                      });
    {
      std::lock_guard lock(mu_);
      live_.emplace(id, connection);
    }
    connection->Start();
  }
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
  asio::post(io_, [this] {
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
  work_.reset();
  io_.stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

}  // namespace kvatlas::server
