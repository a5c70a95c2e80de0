#include "server/api/http_connection.h"

#include <array>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <exception>
#include <future>
#include <utility>

#include "common/internal/log.h"
#include "server/api/await_error.h"

namespace kvatlas::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// How long a connection closed after an error answer keeps discarding what the peer still
// sends (a client writing a large body would otherwise get a reset instead of our answer).
constexpr std::chrono::milliseconds kLinger{1'000};

std::string StatusLine(int status) {
  const auto reason = http::obsolete_reason(http::int_to_status(status));
  const bool known = !reason.empty() && reason[0] != '<';  // "<unknown-status>"
  return "HTTP/1.1 " + std::to_string(status) + " " +
         (known ? std::string(reason.data(), reason.size()) : std::string("Unknown")) + "\r\n";
}

std::string HeaderLines(const HttpReply& reply) {
  std::string out;
  if (!reply.content_type.empty()) out += "Content-Type: " + reply.content_type + "\r\n";
  for (const auto& [name, value] : reply.headers) out += name + ": " + value + "\r\n";
  return out;
}

// The request for the routes (router.h), taken over from Beast's parser.
HttpRequest FromBeast(http::request<http::string_body>&& in, const std::string& peer) {
  HttpRequest out;
  out.method = std::string(in.method_string());
  SetTarget(std::string_view(in.target().data(), in.target().size()), &out);
  out.version = in.version() == 10 ? "HTTP/1.0" : "HTTP/1.1";
  for (const auto& field : in) {
    out.headers.emplace(std::string(field.name_string()), std::string(field.value()));
  }
  out.body = std::move(in.body());
  out.remote_addr = peer;
  return out;
}

bool IsDisconnect(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
         ec == beast::error::timeout || ec == asio::error::broken_pipe ||
         ec == http::error::partial_message;
}

}  // namespace

std::string SerializeReply(const HttpReply& reply, bool head, bool keep_alive) {
  std::string out = StatusLine(reply.status) + HeaderLines(reply);
  // A 304 has no body and must not claim a length other than the unsent 200's
  // (RFC 9110 §8.6): it names none.
  if (reply.status != 304) out += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!head) out += reply.body;
  return out;
}

HttpConnection::HttpConnection(asio::ip::tcp::socket socket, HttpConnectionContext* context,
                               std::function<void()> on_close, TlsContextPtr tls)
    : stream_(beast::tcp_stream(std::move(socket)), std::move(tls)),
      context_(context),
      on_close_(std::move(on_close)) {
  error_code ec;
  const auto remote = stream_.next_layer().socket().remote_endpoint(ec);
  if (!ec) peer_ = remote.address().to_string();
}

HttpConnection::~HttpConnection() {
  if (on_close_) on_close_();
}

void HttpConnection::StopIfIdle() {
  if (busy_) return;
  error_code ec;
  stream_.next_layer().socket().close(ec);
}

asio::awaitable<bool> HttpConnection::Handshake() {
  error_code ec;
  beast::tcp_stream& tcp = stream_.next_layer();
  tcp.expires_after(context_->request_timeout);
  const size_t n = co_await tcp.async_read_some(buffer_.prepare(4096), AwaitError(ec));
  if (!ec) buffer_.commit(n);
  // Every TLS connection starts with a handshake record (content type 22).
  constexpr unsigned char kHandshakeRecord = 0x16;
  if (!ec && *static_cast<const unsigned char*>(buffer_.data().data()) != kHandshakeRecord) {
    const std::string answer = SerializeReply(
        ErrorReply(Status::InvalidArgument(
            "this port serves HTTPS: the request was sent in plaintext; use https:// and TLS")),
        /*head=*/false, /*keep_alive=*/false);
    tcp.expires_after(context_->write_timeout);
    co_await asio::async_write(tcp, asio::buffer(answer), AwaitError(ec));
    context_->record("", 400, std::nullopt);
    context_->tls_failed();
    buffer_.consume(buffer_.size());
    if (!ec) co_await Linger();
    co_return false;
  }
  if (!ec) {
    const size_t used = co_await stream_.tls().async_handshake(asio::ssl::stream_base::server,
                                                               buffer_.data(), AwaitError(ec));
    buffer_.consume(used);
  }
  if (ec) {
    const std::string why = ec == beast::error::timeout
                                ? "not completed within " +
                                      std::to_string(context_->request_timeout.count()) +
                                      " ms (http_request_timeout_ms)"
                                : TlsFailureReason(ec, stream_.native_handle());
    LogInfo("http " + peer_ + ": TLS handshake failed: " + why);
    context_->tls_failed();
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> HttpConnection::Serve(std::shared_ptr<HttpConnection> self) {
  (void)self;  // held by the coroutine frame: the connection lives until the loop ends
  bool open = !stream_.is_tls() || co_await Handshake();
  while (open && !context_->stopping) {
    bool keep_alive = false;
    std::optional<HttpRequest> request = co_await ReadRequest(&keep_alive);
    if (!request) co_return;
    busy_ = true;
    const auto start = Clock::now();
    const std::string path = request->path;
    const bool head = request->method == "HEAD";
    const Outcome outcome = co_await RunOnWorker(std::move(*request));
    keep_alive = keep_alive && !outcome.streamed && !context_->stopping;
    const bool written =
        outcome.streamed || co_await Write(SerializeReply(outcome.reply, head, keep_alive));
    busy_ = false;
    context_->record(path, outcome.reply.status,
                     std::chrono::duration<double>(Clock::now() - start).count());
    if (!written || !keep_alive) break;
  }
  error_code ec;
  stream_.next_layer().socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  stream_.next_layer().socket().close(ec);
}

asio::awaitable<std::optional<HttpRequest>> HttpConnection::ReadRequest(bool* keep_alive) {
  error_code ec;
  if (buffer_.size() == 0) {
    // Idle between requests: only the socket and this buffer are held.
    stream_.next_layer().expires_after(context_->idle_timeout);
    const size_t n = co_await stream_.async_read_some(buffer_.prepare(4096), AwaitError(ec));
    if (ec) co_return std::nullopt;
    buffer_.commit(n);
  }
  // One deadline for the whole request, from its first byte: Beast's stream timer is not
  // re-armed by each read.
  stream_.next_layer().expires_after(context_->request_timeout);
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(context_->max_header_bytes));
  parser.body_limit(context_->max_body_bytes);
  co_await http::async_read_header(stream_, buffer_, parser, AwaitError(ec));
  if (!ec && !parser.is_done() &&
      beast::iequals(parser.get()[http::field::expect], "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await asio::async_write(stream_, asio::buffer(kContinue), AwaitError(ec));
  }
  if (!ec && !parser.is_done()) co_await http::async_read(stream_, buffer_, parser, AwaitError(ec));
  if (!ec) {
    *keep_alive = parser.get().keep_alive();
    co_return FromBeast(parser.release(), peer_);
  }
  std::string path;
  if (parser.is_header_done()) {
    const std::string target(parser.get().target());
    path = PercentDecode(target.substr(0, target.find('?')), false);
  }
  if (ec == http::error::body_limit) {
    co_await AnswerAndClose(
        ErrorReply(Status::PayloadTooLarge("body: larger than the limit of " +
                                           std::to_string(context_->max_body_bytes) +
                                           " bytes (max_body_bytes)")),
        path);
  } else if (ec == http::error::header_limit) {
    HttpReply reply =
        ErrorReply(Status::InvalidArgument("request line and headers: larger than " +
                                           std::to_string(context_->max_header_bytes) + " bytes"));
    reply.status = 431;
    co_await AnswerAndClose(std::move(reply), path);
  } else if (ec.category() == http::make_error_code(http::error::body_limit).category() &&
             !IsDisconnect(ec)) {
    co_await AnswerAndClose(
        ErrorReply(Status::InvalidArgument("malformed HTTP request: " + ec.message())), path);
  }
  // Otherwise the peer left, or the request deadline passed: Beast closed the socket.
  co_return std::nullopt;
}

asio::awaitable<void> HttpConnection::AnswerAndClose(HttpReply reply, const std::string& path) {
  const bool written = co_await Write(SerializeReply(reply, false, false));
  context_->record(path, reply.status, std::nullopt);
  if (written) co_await Linger();
}

asio::awaitable<void> HttpConnection::Linger() {
  // Discards raw bytes (TLS records too: nothing more is answered).
  error_code ec;
  beast::tcp_stream& tcp = stream_.next_layer();
  tcp.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  tcp.expires_after(kLinger);
  std::array<char, 16384> discard;
  while (!ec) co_await tcp.async_read_some(asio::buffer(discard), AwaitError(ec));
  tcp.socket().close(ec);
}

asio::awaitable<bool> HttpConnection::Write(std::string data) {
  error_code ec;
  stream_.next_layer().expires_after(context_->write_timeout);
  co_await asio::async_write(stream_, asio::buffer(data), AwaitError(ec));
  co_return !ec;
}

asio::awaitable<HttpConnection::Outcome> HttpConnection::RunOnWorker(HttpRequest request) {
  const auto executor = co_await asio::this_coro::executor;
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>, void(Outcome)>(
      [&](auto handler) {
        auto done = std::make_shared<decltype(handler)>(std::move(handler));
        const auto complete = [done, executor](Outcome outcome) {
          asio::post(executor, [done, outcome = std::move(outcome)]() mutable {
            (*done)(std::move(outcome));
          });
        };
        auto shared = std::make_shared<HttpRequest>(std::move(request));
        const bool queued =
            context_->submit([self = shared_from_this(), shared, complete]() mutable {
              Outcome outcome;
              try {
                outcome.reply = self->context_->handle(*shared);
                if (outcome.reply.stream) {
                  outcome.streamed = true;
                  self->Stream(outcome.reply);
                }
              } catch (const std::exception& e) {
                LogError(std::string("HTTP request failed: ") + e.what());
                outcome.reply =
                    ErrorReply(Status::Internal(std::string("unexpected error: ") + e.what()));
              }
              complete(std::move(outcome));
            });
        if (!queued) {
          complete(
              Outcome{ErrorReply(Status::Unavailable("server busy: the HTTP request queue is full "
                                                     "(http_max_queued_requests); retry later")),
                      false});
        }
      },
      asio::use_awaitable);
}

bool HttpConnection::Stream(const HttpReply& reply) {
  // Chunked, then closed: the stream ends when the client leaves or the server stops.
  if (!BlockingWrite(StatusLine(reply.status) + HeaderLines(reply) +
                     "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")) {
    return false;
  }
  bool ok = true;
  const HttpReply::Write write = [&](std::string_view data) {
    if (!ok || data.empty()) return ok;
    char size[20];
    const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    std::string chunk(size, static_cast<size_t>(n));
    chunk.append(data);
    chunk += "\r\n";
    ok = BlockingWrite(std::move(chunk));
    return ok;
  };
  while (ok && reply.stream(write)) {
  }
  return ok && BlockingWrite("0\r\n\r\n");
}

bool HttpConnection::BlockingWrite(std::string data) {
  if (context_->stopping) return false;
  auto bytes = std::make_shared<std::string>(std::move(data));
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> written = done->get_future();
  asio::post(stream_.get_executor(), [self = shared_from_this(), bytes, done] {
    self->stream_.next_layer().expires_after(self->context_->write_timeout);
    asio::async_write(self->stream_, asio::buffer(*bytes),
                      [bytes, done](const error_code& ec, size_t) { done->set_value(!ec); });
  });
  // Bounded even if the io thread is gone (its handlers destroyed: a broken promise).
  if (written.wait_for(context_->write_timeout + std::chrono::seconds(1)) !=
      std::future_status::ready) {
    return false;
  }
  try {
    return written.get();
  } catch (const std::future_error&) {
    return false;
  }
}

}  // namespace kvatlas::server
