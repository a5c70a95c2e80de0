#include "client/src/endpoint.h"

#include <doctest/doctest.h>

namespace kvatlas::client {
namespace {

TEST_SUITE("Endpoint") {
  TEST_CASE("Endpoint: parses host:port and bracketed IPv6") {
    CHECK(*ParseEndpoint("127.0.0.1:7071") == Endpoint{"127.0.0.1", 7071});
    CHECK(*ParseEndpoint("kvatlas.local:1") == Endpoint{"kvatlas.local", 1});
    CHECK(*ParseEndpoint("[::1]:65535") == Endpoint{"::1", 65535});
    CHECK(ParseEndpoint("[::1]:7071")->ToString() == "[::1]:7071");
    CHECK(ParseEndpoint("localhost:80")->ToString() == "localhost:80");
  }

  TEST_CASE("Endpoint: rejects malformed text, quoting it") {
    for (const char* bad : {"", "localhost", ":7071", "host:", "host:0", "host:65536", "host:12x",
                            "host:-1", "::1:7071", "[::1]7071", "[::1:7071", "[]:1"}) {
      CAPTURE(bad);
      const Result<Endpoint> r = ParseEndpoint(bad);
      REQUIRE_FALSE(r.has_value());
      CHECK(r.error().code() == StatusCode::kInvalidArgument);
      CHECK(r.error().message().find(std::string("\"") + bad + "\"") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace kvatlas::client
