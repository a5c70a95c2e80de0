// zmq_allowed_hosts: which hosts a registered tcp publisher may name (endpoint_policy.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "server/zmq/endpoint_policy.h"

namespace kvatlas::server {
namespace {

std::vector<HostPattern> Patterns(const char* csv) {
  Result<std::vector<HostPattern>> parsed = ParseHostPatterns(csv);
  REQUIRE_MESSAGE(parsed.has_value(), parsed.status().ToString());
  return *parsed;
}

bool Allowed(const char* csv, const char* endpoint) {
  return CheckHost("endpoint", endpoint, Patterns(csv)).ok();
}

TEST_CASE("zmq_allowed_hosts: * allows any host, and the default is *") {
  CHECK(Allowed("*", "tcp://10.1.2.3:5557"));
  CHECK(Allowed("*", "tcp://engine-0.example:5557"));
  CHECK(CheckHost("endpoint", "tcp://8.8.8.8:1", RegistrationLimits{}.allowed_hosts).ok());
}

TEST_CASE("zmq_allowed_hosts: networks match the address literals inside them") {
  const char* nets = "10.0.0.0/8,192.168.1.7,fd00::/8";
  CHECK(Allowed(nets, "tcp://10.255.0.1:5557"));
  CHECK(Allowed(nets, "tcp://192.168.1.7:5557"));
  CHECK_FALSE(Allowed(nets, "tcp://192.168.1.8:5557"));
  CHECK_FALSE(Allowed(nets, "tcp://11.0.0.1:5557"));
  CHECK(Allowed(nets, "tcp://[fd12::1]:5557"));
  CHECK_FALSE(Allowed(nets, "tcp://[fe80::1]:5557"));
  CHECK_FALSE(Allowed(nets, "tcp://[::ffff:10.0.0.1]:5557"));  // IPv6, not in an IPv6 net
  CHECK(Allowed("10.0.0.0/9", "tcp://10.127.255.255:1"));
  CHECK_FALSE(Allowed("10.0.0.0/9", "tcp://10.128.0.0:1"));
  CHECK(Allowed("0.0.0.0/0", "tcp://1.2.3.4:1"));
  // libzmq's SOURCE;HOST form: the remote host is checked.
  CHECK(Allowed("10.0.0.0/8", "tcp://192.168.0.1;10.0.0.5:5557"));
  CHECK_FALSE(Allowed("10.0.0.0/8", "tcp://10.0.0.5;192.168.0.1:5557"));
}

TEST_CASE("zmq_allowed_hosts: names match themselves and suffixes, never networks") {
  const char* names = "engine-0.svc,*.engines.local";
  CHECK(Allowed(names, "tcp://engine-0.svc:5557"));
  CHECK(Allowed(names, "tcp://ENGINE-0.SVC:5557"));
  CHECK(Allowed(names, "tcp://a.engines.local:5557"));
  CHECK(Allowed(names, "tcp://a.b.engines.local:5557"));
  CHECK_FALSE(Allowed(names, "tcp://engines.local:5557"));
  CHECK_FALSE(Allowed(names, "tcp://xengines.local:5557"));
  CHECK_FALSE(Allowed(names, "tcp://engine-1.svc:5557"));
  // A name could resolve anywhere: a network never admits one.
  CHECK_FALSE(Allowed("127.0.0.0/8", "tcp://localhost:5557"));
}

TEST_CASE("zmq_allowed_hosts: other transports are left to zmq_allowed_transports") {
  CHECK(Allowed("10.0.0.0/8", "ipc:///tmp/x"));
  CHECK(Allowed("10.0.0.0/8", "inproc://x"));
}

TEST_CASE("zmq_allowed_hosts: the refusal names the field, the host and the list") {
  const Status refused =
      CheckHost("replay_endpoint", "tcp://10.1.2.3:5558", Patterns("127.0.0.0/8,*.svc"));
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message() ==
        "replay_endpoint: host 10.1.2.3 of endpoint \"tcp://10.1.2.3:5558\" is not allowed "
        "(zmq_allowed_hosts: 127.0.0.0/8,*.svc)");
}

TEST_CASE("zmq_allowed_hosts: bad lists are refused, naming the key") {
  for (const char* bad : {"", "10.0.0.0/8,", "10.0.0.0/33", "fd00::/129", "10.0.0.0/x", "host name",
                          "*.", "a/8", "engine_0;rm", "-/1"}) {
    INFO(bad);
    const auto parsed = ParseHostPatterns(bad);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().message().find("zmq_allowed_hosts") != std::string::npos);
  }
}

}  // namespace
}  // namespace kvatlas::server
