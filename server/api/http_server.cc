#include "server/api/http_server.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <exception>
#include <optional>
#include <utility>

#include "common/internal/log.h"
#include "common/internal/tcp_acceptor.h"
#include "common/internal/thread_name.h"
#include "server/api/http_access.h"

namespace kvatlas::server {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr std::string_view kFormType = "application/x-www-form-urlencoded";

Result<tcp::endpoint> Endpoint(asio::io_context& io, const std::string& host, uint16_t port) {
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(address, port);
  tcp::resolver resolver(io);
  const auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || found.empty()) return Status::Unavailable("cannot resolve \"" + host + "\"");
  return found.begin()->endpoint();
}

// A refused connection's answer, written without waiting (a fresh socket's send buffer
// holds it), then the socket is closed. A TLS client gets no answer (it expects a
// handshake).
void Refuse(tcp::socket& socket, const std::string& why, bool tls) {
  const std::string answer =
      SerializeReply(ErrorReply(Status::Unavailable(why)), /*head=*/false, /*keep_alive=*/false);
  error_code ec;
  socket.non_blocking(true, ec);
  if (!ec && !tls) (void)socket.write_some(asio::buffer(answer), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

// The declared media type, lower case, without parameters; "" when absent.
std::string MediaType(const HttpRequest& request) {
  const std::string declared = request.Header("Content-Type");
  std::string media = Lower(declared.substr(0, declared.find(';')));
  media.erase(media.find_last_not_of(" \t") + 1);
  return media;
}

// Bodies are JSON. On read routes: no Content-Type (some router clients omit it), JSON types,
// and curl's default for -d (x-www-form-urlencoded), so that `curl -d '{...}'` works. On
// write, admin and internal routes (`strict`) only JSON types: the others, none included,
// are what a browser sends cross-origin without a CORS preflight (docs/security.md
// §Browser-borne requests). Any other declared type is refused rather than misread.
Status CheckJsonContentType(const HttpRequest& request, bool strict) {
  const std::string media = MediaType(request);
  if (media == "application/json" || media.ends_with("+json")) return Status::Ok();
  if (!strict && (media.empty() || media == kFormType)) return Status::Ok();
  const std::string declared = request.HasHeader("Content-Type")
                                   ? "\"" + request.Header("Content-Type") + "\""
                                   : std::string("none");
  return Status(StatusCode::kUnsupportedMediaType,
                "Content-Type must be application/json, got " + declared +
                    (strict ? " (writes take only JSON: docs/security.md)" : ""));
}

HttpReply RunHandler(const Router& router, const Route& route, const HttpRequest& request,
                     std::string_view path_param, const PeerCall* peer,
                     const Principal* principal) {
  try {
    const RouteRequest route_request{request, path_param, peer, principal};
    Result<HttpReply> reply = route.handler(route_request);
    if (reply.has_value()) return std::move(reply).value();
    if (reply.error().code() == StatusCode::kNotLeader && router.not_leader_handler()) {
      return router.not_leader_handler()(route_request, reply.error(),
                                         [&] { return route.handler(route_request); });
    }
    return ErrorReply(reply.error());
  } catch (const std::exception& e) {
    LogError("handler " + request.method + " " + request.path + " threw: " + e.what());
    return ErrorReply(Status::Internal(std::string("unexpected error: ") + e.what()));
  } catch (...) {
    LogError("handler " + request.method + " " + request.path + " threw a non-exception");
    return ErrorReply(Status::Internal("unexpected error"));
  }
}

// Access control (HttpAccess: token and role), the Content-Type of a body, the handler, and
// the audit of an admin route. `peer`: the verified internal call, or null.
HttpReply RunRoute(const Router& router, const Route& route, const HttpRequest& request,
                   std::string_view path_param, const PeerCall* peer) {
  const HttpAccess* access = router.access();
  std::optional<Principal> principal;
  if (access != nullptr) {
    Result<Principal> admitted = access->Admit(route, request);
    if (!admitted) return RefusalReply(admitted.error());
    principal = std::move(*admitted);
  }
  if (route.json_body()) {
    if (Status s = CheckJsonContentType(request, route.strict_json()); !s.ok()) {
      return ErrorReply(s);
    }
  } else if (!route.body_type.empty() && MediaType(request) != route.body_type) {
    return ErrorReply(Status(StatusCode::kUnsupportedMediaType,
                             "Content-Type must be " + route.body_type + ", got \"" +
                                 request.Header("Content-Type") + "\""));
  }
  HttpReply reply =
      RunHandler(router, route, request, path_param, peer, principal ? &*principal : nullptr);
  if (access != nullptr) access->Finished(route, request, *principal, reply);
  return reply;
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, Router router, Metrics* metrics)
    : options_(std::move(options)),
      router_(std::move(router)),
      metrics_(metrics),
      limiter_(options_.max_connections, options_.max_connections_per_peer) {
  context_.max_header_bytes = options_.max_header_bytes;
  context_.max_body_bytes = options_.max_body_bytes;
  context_.request_timeout = options_.request_timeout;
  context_.idle_timeout = options_.idle_timeout;
  context_.write_timeout = options_.write_timeout;
  context_.handle = [this](const HttpRequest& request) { return Handle(request); };
  context_.submit = [this](std::function<void()> job) { return pool_->Submit(std::move(job)); };
  context_.record = [this](const std::string& path, int status, std::optional<double> seconds) {
    metrics_->RecordRequest(router_.Label(path), status, seconds);
  };
  context_.tls_failed = [this] { metrics_->TlsHandshakeFailed(/*http=*/true); };
}

HttpServer::~HttpServer() { Stop(); }

HttpReply HttpServer::Handle(const HttpRequest& request) const {
  // HEAD is served by the GET route; the connection drops the body.
  std::string_view method = request.method;
  if (method == "HEAD") method = "GET";
  if (const HttpAccess* access = router_.access()) {
    // Before routing: a request naming another host is refused whatever its path.
    if (Status s = access->CheckHost(request); !s.ok()) return ErrorReply(s);
  }
  const RouteMatch match = router_.Find(method, request.path);
  if (match.route != nullptr) {
    const Router::PeerCalls& peers = router_.peer_calls();
    if (!peers.verify || !request.HasHeader(kPeerAuthHeader)) {
      return RunRoute(router_, *match.route, request, match.path_param, nullptr);
    }
    // An internal call from another member: verified first, its answer signed.
    Result<PeerCall> peer = peers.verify(request);
    if (!peer.has_value()) return ErrorReply(peer.error());
    HttpReply reply = RunRoute(router_, *match.route, request, match.path_param, &*peer);
    // A streamed answer's signature covers its status (its body is empty here).
    peers.sign(*peer, &reply);
    return reply;
  }
  if (match.allowed.empty()) return ErrorReply(Status::NotFound("no route for " + request.path));
  HttpReply reply = ErrorReply(Status(
      StatusCode::kMethodNotAllowed,
      request.method + " is not allowed on " + request.path + " (allowed: " + match.allowed + ")"));
  reply.headers.emplace_back("Allow", match.allowed);
  return reply;
}

Status HttpServer::Start() {
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  Result<tcp::endpoint> endpoint = Endpoint(io_, options_.host, options_.port);
  if (!endpoint.has_value()) return endpoint.error();
  acceptor_.emplace(io_);
  if (const error_code ec = ListenOn(*acceptor_, endpoint.value(), options_.listen_fd)) {
    return Status::Unavailable("cannot listen on " + where + ": " + ec.message());
  }
  port_ = acceptor_->local_endpoint().port();
  pool_ =
      std::make_unique<WorkerPool>(options_.threads, options_.max_queued_requests, "http-worker");
  work_.emplace(io_.get_executor());
  asio::co_spawn(io_, AsyncAccept(), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      LogError(std::string("HTTP accept loop failed: ") + ex.what());
    }
  });
  thread_ = std::thread([this] {
    SetCurrentThreadName("http-io");
    // An exception here is a bug in one connection: log it and keep serving the others.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        LogError(std::string("HTTP io thread: unexpected exception: ") + e.what());
      }
    }
  });
  return Status::Ok();
}

void HttpServer::Release(const std::string& peer, uint64_t id) {
  limiter_.Release(peer);
  std::lock_guard lock(mu_);
  live_.erase(id);
  closed_cv_.notify_all();
}

asio::awaitable<void> HttpServer::AsyncAccept() {
  asio::steady_timer backoff(io_);
  for (;;) {
    tcp::socket socket(io_);
    error_code ec;
    co_await acceptor_->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
    if (ec) {
      // E.g. out of file descriptors: wait a little instead of spinning.
      LogWarning("HTTP accept failed: " + ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    const auto remote = socket.remote_endpoint(ec);
    if (ec) continue;  // already gone
    const std::string peer = remote.address().to_string();
    if (!limiter_.Admit(peer)) {
      Refuse(socket,
             "too many HTTP connections (http_max_connections " +
                 std::to_string(options_.max_connections) + ", http_max_connections_per_peer " +
                 std::to_string(options_.max_connections_per_peer) + ")",
             options_.tls != nullptr);
      continue;
    }
    uint64_t id = 0;
    {
      std::lock_guard lock(mu_);
      id = next_id_++;
    }
    auto connection = std::make_shared<HttpConnection>(
        std::move(socket), &context_, [this, peer, id] { Release(peer, id); },
        options_.tls != nullptr ? options_.tls->Current() : nullptr);
    {
      std::lock_guard lock(mu_);
      live_.emplace(id, connection);
    }
    asio::co_spawn(io_, connection->Serve(connection), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        LogError(std::string("HTTP connection failed: ") + ex.what());
      }
    });
  }
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  context_.stopping = true;
  // Stop accepting and close the connections waiting for a request; those whose request is
  // with a worker close after writing its answer (streams end at their next write).
  asio::post(io_, [this] {
    error_code ec;
    acceptor_->close(ec);
    std::vector<std::shared_ptr<HttpConnection>> live;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, weak] : live_) {
        if (auto connection = weak.lock()) live.push_back(std::move(connection));
      }
    }
    for (const auto& connection : live) connection->StopIfIdle();
  });
  pool_->Stop();
  {
    // The last answers are being written: each is bounded by the write deadline.
    std::unique_lock lock(mu_);
    closed_cv_.wait_for(lock, options_.write_timeout + std::chrono::seconds(1),
                        [this] { return limiter_.open() == 0; });
  }
  work_.reset();
  io_.stop();
  thread_.join();
}

}  // namespace kvatlas::server
