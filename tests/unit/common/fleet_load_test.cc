#include "kvatlas/common/fleet_load.h"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "kvatlas/common/protocol.h"

namespace kvatlas {
namespace {

using Clock = FleetLoadTable::Clock;
using std::chrono::milliseconds;

const Clock::time_point kT0 = Clock::time_point(milliseconds(1'700'000'000'000));

LoadReport Report(std::string router, std::vector<InstanceLoad> loads) {
  return LoadReport{std::move(router), 1'000, std::move(loads)};
}

TEST_CASE("FleetLoadTable: the load of an instance is summed over every router's report") {
  FleetLoadTable table;
  REQUIRE(
      table.Replace(Report("r1", {{"a", 0, 10, 100}, {"b", 0, 1, 2}}), kT0 + milliseconds(1000)));
  REQUIRE(
      table.Replace(Report("r2", {{"a", 0, 5, 50}, {"a", 1, 7, 70}}), kT0 + milliseconds(1000)));
  REQUIRE(table.Replace(Report("r3", {{"b", 0, 3, 4}}), kT0 + milliseconds(1000)));
  CHECK(table.LoadOf("a", 0, kT0) == LoadSum{15, 150, 2});
  CHECK(table.LoadOf("a", 1, kT0) == LoadSum{7, 70, 1});
  CHECK(table.LoadOf("a", std::nullopt, kT0) == LoadSum{22, 220, 2});  // every rank
  CHECK(table.LoadOf("b", std::nullopt, kT0) == LoadSum{4, 6, 2});
  CHECK(table.LoadOf("c", std::nullopt, kT0) == LoadSum{});
  CHECK(table.LiveRouters(kT0).size() == 3);
}

TEST_CASE("FleetLoadTable: a report replaces its router's previous one; an empty one leaves") {
  FleetLoadTable table;
  REQUIRE(
      table.Replace(Report("r1", {{"a", 0, 10, 100}, {"b", 0, 1, 2}}), kT0 + milliseconds(1000)));
  REQUIRE(table.Replace(Report("r2", {{"a", 0, 1, 1}}), kT0 + milliseconds(1000)));
  // Absolute, not a delta: the same report twice counts once, and b is no longer named.
  REQUIRE(table.Replace(Report("r1", {{"a", 0, 4, 40}}), kT0 + milliseconds(1000)));
  REQUIRE(table.Replace(Report("r1", {{"a", 0, 4, 40}}), kT0 + milliseconds(1000)));
  CHECK(table.LoadOf("a", 0, kT0) == LoadSum{5, 41, 2});
  CHECK(table.LoadOf("b", 0, kT0) == LoadSum{});
  REQUIRE(table.Replace(Report("r1", {}), kT0 + milliseconds(1000)));
  CHECK(table.LoadOf("a", 0, kT0) == LoadSum{1, 1, 1});
  CHECK(table.LiveRouters(kT0).size() == 1);
}

TEST_CASE("FleetLoadTable: a router whose lease ran out stops counting") {
  FleetLoadTable table;
  REQUIRE(table.Replace(Report("dead", {{"a", 0, 10, 100}}), kT0 + milliseconds(500)));
  REQUIRE(table.Replace(Report("live", {{"a", 0, 1, 1}}), kT0 + milliseconds(5000)));
  CHECK(table.LoadOf("a", 0, kT0 + milliseconds(499)) == LoadSum{11, 101, 2});
  CHECK(table.LoadOf("a", 0, kT0 + milliseconds(500)) == LoadSum{1, 1, 1});
  const auto live = table.LiveRouters(kT0 + milliseconds(600));
  REQUIRE(live.size() == 1);
  CHECK(live[0].router_id == "live");
  // A report renews the lease.
  REQUIRE(table.Replace(Report("dead", {{"a", 0, 2, 2}}), kT0 + milliseconds(2000)));
  CHECK(table.LoadOf("a", 0, kT0 + milliseconds(1000)) == LoadSum{3, 3, 2});
}

TEST_CASE("FleetLoadTable: candidates without a load of their own take the fleet's") {
  FleetLoadTable table;
  REQUIRE(table.Replace(Report("r1", {{"a", 0, 3, 30}, {"b", 2, 1, 5}}), kT0 + milliseconds(1000)));
  REQUIRE(table.Replace(Report("r2", {{"a", 0, 2, 20}}), kT0 + milliseconds(1000)));
  std::vector<RouteCandidate> candidates(4);
  candidates[0].instance_id = "a";  // none given: the fleet's
  candidates[1].instance_id = "a";  // given: kept
  candidates[1].queued_prefill_tokens = 7;
  candidates[2].instance_id = "b";  // rank 2's
  candidates[2].dp_rank = 2;
  candidates[3].instance_id = "c";  // unknown: stays idle
  CHECK(table.FillCandidates(candidates, 16, kT0) == 2);
  CHECK(candidates[0].queued_prefill_tokens == 5 * 16);
  CHECK(candidates[0].active_decode_blocks == 50);
  CHECK(candidates[1].queued_prefill_tokens == 7);
  CHECK(candidates[1].active_decode_blocks == 0);
  CHECK(candidates[2].queued_prefill_tokens == 16);
  CHECK(candidates[2].active_decode_blocks == 5);
  CHECK(candidates[3].queued_prefill_tokens == 0);
}

TEST_CASE("FleetLoadTable: routers past kMaxLoadRouters are refused until one expires") {
  FleetLoadTable table;
  for (size_t i = 0; i < kMaxLoadRouters; ++i) {
    REQUIRE(table.Replace(Report("r" + std::to_string(i), {{"a", 0, 1, 1}}),
                          i == 0 ? kT0 : Clock::now() + milliseconds(60'000)));
  }
  // r0's lease (kT0) is long over: the table makes room by dropping it.
  CHECK(table.HasRoom("new", Clock::now()));
  CHECK(table.Replace(Report("new", {{"a", 0, 1, 1}}), Clock::now() + milliseconds(60'000)));
  CHECK_FALSE(table.HasRoom("another", Clock::now()));
  CHECK_FALSE(table.Replace(Report("another", {{"a", 0, 1, 1}}), Clock::now() + milliseconds(1)));
  CHECK(table.HasRoom("r5", Clock::now()));  // a known router always has room
}

TEST_CASE("DecodeLoadReport: the body, and errors naming the field") {
  Result<LoadReport> ok = DecodeLoadReport(
      R"({"router_id": "r1", "ttl_ms": 500, "loads": [{"instance_id": "a", "dp_rank": 1,)"
      R"( "prefill_blocks": 3, "decode_blocks": 4}, {"instance_id": "b"}]})");
  REQUIRE_MESSAGE(ok.has_value(), ok.status().ToString());
  CHECK(*ok == LoadReport{"r1", 500, {{"a", 1, 3, 4}, {"b", 0, 0, 0}}});
  CHECK(DecodeLoadReport(EncodeLoadReport(*ok)).value() == *ok);

  const auto error = [](std::string body) { return DecodeLoadReport(body).status().ToString(); };
  CHECK(error(R"({"loads": []})").find("router_id: is required") != std::string::npos);
  CHECK(error(R"({"router_id": "r"})").find("loads: is required") != std::string::npos);
  CHECK(error(R"({"router_id": "r", "ttl_ms": 5, "loads": []})")
            .find("ttl_ms: must be an integer from 100") != std::string::npos);
  CHECK(error(R"({"router_id": "r", "loads": [{"instance_id": "a", "prefill_blocks": -1}]})")
            .find("loads[0].prefill_blocks: must be an integer from 0") != std::string::npos);
  CHECK(error(R"({"router_id": "r", "loads": [{"instance_id": ""}]})")
            .find("loads[0].instance_id: must be a non-empty string") != std::string::npos);
  CHECK(error(R"({"router_id": "r", "loads": [{"instance_id": "a"}, {"instance_id": "a"}]})")
            .find("loads[1]: instance \"a\" rank 0 is given twice") != std::string::npos);
  CHECK(error(R"({"router_id": ")" + std::string(300, 'x') + R"(", "loads": []})")
            .find("router_id: at most 256 bytes") != std::string::npos);
  std::string many = R"({"router_id": "r", "loads": [)";
  for (size_t i = 0; i <= kMaxLoadEntries; ++i) many += std::string(i ? "," : "") + "{}";
  const Status too_many = DecodeLoadReport(many + "]}").status();
  CHECK(too_many.code() == StatusCode::kPayloadTooLarge);
  CHECK(too_many.ToString().find("at most 10000") != std::string::npos);
}

TEST_CASE("kLoadReport payloads round-trip; truncated or invalid ones are refused") {
  const LoadReport report{"r1", 500, {{"a", 1, 3, 4}, {"b", 0, 0, 9}}};
  const std::string bytes = protocol::EncodeLoadReportRequest(report);
  CHECK(protocol::DecodeLoadReportRequest(bytes).value() == report);
  for (size_t n = 0; n < bytes.size(); ++n) {
    CHECK_FALSE(protocol::DecodeLoadReportRequest(bytes.substr(0, n)).has_value());
  }
  const Status bad_ttl =
      protocol::DecodeLoadReportRequest(protocol::EncodeLoadReportRequest({"r", 5, {}})).status();
  CHECK(bad_ttl.ToString().find("ttl_ms: must be an integer from 100") != std::string::npos);
  // docs/protocol.md §kLoadReport's example.
  CHECK(protocol::EncodeLoadReportRequest({"r", 500, {{"a", 1, 3, 4}}}) ==
        std::string("\x01r\xf4\x03\x01\x01"
                    "a"
                    "\x01\x03\x04"));
  const protocol::LoadReportAnswer answer{7, 1'700'000'000'123};
  CHECK(protocol::EncodeLoadReportAnswer(answer) == std::string("\x07\xfb\xd0\x95\xff\xbc\x31"));
  CHECK(protocol::DecodeLoadReportAnswer(protocol::EncodeLoadReportAnswer(answer)).value() ==
        answer);
}

TEST_CASE("kLoadView answers round-trip and refill a FleetLoadTable") {
  const protocol::LoadViewAnswer view{
      9, {{"r1", 1'500, {{"a", 0, 3, 4}}}, {"r2", 200, {{"a", 0, 1, 1}, {"b", 2, 5, 0}}}}};
  const std::string bytes = protocol::EncodeLoadViewAnswer(view);
  CHECK(protocol::DecodeLoadViewAnswer(bytes).value() == view);
  for (size_t n = 0; n < bytes.size(); ++n) {
    CHECK_FALSE(protocol::DecodeLoadViewAnswer(bytes.substr(0, n)).has_value());
  }
  CHECK(protocol::DecodeLoadViewAnswer(protocol::EncodeLoadViewAnswer({})).value() ==
        protocol::LoadViewAnswer{});
  // docs/protocol.md §kLoadView's example.
  CHECK(protocol::EncodeLoadViewAnswer({7, {{"r", 500, {{"a", 1, 3, 4}}}}}) ==
        std::string("\x07\x01\x01r\xf4\x03\x01\x01"
                    "a"
                    "\x01\x03\x04"));

  FleetLoadTable table;
  const auto now = FleetLoadTable::Clock::now();
  REQUIRE(table.Replace({"stale", 2'000, {{"a", 0, 100, 100}}}, now + std::chrono::seconds(2)));
  view.FillTable(&table, now);  // replaces every report: "stale" is gone
  CHECK(table.LoadOf("a", 0, now) == LoadSum{4, 5, 2});
  CHECK(table.LoadOf("b", std::nullopt, now) == LoadSum{5, 0, 1});
  // Each report expires when the server said: r2 after 200 ms, r1 after 1,500 ms.
  CHECK(table.LoadOf("a", 0, now + std::chrono::milliseconds(300)) == LoadSum{3, 4, 1});
  CHECK(table.LoadOf("a", 0, now + std::chrono::milliseconds(1'600)) == LoadSum{});
}

}  // namespace
}  // namespace kvatlas
