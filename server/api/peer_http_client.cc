#include "server/api/peer_http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream_base.hpp>
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

  // The exchange, step by step: each step starts one Asio operation and runs the
  // io_context until it completes (no coroutines: this file builds with the routes, which
  // the HTTP-request fuzzer compiles with clang, without Asio's coroutine support).
  void Run(asio::io_context& io) {
    asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream tcp(io);
    tcp.expires_after(timeouts.connect);
    asio::ip::tcp::resolver::results_type endpoints;
    error_code ec = Step(io, [&](auto done) {
      resolver.async_resolve(to->host, std::to_string(to->port),
                             [&endpoints, done](error_code e, auto results) {
                               endpoints = std::move(results);
                               done(e);
                             });
    });
    if (ec) {
      nothing_sent = true;
      outcome = Failed("cannot resolve " + to->host + ": " + ec.message());
      return;
    }
    ec = Step(io, [&](auto done) { tcp.async_connect(endpoints, Drop(done)); });
    if (ec) {
      nothing_sent = true;
      outcome =
          Failed(ec == beast::error::timeout ? "connection not open within " +
                                                   std::to_string(timeouts.connect.count()) + " ms"
                                             : "connect: " + ec.message());
      return;
    }
    Stream stream(std::move(tcp), tls);
    stream.next_layer().expires_after(timeouts.exchange);
    if (stream.is_tls()) {
      if (const Status named = SetTlsPeerName(stream.native_handle(), to->host); !named.ok()) {
        outcome = Failed(named.message());
        return;
      }
      ec = Step(io, [&](auto done) {
        stream.tls().async_handshake(asio::ssl::stream_base::client, Drop(done));
      });
      if (ec) {
        outcome = Failed("TLS handshake: " + TlsFailureReason(ec, stream.native_handle()));
        return;
      }
    }
    const http::verb verb = http::string_to_verb(request->method);
    http::request<http::string_body> out(verb, request->target, 11);
    out.set(http::field::host, to->ToString());
    out.set(http::field::connection, "close");
    for (const auto& [name, value] : request->headers) out.set(name, value);
    out.body() = request->body;
    out.prepare_payload();
    ec = Step(io, [&](auto done) { http::async_write(stream, out, Drop(done)); });
    if (ec) {
      outcome = Failed("sending the request: " + ec.message());
      return;
    }
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxPeerAnswerBytes);
    ec = Step(io, [&](auto done) { http::async_read(stream, buffer, parser, Drop(done)); });
    if (ec) {
      outcome =
          Failed(ec == beast::error::timeout
                     ? "no whole answer within " + std::to_string(timeouts.exchange.count()) + " ms"
                     : "reading the answer: " + ec.message());
      return;
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

 private:
  // Starts an operation with `start(done)` and runs `io` until it is over; its error.
  template <class Start>
  static error_code Step(asio::io_context& io, Start start) {
    error_code result;
    bool finished = false;
    start([&result, &finished](error_code ec) {
      result = ec;
      finished = true;
    });
    io.restart();
    io.run();
    return finished ? result : make_error_code(asio::error::operation_aborted);
  }
  // An Asio completion handler that passes on only the error (of (ec, bytes), (ec, endpoint)).
  template <class Done>
  static auto Drop(Done done) {
    return [done](error_code ec, auto&&...) { done(ec); };
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
  try {
    exchange.Run(io);
  } catch (const std::exception& e) {  // Asio's and Beast's: allocation failures
    return exchange.Failed(std::string("unexpected error: ") + e.what());
  }
  if (nothing_sent != nullptr) *nothing_sent = exchange.nothing_sent;
  if (!exchange.outcome) return exchange.Failed("no answer");
  return std::move(*exchange.outcome);
}

}  // namespace kvatlas::server
