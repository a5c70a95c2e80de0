#include "server/api/router.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

namespace kvatlas::server {
namespace {

Router TestRouter() {
  Router router;
  const RouteHandler ok = [](const RouteRequest&) -> Result<HttpReply> { return JsonReply("{}"); };
  router.Add({"POST", "/v1/events", RouteAccess::kWrite, ok});
  router.Add({"GET", "/v1/stats", RouteAccess::kRead, ok});
  router.Add({"POST", "/v1/stats", RouteAccess::kRead, ok});
  router.Add({"GET", "/v1/blocks/{key}", RouteAccess::kRead, ok});
  return router;
}

TEST_SUITE("Router") {
  TEST_CASE("Router: matches exact paths and one trailing parameter") {
    const Router router = TestRouter();
    CHECK(router.Find("POST", "/v1/events").route->pattern == "/v1/events");
    const RouteMatch block = router.Find("GET", "/v1/blocks/0x1f");
    REQUIRE(block.route != nullptr);
    CHECK(block.path_param == "0x1f");
    CHECK(router.Find("GET", "/v1/blocks/").route == nullptr);
    CHECK(router.Find("GET", "/v1/blocks/1/2").route == nullptr);
    CHECK(router.Find("GET", "/v1/events/").route == nullptr);
  }

  TEST_CASE("Router: a known path with another method lists the allowed methods") {
    const Router router = TestRouter();
    const RouteMatch wrong = router.Find("GET", "/v1/events");
    CHECK(wrong.route == nullptr);
    CHECK(wrong.allowed == "POST");
    CHECK(router.Find("DELETE", "/v1/stats").allowed == "GET, POST");
    CHECK(router.Find("GET", "/nope").allowed.empty());
  }

  TEST_CASE("Router: labels are route patterns or 'unmatched'") {
    const Router router = TestRouter();
    CHECK(router.Label("/v1/blocks/123") == "/v1/blocks/{key}");
    CHECK(router.Label("/v1/stats") == "/v1/stats");
    CHECK(router.Label("/random/path") == "unmatched");
  }

  TEST_CASE("Router: ErrorReply maps a Status to its HTTP status and JSON body") {
    const HttpReply reply = ErrorReply(Status::ResourceExhausted("queue full"));
    CHECK(reply.status == 429);
    CHECK(reply.content_type == "application/json");
    CHECK(nlohmann::json::parse(reply.body) ==
          nlohmann::json{{"code", "resource_exhausted"}, {"message", "queue full"}});
    CHECK(ErrorReply(Status(StatusCode::kUnsupportedMediaType, "x")).status == 415);
    CHECK(ErrorReply(Status(StatusCode::kDeadlineExceeded, "x")).status == 504);
  }
}

}  // namespace
}  // namespace kvatlas::server
