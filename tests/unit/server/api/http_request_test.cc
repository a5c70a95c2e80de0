// HttpRequest: the target split into a decoded path and query parameters, headers by name
// whatever their case.
#include "server/api/http_request.h"

#include <doctest/doctest.h>

namespace kvatlas::server {
namespace {

TEST_CASE("PercentDecode: %XX everywhere, '+' only in a query, malformed escapes kept") {
  CHECK(PercentDecode("/v1/blocks/a%2Fb", false) == "/v1/blocks/a/b");
  CHECK(PercentDecode("a+b", false) == "a+b");
  CHECK(PercentDecode("a+b", true) == "a b");
  CHECK(PercentDecode("%41%62%zz%4", true) == "Ab%zz%4");
  CHECK(PercentDecode("100%", true) == "100%");
  CHECK(PercentDecode("%e2%9c%93", false) == "\xe2\x9c\x93");
}

TEST_CASE("SetTarget: path and parameters, repeated and empty ones") {
  HttpRequest request;
  SetTarget("/v1/lookup%20x?model_name=llama+3&tenant_id=&flag&&b=%26&b=2", &request);
  CHECK(request.target == "/v1/lookup%20x?model_name=llama+3&tenant_id=&flag&&b=%26&b=2");
  CHECK(request.path == "/v1/lookup x");
  CHECK(request.Param("model_name") == "llama 3");
  CHECK(request.HasParam("tenant_id"));
  CHECK(request.Param("tenant_id").empty());
  CHECK(request.HasParam("flag"));
  CHECK_FALSE(request.HasParam("absent"));
  CHECK(request.Param("absent").empty());
  CHECK(request.Param("b") == "&");  // the first of a repeated parameter
  CHECK(request.params.count("b") == 2);
  SetTarget("/plain", &request);
  CHECK(request.path == "/plain");
  CHECK(request.params.empty());
}

TEST_CASE("HttpRequest headers: names compare without case, counted when repeated") {
  HttpRequest request;
  request.headers.emplace("Content-Type", "application/json");
  request.headers.emplace("authorization", "Bearer a");
  request.headers.emplace("AUTHORIZATION", "Bearer b");
  CHECK(request.HasHeader("content-type"));
  CHECK(request.Header("CONTENT-TYPE") == "application/json");
  CHECK(request.HeaderCount("Authorization") == 2);
  CHECK(request.Header("Authorization") == "Bearer a");
  CHECK_FALSE(request.HasHeader("Host"));
  CHECK(request.Header("Host").empty());
}

}  // namespace
}  // namespace kvatlas::server
