// A LocalIndex's predictions (client/src/local_predictions.h, docs/feed.md §LocalIndex):
// predicted records are kept until their expires_at_ms (the clock is the caller's `now`),
// bounded by the table's cap with drops counted, dropped by the holder's real records, and
// read back as LookupAnswer::predicted, which Scorer credits as the server's route does.
#include "client/src/local_predictions.h"

#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "kvatlas/client/scorer.h"

namespace kvatlas::client_internal {
namespace {

using Clock = PredictedTable::Clock;
using std::chrono::milliseconds;

const ContextKey kContext{"default", "m", "", 4, ""};

uint64_t Ms(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count());
}

FeedRecord Record(FeedOp op, const std::string& holder, std::vector<BlockKey> keys,
                  uint64_t expires_at_ms = 0, uint32_t rank = 0) {
  FeedRecord r{1, op, kContext, HolderKey{holder, rank}, Tier::kGpu, std::move(keys), {}};
  r.expires_at_ms = expires_at_ms;
  return r;
}

// A fixed point in time, whole milliseconds (expires_at_ms has no finer grain).
const Clock::time_point kT0 = Clock::time_point(milliseconds(1'700'000'000'000));

TEST_SUITE("LocalPredictions") {
  TEST_CASE("LocalPredictions: a predicted record counts until its expiry on the local clock") {
    PredictedTable table;
    ApplyToPredictions(Record(FeedOp::kPredicted, "b", {1, 2, 3}, Ms(kT0 + milliseconds(500))),
                       &table, kT0);
    const std::vector<BlockKey> request = {1, 2, 3, 4};
    CHECK(PredictedPrefixes(table, kContext, request, {}, kT0) ==
          std::vector<PredictedPrefix>{{"b", 0, 3}});
    CHECK(PredictedPrefixes(table, kContext, request, {}, kT0 + milliseconds(499)).size() == 1);
    // At its expiry it is gone.
    CHECK(PredictedPrefixes(table, kContext, request, {}, kT0 + milliseconds(500)).empty());
    // Another context, or a request not starting with the predicted block: nothing.
    CHECK(
        PredictedPrefixes(table, ContextKey{"default", "m", "", 8, ""}, request, {}, kT0).empty());
    const std::vector<BlockKey> other = {9, 1, 2};
    CHECK(PredictedPrefixes(table, kContext, other, {}, kT0).empty());
    // One already ended when it arrives is not kept.
    ApplyToPredictions(Record(FeedOp::kPredicted, "c", {1}, Ms(kT0 - milliseconds(1))), &table,
                       kT0);
    CHECK(PredictedPrefixes(table, kContext, request, "c", kT0).empty());
    // Swept once a later record applies past the expiry.
    ApplyToPredictions(Record(FeedOp::kPredicted, "d", {7}, Ms(kT0 + milliseconds(2000))), &table,
                       kT0 + milliseconds(600));
    CHECK(table.stats().entries == 1);
    CHECK(table.stats().expired == 3);
  }

  TEST_CASE("LocalPredictions: the cap drops new predictions and counts them") {
    PredictedTable table(3);
    const uint64_t later = Ms(kT0 + milliseconds(60'000));
    ApplyToPredictions(Record(FeedOp::kPredicted, "b", {1, 2}, later), &table, kT0);
    ApplyToPredictions(Record(FeedOp::kPredicted, "c", {1, 2}, later), &table, kT0);
    CHECK(table.stats().entries == 3);
    CHECK(table.stats().dropped == 1);
    const std::vector<BlockKey> request = {1, 2};
    CHECK(PredictedPrefixes(table, kContext, request, {}, kT0) ==
          std::vector<PredictedPrefix>{{"b", 0, 2}, {"c", 0, 1}});
    // Only one instance's, when asked.
    CHECK(PredictedPrefixes(table, kContext, request, "c", kT0) ==
          std::vector<PredictedPrefix>{{"c", 0, 1}});
  }

  TEST_CASE("LocalPredictions: the holder's real records replace its predictions") {
    const uint64_t later = Ms(kT0 + milliseconds(60'000));
    const std::vector<BlockKey> request = {1, 2};
    for (const FeedOp op : {FeedOp::kStored, FeedOp::kRemoved, FeedOp::kCleared}) {
      CAPTURE(FeedOpName(op));
      PredictedTable table;
      ApplyToPredictions(Record(FeedOp::kPredicted, "b", {1, 2}, later), &table, kT0);
      ApplyToPredictions(Record(FeedOp::kPredicted, "b", {1, 2}, later, 1), &table, kT0);
      ApplyToPredictions(Record(FeedOp::kPredicted, "c", {1, 2}, later), &table, kT0);
      ApplyToPredictions(Record(op, "b", {5}), &table, kT0);  // rank 0 only
      CHECK(PredictedPrefixes(table, kContext, request, {}, kT0) ==
            std::vector<PredictedPrefix>{{"b", 1, 2}, {"c", 0, 2}});
      // The server already applied the live rule: a later prediction for it is kept.
      ApplyToPredictions(Record(FeedOp::kPredicted, "b", {1}, later), &table, kT0);
      CHECK(PredictedPrefixes(table, kContext, request, "b", kT0).size() == 2);
    }
    // Evictions and lease expiries are not the holder's events: they leave predictions.
    for (const FeedOp op : {FeedOp::kEvicted, FeedOp::kExpired}) {
      PredictedTable table;
      ApplyToPredictions(Record(FeedOp::kPredicted, "b", {1, 2}, later), &table, kT0);
      ApplyToPredictions(Record(op, "b", {1}), &table, kT0);
      CHECK(PredictedPrefixes(table, kContext, request, {}, kT0).size() == 1);
    }
  }

  TEST_CASE("LocalPredictions: Scorer credits a lookup's predictions as the server's route does") {
    // Two candidates, nothing cached: the one predicted 4 blocks of the 4-block request is
    // ranked first, its blocks credited as predicted; a rank-less candidate takes its best
    // rank's, one naming another rank gets none.
    LookupAnswer lookup;
    lookup.context = kContext;
    lookup.blocks_queried = 4;
    lookup.predicted = {{"b", 1, 4}, {"b", 0, 2}};
    LookupRequest request;
    request.context = kContext;
    request.by_hash = true;
    request.seq_hashes = {1, 2, 3, 4};
    const std::vector<RouteCandidate> candidates = {
        {"a", std::nullopt, 0, 0, false}, {"b", std::nullopt, 0, 0, false}, {"b", 2, 0, 0, false}};
    const Result<Scorer> scorer = Scorer::Create();
    REQUIRE(scorer.has_value());
    const Result<RoutingAnswer> routed = scorer->Score(request, lookup, candidates);
    REQUIRE(routed.has_value());
    REQUIRE(routed->ranked.size() == 3);
    CHECK(routed->ranked[0].index == 1);
    CHECK(routed->ranked[0].predicted_blocks == 4);
    CHECK(routed->ranked[0].matched.predicted == 4);
    CHECK(routed->ranked[1].matched.predicted == 0);
    // The same as the route the server computes from its own predicted prefixes.
    RoutingRequest server;
    server.lookup = request;
    server.candidates = candidates;
    LookupAnswer plain = lookup;
    plain.predicted.clear();
    const std::vector<uint32_t> predicted = {0, 4, 0};
    CHECK(RouteFromLookup(server, plain, predicted).value().ranked == routed->ranked);
  }
}

}  // namespace
}  // namespace kvatlas::client_internal
