// The HTTP layer's own rules, over real loopback sockets with stub routes (no state).
#include "server/api/http_server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

namespace kvatlas::server {
namespace {

using nlohmann::json;

Router StubRouter() {
  Router router;
  router.Add({"POST", "/echo", RouteAccess::kRead,
              [](const RouteRequest& r) -> Result<HttpReply> { return JsonReply(r.http.body); }});
  router.Add(
      {"GET", "/item/{id}", RouteAccess::kRead, [](const RouteRequest& r) -> Result<HttpReply> {
         return JsonReply(json{{"id", r.path_param}}.dump());
       }});
  router.Add({"GET", "/fail", RouteAccess::kRead, [](const RouteRequest&) -> Result<HttpReply> {
                return Status::Unavailable("not now");
              }});
  router.Add({"GET", "/throw", RouteAccess::kRead,
              [](const RouteRequest&) -> Result<HttpReply> { throw std::runtime_error("boom"); }});
  router.Add(
      {"GET", "/param", RouteAccess::kRead, [](const RouteRequest& r) -> Result<HttpReply> {
         return JsonReply(
             json{{"name", r.http.Param("name")}, {"header", r.http.Header("x-CASE")}}.dump());
       }});
  router.Add({"POST", "/store", RouteAccess::kWrite,
              [](const RouteRequest& r) -> Result<HttpReply> { return JsonReply(r.http.body); }});
  router.Add({"GET", "/events", RouteAccess::kRead, [](const RouteRequest&) -> Result<HttpReply> {
                HttpReply reply;
                reply.content_type = "text/event-stream";
                reply.stream = [n = 0](const HttpReply::Write& write) mutable {
                  return write("data: " + std::to_string(n) + "\n\n") && ++n < 3;
                };
                return reply;
              }});
  return router;
}

struct Fixture {
  Fixture() : server(Options(), StubRouter(), &metrics) {
    REQUIRE(server.Start().ok());
    REQUIRE(server.port() != 0);
  }
  static HttpServerOptions Options() {
    HttpServerOptions options;
    options.port = 0;
    options.threads = 2;
    options.max_body_bytes = 1024;
    return options;
  }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", server.port()); }

  Metrics metrics;
  HttpServer server;
};

// A raw loopback connection to `port` (for what an HTTP client library will not send).
struct RawConnection {
  explicit RawConnection(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0);
  }
  ~RawConnection() { ::close(fd); }
  void Send(const std::string& data) const {
    REQUIRE(::send(fd, data.data(), data.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(data.size()));
  }
  // What arrives within `timeout` until the server closes the connection.
  std::string ReadUntilClosed(std::chrono::milliseconds timeout) const {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        out += "<timeout>";
        return out;
      }
      char buffer[4096];
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return out;
      out.append(buffer, static_cast<size_t>(n));
    }
  }
  int fd = -1;
};

// Checks that `result` is an error answer with `status` and wire `code`.
void CheckError(const httplib::Result& result, int status, const std::string& code) {
  REQUIRE(result);
  CHECK(result->status == status);
  CHECK(result->get_header_value("Content-Type") == "application/json");
  const json body = json::parse(result->body);
  CHECK(body["code"] == code);
  CHECK(body["message"].is_string());
  CHECK_FALSE(body["message"].get<std::string>().empty());
}

TEST_SUITE("HttpServer") {
  TEST_CASE("HttpServer: routes requests and captures the path parameter") {
    Fixture f;
    auto client = f.Client();
    auto echo = client.Post("/echo", R"({"a":1})", "application/json");
    REQUIRE(echo);
    CHECK(echo->status == 200);
    CHECK(echo->body == R"({"a":1})");
    auto item = client.Get("/item/0x2a");
    REQUIRE(item);
    CHECK(json::parse(item->body)["id"] == "0x2a");
  }

  TEST_CASE("HttpServer: unknown routes and wrong methods answer JSON 404 and 405") {
    Fixture f;
    auto client = f.Client();
    CheckError(client.Get("/nowhere"), 404, "not_found");
    auto wrong = client.Get("/echo");
    CheckError(wrong, 405, "method_not_allowed");
    CHECK(wrong->get_header_value("Allow") == "POST");
    CheckError(client.Delete("/item/3"), 405, "method_not_allowed");
  }

  TEST_CASE("HttpServer: handler errors and exceptions become JSON answers") {
    Fixture f;
    auto client = f.Client();
    CheckError(client.Get("/fail"), 503, "unavailable");
    CheckError(client.Get("/throw"), 500, "internal");
    // The server keeps serving after an exception.
    CHECK(client.Get("/item/1")->status == 200);
  }

  TEST_CASE("HttpServer: a kNotLeader route error goes to the not-leader handler") {
    Router router = StubRouter();
    auto calls = std::make_shared<int>(0);
    router.Add({"POST", "/write", RouteAccess::kWrite,
                [calls](const RouteRequest& r) -> Result<HttpReply> {
                  if (++*calls == 1) return Status(StatusCode::kNotLeader, "not the leader");
                  return JsonReply(json{{"ran_again_with", r.http.body}}.dump());
                }});
    router.SetNotLeaderHandler(
        [](const RouteRequest& r, const Status& s, const Router::RunAgain& run_again) {
          if (r.http.HasHeader("X-Run-Again")) {
            Result<HttpReply> again = run_again();
            return again.has_value() ? std::move(again).value() : ErrorReply(again.error());
          }
          HttpReply reply = JsonReply(json{{"relayed", r.http.body}, {"why", s.message()}}.dump());
          reply.status = 202;
          return reply;
        });
    Metrics metrics;
    HttpServer server(Fixture::Options(), std::move(router), &metrics);
    REQUIRE(server.Start().ok());
    httplib::Client client("127.0.0.1", server.port());
    auto relayed = client.Post("/write", R"({"a":1})", "application/json");
    REQUIRE(relayed);
    CHECK(relayed->status == 202);
    CHECK(json::parse(relayed->body) == json{{"relayed", R"({"a":1})"}, {"why", "not the leader"}});
    // The handler may run the route again, on the same request (a server elected meanwhile).
    *calls = 0;
    auto again = client.Post("/write", httplib::Headers{{"X-Run-Again", "1"}}, R"({"b":2})",
                             "application/json");
    REQUIRE(again);
    CHECK(again->status == 200);
    CHECK(json::parse(again->body) == json{{"ran_again_with", R"({"b":2})"}});
    CHECK(*calls == 2);
    // Other errors are not its business.
    CheckError(client.Get("/fail"), 503, "unavailable");
  }

  TEST_CASE("HttpServer: bodies over the limit get 413 before any handler runs") {
    Fixture f;
    auto client = f.Client();
    CheckError(client.Post("/echo", std::string(4096, ' '), "application/json"), 413,
               "payload_too_large");
  }

  TEST_CASE("HttpServer: JSON routes refuse other declared content types") {
    Fixture f;
    auto client = f.Client();
    CheckError(client.Post("/echo", "{}", "text/plain"), 415, "unsupported_media_type");
    CheckError(client.Post("/echo", "{}", "application/xml; charset=utf-8"), 415,
               "unsupported_media_type");
    // curl -d sends its form type by default: accepted, the body is read as JSON.
    auto curl_default = client.Post("/echo", "{}", "application/x-www-form-urlencoded");
    REQUIRE(curl_default);
    CHECK(curl_default->status == 200);
    CHECK(curl_default->body == "{}");
    auto charset = client.Post("/echo", "{}", "application/json; charset=utf-8");
    REQUIRE(charset);
    CHECK(charset->status == 200);
  }

  TEST_CASE("HttpServer: write routes take only JSON: no CORS-simple or absent type") {
    Fixture f;
    auto client = f.Client();
    // What a browser sends cross-origin without a preflight: the three CORS-safelisted
    // types, and none at all (fetch with a Blob body).
    for (const char* type : {"application/x-www-form-urlencoded", "multipart/form-data; b=x",
                             "text/plain", "TEXT/PLAIN;charset=utf-8"}) {
      CAPTURE(type);
      CheckError(client.Post("/store", "{}", type), 415, "unsupported_media_type");
    }
    RawConnection raw(f.server.port());
    raw.Send(
        "POST /store HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
        "Connection: close\r\n\r\n{}");
    const std::string answer = raw.ReadUntilClosed(std::chrono::seconds(5));
    CHECK(answer.starts_with("HTTP/1.1 415"));
    CHECK(answer.find("got none") != std::string::npos);
    for (const char* type :
         {"application/json", "application/json; charset=utf-8", "application/merge-patch+json"}) {
      CAPTURE(type);
      auto ok = client.Post("/store", "{}", type);
      REQUIRE(ok);
      CHECK(ok->status == 200);
    }
  }

  TEST_CASE("HttpServer: every answer is counted by route pattern and code") {
    Fixture f;
    auto client = f.Client();
    (void)client.Get("/item/1");
    (void)client.Get("/item/2");
    (void)client.Get("/nowhere");
    // A request is counted after its answer is written, so the client may see the answer
    // first: wait for the count, with a deadline.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    const auto counted = [&](std::string_view line) {
      while (f.metrics.Render({}).find(line) == std::string::npos) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return true;
    };
    CHECK(counted("kvatlas_http_requests_total{route=\"/item/{id}\",code=\"200\"} 2\n"));
    CHECK(counted("kvatlas_http_requests_total{route=\"unmatched\",code=\"404\"} 1\n"));
    CHECK(counted("kvatlas_http_request_duration_seconds_count{route=\"/item/{id}\"} 2\n"));
  }

  TEST_CASE("HttpServer: HEAD, query parameters, case-insensitive headers, streams") {
    Fixture f;
    auto client = f.Client();
    auto head = client.Head("/item/7");
    REQUIRE(head);
    CHECK(head->status == 200);
    CHECK(head->body.empty());
    CHECK(head->get_header_value("Content-Length") == "10");  // {"id":"7"}
    auto param = client.Get("/param?name=a%20b+c&other=1", {{"X-Case", "yes"}});
    REQUIRE(param);
    // Percent-decoded as cpp-httplib's server did ('+' stays '+').
    CHECK(json::parse(param->body) == json{{"name", "a b+c"}, {"header", "yes"}});
    auto events = client.Get("/events");
    REQUIRE(events);
    CHECK(events->status == 200);
    CHECK(events->get_header_value("Content-Type") == "text/event-stream");
    CHECK(events->body == "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  }

  TEST_CASE("HttpServer: chunked bodies are read, and held to max_body_bytes") {
    Fixture f;
    const std::string head =
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n\r\n";
    RawConnection ok(f.server.port());
    ok.Send(head + "3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n");
    const std::string echoed = ok.ReadUntilClosed(std::chrono::seconds(5));
    CHECK(echoed.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(echoed.ends_with("{\"a\":1}"));
    RawConnection big(f.server.port());
    big.Send(head + "800\r\n" + std::string(0x800, ' ') + "\r\n");  // 2 KiB > 1 KiB
    const std::string refused = big.ReadUntilClosed(std::chrono::seconds(5));
    CHECK(refused.rfind("HTTP/1.1 413", 0) == 0);
    CHECK(refused.find("payload_too_large") != std::string::npos);
  }

  TEST_CASE("HttpServer: oversized headers get 431, malformed requests 400") {
    Fixture f;
    RawConnection big(f.server.port());
    big.Send("GET /item/1 HTTP/1.1\r\nX-Big: " + std::string(20'000, 'a') + "\r\n\r\n");
    const std::string big_answer = big.ReadUntilClosed(std::chrono::seconds(5));
    CHECK(big_answer.rfind("HTTP/1.1 431", 0) == 0);
    CHECK(big_answer.find("invalid_argument") != std::string::npos);
    RawConnection bad(f.server.port());
    bad.Send("GET /item/1 HTTP/1.1\r\nContent-Length: x\r\n\r\n");
    const std::string bad_answer = bad.ReadUntilClosed(std::chrono::seconds(5));
    CHECK(bad_answer.rfind("HTTP/1.1 400", 0) == 0);
    CHECK(bad_answer.find("malformed HTTP request") != std::string::npos);
  }

  TEST_CASE("HttpServer: a request not complete within the request timeout is dropped") {
    Metrics metrics;
    HttpServerOptions options = Fixture::Options();
    options.request_timeout = std::chrono::milliseconds(300);
    HttpServer server(options, StubRouter(), &metrics);
    REQUIRE(server.Start().ok());
    RawConnection slow(server.port());
    const auto start = std::chrono::steady_clock::now();
    slow.Send("GET /item/1 HTTP/1.1\r\n");
    // Bytes keep coming, but the deadline covers the whole request, not each read.
    for (int i = 0; i < 4; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      (void)::send(slow.fd, "X", 1, MSG_NOSIGNAL);
    }
    CHECK(slow.ReadUntilClosed(std::chrono::seconds(3)).empty());
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    httplib::Client client("127.0.0.1", server.port());
    auto fresh = client.Get("/item/1");
    REQUIRE(fresh);
    CHECK(fresh->status == 200);
  }

  TEST_CASE("HttpServer: past the connection cap a new connection gets 503") {
    Metrics metrics;
    HttpServerOptions options = Fixture::Options();
    options.max_connections = 2;
    HttpServer server(options, StubRouter(), &metrics);
    REQUIRE(server.Start().ok());
    RawConnection a(server.port());
    RawConnection b(server.port());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    RawConnection c(server.port());
    const std::string refused = c.ReadUntilClosed(std::chrono::seconds(3));
    CHECK(refused.rfind("HTTP/1.1 503", 0) == 0);
    CHECK(refused.find("http_max_connections") != std::string::npos);
  }

  TEST_CASE("HttpServer: past the worker queue a request gets 503") {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::promise<void> entered;
    Router router = StubRouter();
    router.Add({"GET", "/block", RouteAccess::kRead, [&](const RouteRequest&) -> Result<HttpReply> {
                  entered.set_value();
                  released.wait();
                  return JsonReply("{}");
                }});
    Metrics metrics;
    HttpServerOptions options = Fixture::Options();
    options.threads = 1;
    options.max_queued_requests = 1;
    HttpServer server(options, std::move(router), &metrics);
    REQUIRE(server.Start().ok());
    std::thread blocked([&] {
      httplib::Client client("127.0.0.1", server.port());
      CHECK(client.Get("/block")->status == 200);
    });
    entered.get_future().wait();
    std::thread queued([&] {
      httplib::Client client("127.0.0.1", server.port());
      CHECK(client.Get("/item/1")->status == 200);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // now in the queue
    httplib::Client client("127.0.0.1", server.port());
    CheckError(client.Get("/item/2"), 503, "unavailable");
    release.set_value();
    blocked.join();
    queued.join();
  }

  TEST_CASE("HttpServer: Stop is idempotent and a second server cannot take the port") {
    Fixture f;
    Metrics metrics;
    HttpServerOptions options = Fixture::Options();
    options.port = f.server.port();
    HttpServer second(options, StubRouter(), &metrics);
    CHECK(second.Start().code() == StatusCode::kUnavailable);
    f.server.Stop();
    f.server.Stop();
  }
}

}  // namespace
}  // namespace kvatlas::server
