#include "server/api/peer_http_client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <exception>
#include <optional>

#include "common/internal/tls.h"
#include "common/internal/tls_stream.h"
#include "server/api/await_error.h"

namespace kvatlas::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using Stream = MaybeTlsStream<beast::tcp_stream>;

class Exchange {
 public:
  Exchange(const PeerHttpOptions* peer_options, const HostPort* address,
           const PeerHttpRequest* sent, PeerHttpTimeouts limits)
      : peer(peer_options), to(address), request(sent), timeouts(limits) {}

  const PeerHttpOptions* peer;
  const HostPort* to;
  const PeerHttpRequest* request;
  PeerHttpTimeouts timeouts;
  TlsContextPtr tls;  // null: plaintext
  bool nothing_sent = false;
  std::optional<Result<PeerHttpAnswer>> outcome;

  Status Failed(const std::string& what) const {
    return Status::Unavailable(std::string(peer->tls ? "https://" : "http://") + to->ToString() +
                               ": " + what);
  }

  asio::awaitable<void> Run() {
    error_code ec;
    const auto executor = co_await asio::this_coro::executor;
    asio::ip::tcp::resolver resolver(executor);
    beast::tcp_stream tcp(executor);
    tcp.expires_after(timeouts.connect);
    const auto endpoints =
        co_await resolver.async_resolve(to->host, std::to_string(to->port), AwaitError(ec));
    if (ec) {
      nothing_sent = true;
      outcome = Failed("cannot resolve " + to->host + ": " + ec.message());
      co_return;
    }
    co_await tcp.async_connect(endpoints, AwaitError(ec));
    if (ec) {
      nothing_sent = true;
      outcome =
          Failed(ec == beast::error::timeout ? "connection not open within " +
                                                   std::to_string(timeouts.connect.count()) + " ms"
                                             : "connect: " + ec.message());
      co_return;
    }
    Stream stream(std::move(tcp), tls);
    stream.next_layer().expires_after(timeouts.exchange);
    if (stream.is_tls()) {
      if (const Status named = SetTlsPeerName(stream.native_handle(), to->host); !named.ok()) {
        outcome = Failed(named.message());
        co_return;
      }
      co_await stream.tls().async_handshake(asio::ssl::stream_base::client, AwaitError(ec));
      if (ec) {
        outcome = Failed("TLS handshake: " + TlsFailureReason(ec, stream.native_handle()));
        co_return;
      }
    }
    const http::verb verb = http::string_to_verb(request->method);
    http::request<http::string_body> out(verb, request->target, 11);
    out.set(http::field::host, to->ToString());
    out.set(http::field::connection, "close");
    for (const auto& [name, value] : request->headers) out.set(name, value);
    out.body() = request->body;
    out.prepare_payload();
    co_await http::async_write(stream, out, AwaitError(ec));
    if (ec) {
      outcome = Failed("sending the request: " + ec.message());
      co_return;
    }
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxPeerAnswerBytes);
    co_await http::async_read(stream, buffer, parser, AwaitError(ec));
    if (ec) {
      outcome =
          Failed(ec == beast::error::timeout
                     ? "no whole answer within " + std::to_string(timeouts.exchange.count()) + " ms"
                     : "reading the answer: " + ec.message());
      co_return;
    }
    PeerHttpAnswer answer;
    answer.status = static_cast<int>(parser.get().result_int());
    for (const auto& field : parser.get()) {
      answer.headers.emplace(std::string(field.name_string()), std::string(field.value()));
    }
    answer.body = std::move(parser.get().body());
    outcome = std::move(answer);
    stream.next_layer().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  }
};

}  // namespace

Result<PeerHttpAnswer> SendPeerHttp(const PeerHttpOptions& peer, const HostPort& to,
                                    const PeerHttpRequest& request, PeerHttpTimeouts timeouts,
                                    bool* nothing_sent) {
  if (nothing_sent != nullptr) *nothing_sent = false;
  Exchange exchange{&peer, &to, &request, timeouts};
  if (http::string_to_verb(request.method) == http::verb::unknown) {
    return exchange.Failed("unknown method \"" + request.method + "\"");
  }
  if (peer.tls) {
    Result<TlsContextPtr> context =
        MakeClientTlsContext(TlsClientFiles{peer.ca_file, peer.cert_file, peer.key_file});
    if (!context.has_value()) return exchange.Failed(context.error().message());
    exchange.tls = std::move(context).value();
  }
  asio::io_context io;
  std::exception_ptr failure;
  asio::co_spawn(io, exchange.Run(), [&failure](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      return exchange.Failed(std::string("unexpected error: ") + e.what());
    }
  }
  if (nothing_sent != nullptr) *nothing_sent = exchange.nothing_sent;
  if (!exchange.outcome) return exchange.Failed("no answer");
  return std::move(*exchange.outcome);
}

}  // namespace kvatlas::server
