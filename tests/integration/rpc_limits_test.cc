// The binary protocol's read limits against the real server: a client that pipelines more
// requests than the server reads ahead (rpc_max_in_flight) is not stalled, and the bytes
// buffered for incomplete frames are bounded across the server (rpc_max_buffered_bytes).
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/common/protocol.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/raw_rpc_connection.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;
using protocol::MessageType;

// The value of an unlabelled sample in GET /metrics; nullopt when it is missing.
std::optional<double> MetricValue(const ServerProcess& server, const std::string& name) {
  httplib::Client http = server.Client();
  const Answer answer = Get(http, "/metrics");
  REQUIRE(answer.status == 200);
  const std::string needle = "\n" + name + " ";
  const size_t at = answer.raw.find(needle);
  if (at == std::string::npos) return std::nullopt;
  return std::stod(answer.raw.substr(at + needle.size()));
}

// The first `body_bytes` of a kPing request with a `payload_bytes` payload (a frame the
// server must buffer whole before it can decode it).
std::string LargeFramePrefix(uint64_t id, size_t payload_bytes, size_t body_bytes) {
  protocol::FrameHeader header;
  header.type = MessageType::kPing;
  header.request_id = id;
  std::string frame;
  protocol::AppendFrame(header, std::string(payload_bytes, 'x'), &frame);
  frame.resize(protocol::kHeaderBytes + body_bytes);
  return frame;
}

TEST_SUITE("rpc limits") {
  TEST_CASE("Client: 20,000 PingAsync are all answered in time, within the server's cap or not") {
    TempDir dir;
    // rpc_max_in_flight: the default (1,024). The short idle timeout closes each client's
    // connection first, so that the pings queue while it reconnects and go out in large
    // writes (the client's pipelining at its fullest) instead of one by one. (Not much
    // shorter: a client busy completing a window of answers may send nothing for a while,
    // and an idle close then fails the calls it sends at that moment.)
    ServerProcess server(dir.path() / "data", {"--rpc-idle-timeout-ms", "1000"});
    // The client's default max_in_flight, and one far above the server's cap (which the
    // server's pause must not stall).
    for (const size_t max_in_flight : {ClientOptions().max_in_flight, size_t{4096}}) {
      CAPTURE(max_in_flight);
      ClientOptions options;  // default_deadline: the default
      options.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
      options.max_in_flight = max_in_flight;
      Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
      REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
      const auto closed_by = std::chrono::steady_clock::now() + 20s;
      while ((*client)->OpenConnections() > 0 && std::chrono::steady_clock::now() < closed_by) {
        std::this_thread::sleep_for(5ms);
      }
      REQUIRE((*client)->OpenConnections() == 0);
      constexpr size_t kPings = 20'000;
      std::vector<std::future<Status>> pings;
      pings.reserve(kPings);
      for (size_t i = 0; i < kPings; ++i) pings.push_back((*client)->PingAsync());
      size_t failed = 0;
      std::string first_error;
      for (std::future<Status>& ping : pings) {
        const Status status = ping.get();
        if (status.ok()) continue;
        if (failed++ == 0) first_error = status.ToString();
      }
      CHECK_MESSAGE(failed == 0, failed << " pings failed, the first with " << first_error);
    }
  }

  TEST_CASE("Server: partial large frames stay within rpc_max_buffered_bytes") {
    TempDir dir;
    constexpr size_t kBudget = 32u << 20;
    ServerProcess server(dir.path() / "data", {"--rpc-max-buffered-bytes", std::to_string(kBudget),
                                               "--rpc-frame-timeout-ms", "3000"});
    // 8 connections each send the header and 10 MiB of a 15 MiB frame (the red team's 40
    // connections, scaled down): 80 MiB that the budget admits only 2 frames of.
    constexpr size_t kConnections = 8;
    const std::string prefix = LargeFramePrefix(7, 15u << 20, 10u << 20);
    std::vector<std::unique_ptr<RawRpcConnection>> sockets;
    for (size_t i = 0; i < kConnections; ++i) {
      sockets.push_back(std::make_unique<RawRpcConnection>(server.rpc_port()));
      sockets.back()->SendSome(prefix, 300ms);
    }
    const std::optional<double> buffered = MetricValue(server, "kvatlas_rpc_buffered_bytes");
    REQUIRE(buffered.has_value());
    CHECK(*buffered > 0);
    CHECK(*buffered <= kBudget);

    // A fresh connection's small request is not held up by the budget.
    ClientOptions options;
    options.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
    options.default_deadline = 5s;
    Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
    REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
    LookupRequest lookup;
    lookup.context.model = "llama";
    lookup.context.block_size = 16;
    lookup.token_ids = Tokens(0, 32);
    Result<LookupAnswer> answer = (*client)->Lookup(lookup);
    CHECK_MESSAGE(answer.has_value(), answer.status().ToString());

    // Nobody completes a frame: after rpc_frame_timeout_ms every partial frame is answered
    // with an error (resource_exhausted while waiting for the budget, deadline_exceeded
    // while receiving) and closed, and the budget is whole again.
    for (const auto& socket : sockets) {
      std::optional<protocol::Frame> error = socket->Read();
      REQUIRE(error.has_value());
      const StatusCode code = error->header.status;
      CHECK((code == StatusCode::kResourceExhausted || code == StatusCode::kDeadlineExceeded));
    }
    // ...and closed: only the client's connection is left.
    const auto closed_by = std::chrono::steady_clock::now() + 10s;
    while (MetricValue(server, "kvatlas_rpc_connections") != 1.0 &&
           std::chrono::steady_clock::now() < closed_by) {
      std::this_thread::sleep_for(10ms);
    }
    CHECK(MetricValue(server, "kvatlas_rpc_connections") == 1.0);
    CHECK(MetricValue(server, "kvatlas_rpc_buffered_bytes") == 0.0);
  }

  TEST_CASE("Server: a large frame completed within the budget is answered") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--rpc-max-buffered-bytes", "4194304"});
    RawRpcConnection socket(server.rpc_port());
    const std::string frame = LargeFramePrefix(9, 3u << 20, 3u << 20);  // complete
    REQUIRE(socket.SendSome(frame, 5s) == frame.size());
    std::optional<protocol::Frame> answer = socket.Read();
    REQUIRE(answer.has_value());
    CHECK(answer->header.request_id == 9);
    CHECK(answer->header.status == StatusCode::kInvalidArgument);  // a ping has no payload
    CHECK(MetricValue(server, "kvatlas_rpc_buffered_bytes") == 0.0);
  }
}

}  // namespace
}  // namespace kvatlas::testing
