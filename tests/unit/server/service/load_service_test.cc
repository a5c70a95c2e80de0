// Shared in-flight load through the service layer (docs/routing.md §Shared load): reports
// committed like any write, summed across routers, and taken by route candidates that give
// no load of their own.
#include "server/service/load_service.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "server/service/route_decision.h"
#include "tests/support/in_memory_services.h"

namespace kvatlas::server {
namespace {

using testing::InMemoryServices;

const ContextKey kContext{"default", "m", "", 2, ""};

RoutingRequest Route(std::vector<RouteCandidate> candidates) {
  RoutingRequest request;
  request.lookup.context = kContext;
  request.lookup.token_ids = {1, 2, 3, 4};
  request.candidates = std::move(candidates);
  return request;
}

RouteCandidate Candidate(std::string id, uint64_t queued_tokens = 0) {
  return RouteCandidate{.instance_id = std::move(id),
                        .dp_rank = std::nullopt,
                        .queued_prefill_tokens = queued_tokens,
                        .active_decode_blocks = 0};
}

TEST_SUITE("Services") {
  TEST_CASE("a route scores candidates without a load of their own with the fleet's") {
    InMemoryServices s;
    // Two routers have sent work to "a" (3 + 2 prompt blocks, 40 + 10 decode blocks).
    REQUIRE(ReportLoad(s.services, LoadReport{"r1", 10'000, {{"a", 0, 3, 40}}}).has_value());
    REQUIRE(ReportLoad(s.services, LoadReport{"r2", 10'000, {{"a", 0, 2, 10}}}).has_value());
    const Result<RoutingAnswer> answer =
        DecideRoute(s.services, Route({Candidate("a"), Candidate("b")}));
    REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    // Nothing cached anywhere: "b" (idle) wins; "a" carries the fleet's load.
    REQUIRE(answer->ranked.size() == 2);
    CHECK(answer->ranked[0].candidate.instance_id == "b");
    const ScoredCandidate& a = answer->ranked[1];
    CHECK(a.queued_prefill_blocks == 5);
    CHECK(a.candidate.active_decode_blocks == 50);
    // A load given by the caller is the caller's.
    const Result<RoutingAnswer> own = DecideRoute(s.services, Route({Candidate("a", 2)}));
    REQUIRE(own.has_value());
    CHECK(own->ranked[0].queued_prefill_blocks == 1);
    CHECK(own->ranked[0].candidate.active_decode_blocks == 0);
    // A router's new report replaces its old one; an empty one removes it.
    REQUIRE(ReportLoad(s.services, LoadReport{"r1", 10'000, {}}).has_value());
    const Result<RoutingAnswer> after = DecideRoute(s.services, Route({Candidate("a")}));
    REQUIRE(after.has_value());
    CHECK(after->ranked[0].queued_prefill_blocks == 2);
    CHECK(after->ranked[0].candidate.active_decode_blocks == 10);
  }

  TEST_CASE("a load report is validated before it is committed") {
    InMemoryServices s;
    const Revision before = s.services.machine->applied_revision();
    CHECK(ReportLoad(s.services, LoadReport{"", 1'000, {}}).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(ReportLoad(s.services, LoadReport{"r", 10, {}}).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(ReportLoad(s.services, LoadReport{"r", 1'000, {{"a", 0, kMaxLoadBlocks + 1, 0}}})
              .status()
              .code() == StatusCode::kInvalidArgument);
    CHECK(s.services.machine->applied_revision() == before);
  }
}

}  // namespace
}  // namespace kvatlas::server
