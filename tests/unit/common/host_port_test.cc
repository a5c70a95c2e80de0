#include "common/internal/host_port.h"

#include <doctest/doctest.h>

namespace kvatlas {
namespace {

TEST_SUITE("HostPort") {
  TEST_CASE("parses HOST:PORT and [V6]:PORT, port 0 included") {
    CHECK(ParseHostPort("127.0.0.1:7070")->port == 7070);
    CHECK(ParseHostPort("h:65535")->port == 65535);
    CHECK(ParseHostPort("h:0")->port == 0);
    const Result<HostPort> v6 = ParseHostPort("[::1]:80");
    REQUIRE(v6.has_value());
    CHECK(v6->host == "::1");
    CHECK(v6->ToString() == "[::1]:80");
    CHECK(ParseHostPort("example:1")->ToString() == "example:1");
  }

  TEST_CASE("refuses what is not HOST:PORT, naming what it got") {
    for (const char* bad : {"h:65536", ":80", "::1:80", "[]:80", "[::1:80", "h:8x", "h", "h:"}) {
      CAPTURE(bad);
      const Result<HostPort> parsed = ParseHostPort(bad);
      REQUIRE_FALSE(parsed.has_value());
      CHECK(parsed.error().message().find(bad) != std::string::npos);
    }
  }

  TEST_CASE("a connectable address has a port other than 0") {
    CHECK(IsConnectableHostPort("127.0.0.1:1"));
    CHECK_FALSE(IsConnectableHostPort("127.0.0.1:0"));
    CHECK_FALSE(IsConnectableHostPort("127.0.0.1"));
  }
}

}  // namespace
}  // namespace kvatlas
