#include "server/api/peer_http_client.h"

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/internal/tls.h"
#include "common/internal/tls_stream.h"

namespace kvatlas::server {

struct PeerHttpStream::Impl {
  // Declared first, destroyed last: the stream below belongs to it.
  boost::asio::io_context io;
  std::unique_ptr<MaybeTlsStream<boost::beast::tcp_stream>> stream;
  boost::beast::flat_buffer buffer;
  boost::beast::http::response_parser<boost::beast::http::buffer_body> parser;
  std::string where;  // "http(s)://host:port", for errors
  int status = 0;
  HttpHeaders headers;
};

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using Stream = MaybeTlsStream<beast::tcp_stream>;

// Connections kept open after a read (PeerHttpRequest::idempotent) for the next read to
// the same member from the same thread. Each thread has its own, on its own io_context (a
// stream belongs to the io_context it was made on), so nothing is shared or locked.
class KeptConnections {
 public:
  asio::io_context& io() { return io_; }

  // A connection to `key` idle for less than kPeerKeptIdle, newest first; null when none.
  // Older ones are closed on the way.
  std::unique_ptr<Stream> Take(const std::string& key) {
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(kept_, [now](const Kept& k) { return now - k.idle_since >= kPeerKeptIdle; });
    for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
      if (it->key != key) continue;
      std::unique_ptr<Stream> stream = std::move(it->stream);
      kept_.erase(std::next(it).base());
      return stream;
    }
    return nullptr;
  }

  // Keeps `stream`; past kPeerKeptPerThread the oldest kept connection is closed.
  void Keep(std::string key, std::unique_ptr<Stream> stream) {
    if (kept_.size() >= kPeerKeptPerThread) kept_.erase(kept_.begin());
    kept_.push_back({std::move(key), std::move(stream), std::chrono::steady_clock::now()});
  }

 private:
  struct Kept {
    std::string key;
    std::unique_ptr<Stream> stream;
    std::chrono::steady_clock::time_point idle_since;
  };
  asio::io_context io_;     // outlives the streams below (destroyed after them)
  std::vector<Kept> kept_;  // oldest first
};

KeptConnections& ThisThreadsConnections() {
  thread_local KeptConnections connections;
  return connections;
}

std::atomic<uint64_t> connections_opened{0};

// Starts an operation with `start(done)` and runs `io` until it is over; its error.
// (No coroutines: this file builds with the routes, which the HTTP-request fuzzer compiles
// with clang, without Asio's coroutine support.)
template <class Start>
error_code Step(asio::io_context& io, Start start) {
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
auto Drop(Done done) {
  return [done](error_code ec, auto&&...) { done(ec); };
}

// How an exchange over an open connection ended.
enum class Talked {
  kAnswered,  // outcome holds the answer
  kTimedOut,  // outcome holds the error: the member may be working on it
  kFailed,    // outcome holds the error: the connection broke (a kept one may have been closed)
};

class Exchange {
 public:
  Exchange(const PeerHttpOptions* peer_options, const HostPort* address,
           const PeerHttpRequest* sent, PeerHttpTimeouts limits)
      : peer(peer_options), to(address), request(sent), timeouts(limits) {}

  const PeerHttpOptions* peer;
  const HostPort* to;
  const PeerHttpRequest* request;
  PeerHttpTimeouts timeouts;
  bool nothing_sent = false;
  bool keep_alive = false;  // the answer lets the connection carry another request
  std::optional<Result<PeerHttpAnswer>> outcome;

  Status Failed(const std::string& what) const {
    return Status::Unavailable(std::string(peer->tls ? "https://" : "http://") + to->ToString() +
                               ": " + what);
  }

  // One request on a new connection, closed after the answer.
  void Once(asio::io_context& io) {
    std::unique_ptr<Stream> stream = Connect(io);
    if (stream == nullptr) return;
    Talk(io, *stream, /*keep=*/false);
    error_code ec;
    stream->next_layer().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  }

  // A read: on a kept connection to the member if there is one, else (or when the kept one
  // turns out closed) on a new one, kept afterwards when the answer allows.
  void Reusing(KeptConnections& kept) {
    const std::string key = std::string(peer->tls ? "https://" : "http://") + to->ToString();
    if (std::unique_ptr<Stream> stream = kept.Take(key)) {
      const Talked talked = Talk(kept.io(), *stream, /*keep=*/true);
      if (talked == Talked::kAnswered && keep_alive) kept.Keep(key, std::move(stream));
      if (talked != Talked::kFailed) return;
      outcome.reset();  // the member closed it meanwhile: a read is sent again
    }
    std::unique_ptr<Stream> stream = Connect(kept.io());
    if (stream == nullptr) return;
    if (Talk(kept.io(), *stream, /*keep=*/true) == Talked::kAnswered && keep_alive) {
      kept.Keep(key, std::move(stream));
    }
  }

  // A streamed answer: a new connection, the request sent (closed after the answer), and
  // the answer's head read into `*into`. False with outcome set when any of it failed.
  bool OpenStream(PeerHttpStream::Impl* into);

 private:
  // Sends the request over `stream` (the exchange's deadline set); its error, with outcome
  // set. `keep`: ask the member to keep the connection open (else "Connection: close").
  error_code Send(asio::io_context& io, Stream& stream, bool keep) {
    stream.next_layer().expires_after(timeouts.exchange);
    const http::verb verb = http::string_to_verb(request->method);
    http::request<http::string_body> out(verb, request->target, 11);
    out.set(http::field::host, to->ToString());
    if (!keep) out.set(http::field::connection, "close");
    for (const auto& [name, value] : request->headers) out.set(name, value);
    out.body() = request->body;
    out.prepare_payload();
    const error_code ec = Step(io, [&](auto done) { http::async_write(stream, out, Drop(done)); });
    if (ec) outcome = Failed("sending the request: " + ec.message());
    return ec;
  }

  // A new connection to `to` (TLS handshake done); null with outcome set when it failed
  // (nothing_sent: it never opened).
  // The steps each start one Asio operation and run the io_context until it completes.
  std::unique_ptr<Stream> Connect(asio::io_context& io) {
    TlsContextPtr tls;  // null: plaintext
    if (peer->tls) {
      // Read on each new connection: a reloaded certificate (SIGHUP) is used from then on.
      Result<TlsContextPtr> context =
          MakeClientTlsContext(TlsClientFiles{peer->ca_file, peer->cert_file, peer->key_file});
      if (!context.has_value()) {
        outcome = Failed(context.error().message());
        return nullptr;
      }
      tls = std::move(context).value();
    }
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
      return nullptr;
    }
    ec = Step(io, [&](auto done) { tcp.async_connect(endpoints, Drop(done)); });
    if (ec) {
      nothing_sent = true;
      outcome =
          Failed(ec == beast::error::timeout ? "connection not open within " +
                                                   std::to_string(timeouts.connect.count()) + " ms"
                                             : "connect: " + ec.message());
      return nullptr;
    }
    connections_opened.fetch_add(1, std::memory_order_relaxed);
    auto stream = std::make_unique<Stream>(std::move(tcp), std::move(tls));
    if (stream->is_tls()) {
      stream->next_layer().expires_after(timeouts.exchange);
      if (const Status named = SetTlsPeerName(stream->native_handle(), to->host); !named.ok()) {
        outcome = Failed(named.message());
        return nullptr;
      }
      ec = Step(io, [&](auto done) {
        stream->tls().async_handshake(asio::ssl::stream_base::client, Drop(done));
      });
      if (ec) {
        outcome = Failed("TLS handshake: " + TlsFailureReason(ec, stream->native_handle()));
        return nullptr;
      }
    }
    return stream;
  }

  // Sends the request over `stream` and reads the whole answer into outcome. `keep`: ask
  // the member to keep the connection open (else "Connection: close").
  Talked Talk(asio::io_context& io, Stream& stream, bool keep) {
    if (const error_code ec = Send(io, stream, keep)) {
      return ec == beast::error::timeout ? Talked::kTimedOut : Talked::kFailed;
    }
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxPeerAnswerBytes);
    const error_code ec =
        Step(io, [&](auto done) { http::async_read(stream, buffer, parser, Drop(done)); });
    if (ec) {
      if (ec == beast::error::timeout) {
        outcome =
            Failed("no whole answer within " + std::to_string(timeouts.exchange.count()) + " ms");
        return Talked::kTimedOut;
      }
      outcome = Failed("reading the answer: " + ec.message());
      return Talked::kFailed;
    }
    PeerHttpAnswer answer;
    answer.status = static_cast<int>(parser.get().result_int());
    for (const auto& field : parser.get()) {
      answer.headers.emplace(std::string(field.name_string()), std::string(field.value()));
    }
    answer.body = std::move(parser.get().body());
    outcome = std::move(answer);
    keep_alive = keep && parser.keep_alive() && buffer.size() == 0;
    return Talked::kAnswered;
  }
};

bool Exchange::OpenStream(PeerHttpStream::Impl* into) {
  into->where = std::string(peer->tls ? "https://" : "http://") + to->ToString();
  into->stream = Connect(into->io);
  if (into->stream == nullptr) return false;
  if (Send(into->io, *into->stream, /*keep=*/false)) return false;
  // The head only; the body is read piece by piece (PeerHttpStream::Next).
  into->parser.body_limit(boost::none);
  const error_code ec = Step(into->io, [&](auto done) {
    http::async_read_header(*into->stream, into->buffer, into->parser, Drop(done));
  });
  if (ec) {
    outcome = Failed(ec == beast::error::timeout
                         ? "no answer within " + std::to_string(timeouts.exchange.count()) + " ms"
                         : "reading the answer: " + ec.message());
    return false;
  }
  into->status = static_cast<int>(into->parser.get().result_int());
  for (const auto& field : into->parser.get()) {
    into->headers.emplace(std::string(field.name_string()), std::string(field.value()));
  }
  return true;
}

}  // namespace

PeerHttpStream::PeerHttpStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PeerHttpStream::~PeerHttpStream() {
  if (impl_->stream == nullptr) return;
  error_code ec;
  impl_->stream->next_layer().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
}

int PeerHttpStream::status() const { return impl_->status; }

const HttpHeaders& PeerHttpStream::headers() const { return impl_->headers; }

bool PeerHttpStream::done() const { return impl_->parser.is_done(); }

Result<std::string> PeerHttpStream::Next(std::chrono::milliseconds timeout) {
  if (impl_->parser.is_done()) return std::string();
  std::string piece(kPeerStreamPieceBytes, '\0');
  auto& body = impl_->parser.get().body();
  body.data = piece.data();
  body.size = piece.size();
  impl_->stream->next_layer().expires_after(timeout);
  error_code ec;
  try {
    ec = Step(impl_->io, [&](auto done) {
      http::async_read_some(*impl_->stream, impl_->buffer, impl_->parser, Drop(done));
    });
  } catch (const std::exception& e) {  // Asio's and Beast's: allocation failures
    return Status::Unavailable(impl_->where + ": unexpected error: " + e.what());
  }
  // need_buffer: the piece is full, the rest comes with the next call.
  if (ec && ec != http::error::need_buffer) {
    return Status::Unavailable(
        impl_->where + ": " +
        (ec == beast::error::timeout
             ? "nothing of the answer arrived within " + std::to_string(timeout.count()) + " ms"
             : "reading the answer: " + ec.message()));
  }
  piece.resize(piece.size() - body.size);
  return piece;
}

Result<std::unique_ptr<PeerHttpStream>> OpenPeerHttpStream(const PeerHttpOptions& peer,
                                                           const HostPort& to,
                                                           const PeerHttpRequest& request,
                                                           PeerHttpTimeouts timeouts,
                                                           bool* nothing_sent) {
  if (nothing_sent != nullptr) *nothing_sent = false;
  Exchange exchange{&peer, &to, &request, timeouts};
  if (http::string_to_verb(request.method) == http::verb::unknown) {
    return exchange.Failed("unknown method \"" + request.method + "\"");
  }
  std::unique_ptr<PeerHttpStream> opened(
      new PeerHttpStream(std::make_unique<PeerHttpStream::Impl>()));
  bool ok = false;
  try {
    ok = exchange.OpenStream(opened->impl_.get());
  } catch (const std::exception& e) {  // Asio's and Beast's: allocation failures
    return exchange.Failed(std::string("unexpected error: ") + e.what());
  }
  if (nothing_sent != nullptr) *nothing_sent = exchange.nothing_sent;
  if (!ok) return exchange.outcome ? exchange.outcome->error() : exchange.Failed("no answer");
  return opened;
}

Result<PeerHttpAnswer> SendPeerHttp(const PeerHttpOptions& peer, const HostPort& to,
                                    const PeerHttpRequest& request, PeerHttpTimeouts timeouts,
                                    bool* nothing_sent) {
  if (nothing_sent != nullptr) *nothing_sent = false;
  Exchange exchange{&peer, &to, &request, timeouts};
  if (http::string_to_verb(request.method) == http::verb::unknown) {
    return exchange.Failed("unknown method \"" + request.method + "\"");
  }
  try {
    if (request.idempotent) {
      exchange.Reusing(ThisThreadsConnections());
    } else {
      asio::io_context io;
      exchange.Once(io);
    }
  } catch (const std::exception& e) {  // Asio's and Beast's: allocation failures
    return exchange.Failed(std::string("unexpected error: ") + e.what());
  }
  if (nothing_sent != nullptr) *nothing_sent = exchange.nothing_sent;
  if (!exchange.outcome) return exchange.Failed("no answer");
  return std::move(*exchange.outcome);
}

uint64_t PeerHttpConnectionsOpened() { return connections_opened.load(std::memory_order_relaxed); }

}  // namespace kvatlas::server
