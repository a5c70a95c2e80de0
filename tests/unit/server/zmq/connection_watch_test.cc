// ConnectionWatch (when a publisher's SUB socket must be recreated) and the endpoint
// transport allow-list, without sockets: the monitor events libzmq 4.3 reports are scripted.
#include "server/zmq/connection_watch.h"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/zmq/endpoint_policy.h"

namespace kvatlas::server {
namespace {

using std::chrono::milliseconds;
using Clock = ConnectionWatch::Clock;

ConnectionWatch::Options TestOptions() {
  return ConnectionWatch::Options{milliseconds{100}, milliseconds{100}, milliseconds{1'000}};
}

TEST_CASE("a normal disconnect is left to libzmq's own reconnection") {
  ConnectionWatch watch(TestOptions());
  const Clock::time_point t0{};
  watch.OnDisconnected(t0);
  watch.OnConnectRetried();  // libzmq reports both at once
  CHECK_FALSE(watch.dead(t0 + milliseconds{10'000}));
  CHECK_FALSE(watch.ShouldRecreate(t0 + milliseconds{10'000}));
}

TEST_CASE("a disconnect libzmq does not retry (message over the size limit) recreates") {
  ConnectionWatch watch(TestOptions());
  const Clock::time_point t0{};
  watch.OnDisconnected(t0);
  CHECK_FALSE(watch.dead(t0 + milliseconds{50}));  // the retry event may still come
  CHECK(watch.dead(t0 + milliseconds{100}));
  CHECK(watch.ShouldRecreate(t0 + milliseconds{100}));
  watch.Recreated();
  CHECK_FALSE(watch.dead(t0 + milliseconds{5'000}));
}

TEST_CASE("repeated recreations back off up to the maximum; a valid message resets") {
  ConnectionWatch watch(TestOptions());
  Clock::time_point t{};
  std::vector<long> waits;
  for (int i = 0; i < 6; ++i) {
    watch.OnDisconnected(t);
    Clock::time_point when = t;
    while (!watch.ShouldRecreate(when)) when += milliseconds{10};
    waits.push_back(std::chrono::duration_cast<milliseconds>(when - t).count());
    watch.Recreated();
    t = when;
  }
  CHECK(waits == std::vector<long>{100, 200, 300, 500, 900, 1'100});
  watch.OnMessage();
  CHECK(watch.backoff() == milliseconds{0});
  watch.OnDisconnected(t);
  CHECK(watch.ShouldRecreate(t + milliseconds{100}));
}

TEST_CASE("a socket that could not be created is retried with the same backoff") {
  ConnectionWatch watch(TestOptions());
  const Clock::time_point t0{};
  watch.OnSocketFailed(t0);
  CHECK(watch.ShouldRecreate(t0 + milliseconds{100}));
  watch.Recreated();
  watch.OnSocketFailed(t0 + milliseconds{100});  // EMFILE again
  CHECK_FALSE(watch.ShouldRecreate(t0 + milliseconds{250}));
  CHECK(watch.ShouldRecreate(t0 + milliseconds{300}));
}

TEST_CASE("ParseTransports accepts known transports only") {
  CHECK(*ParseTransports("tcp") == std::vector<std::string>{"tcp"});
  CHECK(*ParseTransports("tcp,ipc,tcp") == std::vector<std::string>{"tcp", "ipc"});
  CHECK(*ParseTransports("inproc") == std::vector<std::string>{"inproc"});
  for (const char* bad : {"", "tcp,", "udp", "tcp, ipc", "TCP"}) {
    INFO(bad);
    const auto parsed = ParseTransports(bad);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().message().find("zmq_allowed_transports") != std::string::npos);
  }
}

TEST_CASE("CheckTransport names the field, the endpoint and the allowed list") {
  const std::vector<std::string> tcp{"tcp"};
  CHECK(CheckTransport("endpoint", "tcp://127.0.0.1:5557", tcp).ok());
  const Status ipc = CheckTransport("replay_endpoint", "ipc:///tmp/x", tcp);
  REQUIRE_FALSE(ipc.ok());
  CHECK(ipc.code() == StatusCode::kInvalidArgument);
  CHECK(ipc.message() ==
        "replay_endpoint: endpoint \"ipc:///tmp/x\": transport ipc is not allowed "
        "(zmq_allowed_transports: tcp)");
  CHECK_FALSE(CheckTransport("endpoint", "inproc://x", tcp).ok());
  CHECK(CheckTransport("endpoint", "inproc://x", {"tcp", "inproc"}).ok());
}

}  // namespace
}  // namespace kvatlas::server
