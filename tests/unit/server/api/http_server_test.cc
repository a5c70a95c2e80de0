// The HTTP layer's own rules, over real loopback sockets with stub routes (no state).
#include "server/api/http_server.h"

#include <doctest/doctest.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

namespace kvatlas::server {
namespace {

using nlohmann::json;

Router StubRouter() {
  Router router;
  router.Add({"POST", "/echo", /*json_body=*/true,
              [](const RouteRequest& r) -> Result<HttpReply> { return JsonReply(r.http.body); }});
  router.Add({"GET", "/item/{id}", false, [](const RouteRequest& r) -> Result<HttpReply> {
                return JsonReply(json{{"id", r.path_param}}.dump());
              }});
  router.Add({"GET", "/fail", false, [](const RouteRequest&) -> Result<HttpReply> {
                return Status::Unavailable("not now");
              }});
  router.Add({"GET", "/throw", false,
              [](const RouteRequest&) -> Result<HttpReply> { throw std::runtime_error("boom"); }});
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
    router.Add({"POST", "/write", /*json_body=*/true, [](const RouteRequest&) -> Result<HttpReply> {
                  return Status(StatusCode::kNotLeader, "not the leader");
                }});
    router.SetNotLeaderHandler([](const RouteRequest& r, const Status& s) {
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
