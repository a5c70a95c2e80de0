#include "server/api/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <optional>
#include <utility>

#include "common/internal/log.h"
#include "common/internal/thread_name.h"

namespace kvatlas::server {
namespace {

using Clock = std::chrono::steady_clock;

// httplib serves a connection's requests on one worker thread, from routing to the
// logger callback, so the start of the current request can live in a thread_local set by
// the pre-routing hook and consumed by the logger. A request that never reached routing
// (malformed request line) finds it unset and is counted without a latency.
thread_local std::optional<Clock::time_point> t_request_start;

void WriteReply(const HttpReply& reply, httplib::Response& response) {
  response.status = reply.status;
  for (const auto& [name, value] : reply.headers) response.set_header(name, value);
  if (!reply.stream) {
    response.set_content(reply.body, reply.content_type.c_str());
    return;
  }
  response.set_chunked_content_provider(
      reply.content_type, [stream = reply.stream](size_t, httplib::DataSink& sink) {
        const bool more = stream([&sink](std::string_view data) {
          return sink.is_writable() && sink.write(data.data(), data.size());
        });
        if (!more) sink.done();
        return true;
      });
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr std::string_view kFormType = "application/x-www-form-urlencoded";

// The declared media type, lower case, without parameters; "" when absent.
std::string MediaType(const httplib::Request& request) {
  const std::string declared = request.get_header_value("Content-Type");
  std::string media = Lower(declared.substr(0, declared.find(';')));
  media.erase(media.find_last_not_of(" \t") + 1);
  return media;
}

// Bodies are JSON. Accepted: no Content-Type (some router clients omit it), JSON types, and
// curl's default for -d (x-www-form-urlencoded), so that `curl -d '{...}'` works; any other
// declared type (multipart, text, ...) is refused rather than misread.
Status CheckJsonContentType(const httplib::Request& request) {
  const std::string media = MediaType(request);
  if (media.empty() || media == "application/json" || media.ends_with("+json") ||
      media == kFormType) {
    return Status::Ok();
  }
  return Status(StatusCode::kUnsupportedMediaType, "Content-Type must be application/json, got \"" +
                                                       request.get_header_value("Content-Type") +
                                                       "\"");
}

HttpReply RunRoute(const Router& router, const Route& route, const httplib::Request& request,
                   std::string_view path_param) {
  if (route.json_body) {
    if (Status s = CheckJsonContentType(request); !s.ok()) return ErrorReply(s);
  }
  try {
    const RouteRequest route_request{request, path_param};
    Result<HttpReply> reply = route.handler(route_request);
    if (reply.has_value()) return std::move(reply).value();
    if (reply.error().code() == StatusCode::kNotLeader && router.not_leader_handler()) {
      return router.not_leader_handler()(route_request, reply.error());
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

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, Router router, Metrics* metrics)
    : options_(std::move(options)), router_(std::move(router)), metrics_(metrics) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Dispatch(const httplib::Request& request, httplib::Response& response) const {
  // httplib routes HEAD to the GET handlers and drops the body itself.
  std::string_view method = request.method;
  if (method == "HEAD") method = "GET";
  const RouteMatch match = router_.Find(method, request.path);
  if (match.route != nullptr) {
    WriteReply(RunRoute(router_, *match.route, request, match.path_param), response);
    return;
  }
  if (match.allowed.empty()) {
    WriteReply(ErrorReply(Status::NotFound("no route for " + request.path)), response);
    return;
  }
  HttpReply reply = ErrorReply(Status(
      StatusCode::kMethodNotAllowed,
      request.method + " is not allowed on " + request.path + " (allowed: " + match.allowed + ")"));
  reply.headers.emplace_back("Allow", match.allowed);
  WriteReply(reply, response);
}

void HttpServer::FillLibraryError(const httplib::Request& request,
                                  httplib::Response& response) const {
  Status status;
  switch (response.status) {
    case 413:
      // httplib caps form-encoded bodies at 8 KiB whatever max_body_bytes says.
      status = Status::PayloadTooLarge(
          MediaType(request) == kFormType
              ? "body: an " + std::string(kFormType) + " body is limited to " +
                    std::to_string(CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH) +
                    " bytes; send Content-Type: application/json"
              : "body: larger than the limit of " + std::to_string(options_.max_body_bytes) +
                    " bytes (max_body_bytes)");
      break;
    case 404:
    case 405: {
      // Methods we register no catch-all for (TRACE, CONNECT) end here.
      const RouteMatch match = router_.Find(request.method, request.path);
      status = match.allowed.empty()
                   ? Status::NotFound("no route for " + request.path)
                   : Status(StatusCode::kMethodNotAllowed, request.method + " is not allowed on " +
                                                               request.path +
                                                               " (allowed: " + match.allowed + ")");
      break;
    }
    default:
      status = response.status >= 500
                   ? Status::Internal("HTTP " + std::to_string(response.status))
                   : Status::InvalidArgument("malformed HTTP request (HTTP " +
                                             std::to_string(response.status) + ")");
  }
  WriteReply(ErrorReply(status), response);
}

Status HttpServer::Start() {
  server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *server_;
  const size_t threads = std::max<size_t>(options_.threads, 1);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(options_.max_body_bytes);
  s.set_read_timeout(options_.read_timeout);
  // httplib's default sets SO_REUSEPORT, which would let a second server bind the same port
  // and silently split the traffic. SO_REUSEADDR alone still allows a quick restart.
  s.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.set_write_timeout(options_.write_timeout);
  // httplib writes a response's headers and body separately; with Nagle on, the body then
  // waits for the client's delayed ACK of the headers (~40 ms per keep-alive request).
  s.set_tcp_nodelay(true);

  s.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_request_start = Clock::now();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every method goes through our router, so that 404 and 405 are decided in one place.
  const auto dispatch = [this](const httplib::Request& request, httplib::Response& response) {
    Dispatch(request, response);
  };
  s.Get(".*", dispatch);
  s.Post(".*", dispatch);
  s.Put(".*", dispatch);
  s.Patch(".*", dispatch);
  s.Delete(".*", dispatch);
  s.Options(".*", dispatch);
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& request, httplib::Response& response) {
        // Our own error replies have a body already; only httplib's bare statuses need one.
        if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        FillLibraryError(request, response);
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler(
      [](const httplib::Request& request, httplib::Response& response, std::exception_ptr ep) {
        std::string what = "non-exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError("request " + request.method + " " + request.path + " failed: " + what);
        WriteReply(ErrorReply(Status::Internal("unexpected error: " + what)), response);
      });
  s.set_logger([this](const httplib::Request& request, const httplib::Response& response) {
    std::optional<double> seconds;
    if (t_request_start) {
      seconds = std::chrono::duration<double>(Clock::now() - *t_request_start).count();
      t_request_start.reset();
    }
    metrics_->RecordRequest(router_.Label(request.path), response.status, seconds);
  });

  if (options_.port == 0) {
    const int port = s.bind_to_any_port(options_.host);
    if (port <= 0) return Status::Unavailable("cannot bind " + options_.host + " to any port");
    port_ = static_cast<uint16_t>(port);
  } else {
    if (!s.bind_to_port(options_.host, options_.port)) {
      return Status::Unavailable("cannot bind " + options_.host + ":" +
                                 std::to_string(options_.port) +
                                 " (in use, not a local address, or not permitted)");
    }
    port_ = options_.port;
  }
  listen_ended_ = false;
  thread_ = std::thread([this, &s] {
    SetCurrentThreadName("http-accept");
    if (!s.listen_after_bind()) LogError("HTTP accept loop ended with an error");
    listen_ended_ = true;
  });
  // httplib's stop() is a no-op until the accept loop has marked itself running; a Stop()
  // right after Start() would then leave the loop blocked in accept() forever. Wait for it.
  while (!s.is_running() && !listen_ended_) std::this_thread::yield();
  return Status::Ok();
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kvatlas::server
