// PredictedTable (docs/routing.md §Approximate mode): predictions end with their TTL, the
// entry cap bounds memory (dropped past it, counted), real events replace them, and the
// prefix read stops at the first block not predicted. A StateMachine applying a
// PredictCommand fills it; a Store of the holder empties it.
#include "common/internal/predicted_table.h"

#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "server/state/state_machine.h"

namespace kvatlas::server {
namespace {

using Clock = PredictedTable::Clock;
using std::chrono::milliseconds;

const ContextKey kContext{"t", "m", "", 4, ""};
const HolderKey kHolder{"a", 0};
const std::vector<BlockKey> kKeys = {11, 12, 13, 14};

TEST_SUITE("PredictedTable") {
  TEST_CASE("PredictedTable: a prediction counts until its TTL ends, then is swept") {
    PredictedTable table;
    const Clock::time_point t0 = Clock::now();
    CHECK(table.Record(kContext, kHolder, kKeys, t0, t0 + milliseconds(1000), t0) == 4);
    CHECK(table.PrefixOf(kContext, kHolder, kKeys, t0) == 4);
    // A longer request sharing the prefix: 4 leading blocks; one with another first block
    // (block keys are chained: every later key differs too): none.
    const std::vector<BlockKey> longer = {11, 12, 13, 14, 15};
    CHECK(table.PrefixOf(kContext, kHolder, longer, t0) == 4);
    CHECK(table.PrefixOf(kContext, kHolder, std::vector<BlockKey>{99, 12}, t0) == 0);
    // Other contexts and holders see nothing.
    CHECK(table.PrefixOf(ContextKey{"t", "m", "", 8, ""}, kHolder, kKeys, t0) == 0);
    CHECK(table.PrefixOf(kContext, HolderKey{"a", 1}, kKeys, t0) == 0);
    CHECK(table.BestOfInstance(kContext, "a", kKeys, t0) == 4);
    CHECK(table.BestOfInstance(kContext, "b", kKeys, t0) == 0);
    REQUIRE(table.Matches(kContext, kKeys, t0).size() == 1);
    CHECK(table.Matches(kContext, kKeys, t0)[0] == PredictedMatch{kHolder, 4});

    // Past the TTL: not counted, and the next sweep frees them.
    const Clock::time_point later = t0 + milliseconds(2000);
    CHECK(table.PrefixOf(kContext, kHolder, kKeys, later) == 0);
    CHECK(table.Matches(kContext, kKeys, later).empty());
    CHECK(table.stats().entries == 4);
    CHECK(table.Record(kContext, HolderKey{"b", 0}, std::vector<BlockKey>{1}, later,
                       later + milliseconds(1000), later) == 1);
    CHECK(table.stats().entries == 1);
    CHECK(table.stats().expired == 4);
    // A prediction that ended already is not recorded (a log replayed at start-up).
    CHECK(table.Record(kContext, kHolder, kKeys, t0, t0 + milliseconds(1000), later) == 0);
  }

  TEST_CASE("PredictedTable: past the cap new entries are dropped and counted") {
    PredictedTable table(6);
    const Clock::time_point t0 = Clock::now();
    CHECK(table.Record(kContext, kHolder, kKeys, t0, t0 + milliseconds(1000), t0) == 4);
    CHECK(table.Record(kContext, HolderKey{"b", 0}, kKeys, t0, t0 + milliseconds(1000), t0) == 2);
    CHECK(table.stats().entries == 6);
    CHECK(table.stats().dropped == 2);
    CHECK(table.PrefixOf(kContext, HolderKey{"b", 0}, kKeys, t0) == 2);
    // Renewing a kept entry takes no room; once they expire there is room again.
    CHECK(table.Record(kContext, kHolder, kKeys, t0, t0 + milliseconds(5000), t0) == 4);
    CHECK(table.stats().entries == 6);
    const Clock::time_point later = t0 + milliseconds(2000);
    CHECK(table.Record(kContext, HolderKey{"c", 0}, std::vector<BlockKey>{7, 8}, later,
                       later + milliseconds(1000), later) == 2);
    CHECK(table.stats().entries == 6);  // a's 4 renewed, b's 2 expired, c's 2
    CHECK(PredictedTable(0).Record(kContext, kHolder, kKeys, t0, t0 + milliseconds(1), t0) == 0);
  }

  TEST_CASE("PredictedTable: a real event replaces the holder's predictions while it is live") {
    PredictedTable table;
    const Clock::time_point t0 = Clock::now();
    REQUIRE(table.Record(kContext, kHolder, kKeys, t0, t0 + milliseconds(1000), t0) == 4);
    REQUIRE(table.Record(kContext, HolderKey{"b", 0}, kKeys, t0, t0 + milliseconds(1000), t0) == 4);
    table.NoteEvent(kHolder, t0);
    CHECK(table.PrefixOf(kContext, kHolder, kKeys, t0) == 0);
    CHECK(table.PrefixOf(kContext, HolderKey{"b", 0}, kKeys, t0) == 4);  // others stay
    CHECK(table.stats().replaced == 4);
    CHECK(table.stats().entries == 4);
    // Its stream is live: new predictions are not recorded within the live window of its
    // last event...
    const Clock::time_point soon = t0 + kPredictionLiveWindow - milliseconds(1);
    CHECK(table.IsLive(kHolder, soon));
    CHECK(table.Record(kContext, kHolder, kKeys, soon, soon + milliseconds(1000), soon) == 0);
    // ...and are again once it has been quiet that long (its stream is down), however long
    // the TTL.
    const Clock::time_point quiet = t0 + kPredictionLiveWindow;
    CHECK_FALSE(table.IsLive(kHolder, quiet));
    CHECK(table.Record(kContext, kHolder, kKeys, quiet, quiet + milliseconds(60'000), quiet) == 4);
  }

  TEST_CASE("PredictedTable: entries leave in order of expiry; renewals keep the queue bounded") {
    PredictedTable table;
    const Clock::time_point t0 = Clock::now();
    // Two holders, the second's predictions ending first although recorded later (another
    // TTL): each is unseen by reads from its end, and freed once the queue reaches it.
    REQUIRE(table.Record(kContext, kHolder, kKeys, t0, t0 + milliseconds(3000), t0) == 4);
    const HolderKey b{"b", 0};
    REQUIRE(table.Record(kContext, b, kKeys, t0, t0 + milliseconds(1000), t0) == 4);
    const Clock::time_point mid = t0 + milliseconds(2000);
    CHECK(table.PrefixOf(kContext, b, kKeys, mid) == 0);
    CHECK(table.PrefixOf(kContext, kHolder, kKeys, mid) == 4);
    const Clock::time_point end = t0 + milliseconds(3000);
    CHECK(table.Record(kContext, HolderKey{"c", 0}, std::vector<BlockKey>{1}, end,
                       end + milliseconds(1000), end) == 1);
    CHECK(table.stats().entries == 1);
    CHECK(table.stats().expired == 8);
    CHECK(table.Matches(kContext, kKeys, end).empty());

    // One key renewed 10,000 times before any end: one entry, and the queue of its ends
    // stays bounded.
    for (int i = 1; i <= 10'000; ++i) {
      REQUIRE(table.Record(kContext, kHolder, std::vector<BlockKey>{11}, end,
                           end + milliseconds(1000 + i), end) == 1);
    }
    CHECK(table.stats().entries == 2);
    CHECK(table.stats().queued <= 2 * table.stats().entries + 1024);
    CHECK(table.PrefixOf(kContext, kHolder, kKeys, end + milliseconds(10'500)) == 1);
    // The key's last end frees it, its earlier ends do nothing.
    const Clock::time_point gone = end + milliseconds(11'001);
    CHECK(table.Record(kContext, HolderKey{"d", 0}, std::vector<BlockKey>{1}, gone,
                       gone + milliseconds(1000), gone) == 1);
    CHECK(table.stats().entries == 1);
    CHECK(table.PrefixOf(kContext, kHolder, kKeys, gone) == 0);
  }

  TEST_CASE("PredictedTable: a recording expires a bounded number of entries") {
    // 20,000 predictions ending together: the first recording after their end frees 16,384
    // of them, the next the rest; reads see none of them meanwhile.
    PredictedTable table(100'000);
    const Clock::time_point t0 = Clock::now();
    std::vector<BlockKey> many(20'000);
    for (size_t i = 0; i < many.size(); ++i) many[i] = 1'000'000 + i;
    REQUIRE(table.Record(kContext, kHolder, many, t0, t0 + milliseconds(1000), t0) == 20'000);
    const Clock::time_point later = t0 + milliseconds(2000);
    REQUIRE(table.Record(kContext, HolderKey{"b", 0}, kKeys, later, later + milliseconds(1000),
                         later) == 4);
    CHECK(table.stats().expired == 16'384);
    CHECK(table.stats().entries == 20'000 - 16'384 + 4);
    CHECK(table.PrefixOf(kContext, kHolder, std::vector<BlockKey>{many.back()}, later) == 0);
    REQUIRE(table.Record(kContext, HolderKey{"b", 0}, kKeys, later, later + milliseconds(1000),
                         later) == 0);  // already predicted as long: nothing renewed
    CHECK(table.stats().expired == 20'000);
    CHECK(table.stats().entries == 4);
  }

  TEST_CASE("PredictedTable: a StateMachine applies PredictCommands; a Store replaces them") {
    StateMachine machine({}, nullptr);
    const auto apply = [&machine](const CommandBatch& batch) {
      const CommandBatch* one[] = {&batch};
      return machine.Apply(one).has_value();
    };
    const uint64_t now_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count());
    CommandBatch predict;
    predict.commands.emplace_back(PredictCommand{kContext, kHolder, 60'000, now_ms, kKeys});
    REQUIRE(apply(predict));
    CHECK(machine.predicted().PrefixOf(kContext, kHolder, kKeys, Clock::now()) == 4);
    // An old one (a log replayed long after) counts for nothing.
    CommandBatch stale;
    stale.commands.emplace_back(
        PredictCommand{kContext, HolderKey{"b", 0}, 60'000, now_ms - 120'000, kKeys});
    REQUIRE(apply(stale));
    CHECK(machine.predicted().PrefixOf(kContext, HolderKey{"b", 0}, kKeys, Clock::now()) == 0);

    StoreCommand store;
    store.context = kContext;
    store.holder = kHolder;
    store.hashes = {11};
    CommandBatch event;
    event.commands.emplace_back(store);
    REQUIRE(apply(event));
    CHECK(machine.predicted().PrefixOf(kContext, kHolder, kKeys, Clock::now()) == 0);
  }
}

}  // namespace
}  // namespace kvatlas::server
