// Predicted records on the change feed (docs/feed.md §Predicted records), driven by a real
// (in-memory) StateMachine: only watchers that ask get them, the others see the records
// and revisions they saw before; what is published is what the PredictedTable recorded
// (none for a live holder, none past the cap, none already ended); apply order is kept.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/feed/change_feed.h"
#include "tests/support/feed_fixture.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using testing::ApplyOne;
using namespace std::chrono_literals;

const ContextKey kContext{"default", "m", "", 2, ""};

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

PredictCommand Predict(const std::string& holder, std::vector<BlockKey> keys, uint64_t accepted_ms,
                       uint32_t ttl_ms = 60'000) {
  return PredictCommand{kContext, HolderKey{holder, 0}, ttl_ms, accepted_ms, std::move(keys)};
}

CommandBatch Batch(Command command) {
  CommandBatch batch;
  batch.commands.push_back(std::move(command));
  return batch;
}

CommandBatch Store(const std::string& holder, std::vector<BlockKey> keys) {
  return testing::StoreBatch(kContext, HolderKey{holder, 0}, std::move(keys), Tier::kGpu, {});
}

std::vector<FeedRecord> Drain(Watcher& w) { return testing::DrainRecords(w); }

FeedFilter WithPredictions() {
  FeedFilter filter = FeedFilter::ForContext(kContext);
  filter.predicted = true;
  return filter;
}

TEST_SUITE("PredictedFeed") {
  TEST_CASE("PredictedFeed: a watcher without the flag sees no predicted record, same revisions") {
    testing::FeedFixture f;
    auto plain = f.feed.Subscribe(0, FeedFilter::ForContext(kContext));
    auto all = f.feed.Subscribe(0, {});
    auto predicted = f.feed.Subscribe(0, WithPredictions());
    REQUIRE(plain.has_value());
    REQUIRE(all.has_value());
    REQUIRE(predicted.has_value());
    const uint64_t accepted = NowMs();
    ApplyOne(f.machine, Store("a", {1, 2}));                        // 1
    ApplyOne(f.machine, Batch(Predict("b", {1, 2, 3}, accepted)));  // 2
    ApplyOne(f.machine, Store("a", {3}));                           // 3

    for (auto* w : {&*plain, &*all}) {
      const std::vector<FeedRecord> got = Drain(**w);
      REQUIRE(got.size() == 2);
      CHECK(got[0].revision == 1);
      CHECK(got[1].revision == 3);
      for (const FeedRecord& r : got) CHECK(r.op == FeedOp::kStored);
      CHECK((*w)->ResumeFrom() == 3);
    }
    const std::vector<FeedRecord> got = Drain(**predicted);
    REQUIRE(got.size() == 3);
    CHECK(got[0].op == FeedOp::kStored);
    CHECK(got[1].revision == 2);
    CHECK(got[1].op == FeedOp::kPredicted);
    CHECK(got[1].context == kContext);
    CHECK(got[1].holder == HolderKey{"b", 0});
    CHECK(got[1].keys == std::vector<BlockKey>{1, 2, 3});
    CHECK(got[1].locations.empty());
    CHECK(got[1].expires_at_ms == accepted + 60'000);
    CHECK(got[2].op == FeedOp::kStored);
    CHECK((*predicted)->ResumeFrom() == 3);

    // A medium filter matches no predicted record (they have no tier).
    FeedFilter gpu = WithPredictions();
    gpu.tier = Tier::kGpu;
    CHECK_FALSE(gpu.Matches(got[1]));
    CHECK(gpu.Matches(got[0]));
  }

  TEST_CASE("PredictedFeed: a revision of predictions only advances a plain watcher's take") {
    testing::FeedFixture f;
    auto plain = f.feed.Subscribe(0, FeedFilter::ForContext(kContext));
    REQUIRE(plain.has_value());
    ApplyOne(f.machine, Batch(Predict("b", {7}, NowMs())));
    Result<Watcher::Take> take = (*plain)->TryTake(1000);
    REQUIRE(take.has_value());
    CHECK(take->records.empty());
    CHECK(take->through == 1);
    CHECK((*plain)->ResumeFrom() == 1);
  }

  TEST_CASE("PredictedFeed: only what the table recorded is published, in apply order") {
    ChangeFeed feed;
    StateMachineOptions options;
    options.predicted_max_entries = 2;
    StateMachine machine(options, nullptr);
    machine.SetApplyObserver(&feed);
    REQUIRE(machine.Recover().ok());
    auto w = feed.Subscribe(0, WithPredictions());
    REQUIRE(w.has_value());
    const uint64_t now = NowMs();
    // Past the cap: the first two keys only (the table's effect).
    ApplyOne(machine, Batch(Predict("b", {1, 2, 3}, now)));  // 1
    // Ended already (accepted long ago): nothing.
    ApplyOne(machine, Batch(Predict("c", {1}, now - 120'000, 1'000)));  // 2
    // A holder whose events flow (a store just applied) is not predicted.
    ApplyOne(machine, Store("a", {9}));                    // 3
    ApplyOne(machine, Batch(Predict("a", {9, 10}, now)));  // 4
    // One entry: the prediction and then the holder's own store, in that order (the store
    // drops b's predictions on a replica as on the server, freeing the cap).
    CommandBatch both = Batch(Predict("d", {5}, now));
    ApplyOne(machine, both);  // 5: the cap is full (b's two), d gets nothing
    CommandBatch store_b = Store("b", {4});
    store_b.commands.insert(store_b.commands.begin(), Predict("e", {6}, now));
    ApplyOne(machine, store_b);  // 6: e's prediction is refused (full), then b's store

    const std::vector<FeedRecord> got = Drain(**w);
    REQUIRE(got.size() == 3);
    CHECK(got[0].revision == 1);
    CHECK(got[0].op == FeedOp::kPredicted);
    CHECK(got[0].keys == std::vector<BlockKey>{1, 2});
    CHECK(got[1].revision == 3);
    CHECK(got[1].op == FeedOp::kStored);
    CHECK(got[2].revision == 6);
    CHECK(got[2].op == FeedOp::kStored);
    CHECK(got[2].holder == HolderKey{"b", 0});
    CHECK(machine.predicted().stats().entries == 0);

    // With room again: a prediction then the holder's store in one entry are both
    // published, the prediction first.
    CommandBatch ordered = Store("f", {8});
    ordered.commands.insert(ordered.commands.begin(), Predict("f", {8}, now));
    ApplyOne(machine, ordered);  // 7
    const std::vector<FeedRecord> last = Drain(**w);
    REQUIRE(last.size() == 2);
    CHECK(last[0].op == FeedOp::kPredicted);
    CHECK(last[0].revision == 7);
    CHECK(last[1].op == FeedOp::kStored);
    CHECK(last[1].revision == 7);
  }
}

}  // namespace
}  // namespace kvatlas::server
