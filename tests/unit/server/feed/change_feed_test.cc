// The change feed driven by a real (in-memory) StateMachine: records for every kind of
// change, filters, resume, compaction, a slow watcher cut without affecting others, and
// ordering and completeness under concurrent apply.
#include "server/feed/change_feed.h"

#include <doctest/doctest.h>

#include <set>
#include <thread>

#include "tests/support/feed_fixture.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using testing::ApplyOne;

using namespace std::chrono_literals;

const ContextKey kContext{"default", "m", "", 2, ""};

CommandBatch Store(const std::string& holder, std::vector<BlockKey> keys, Tier tier = Tier::kGpu,
                   std::vector<std::string> locations = {}) {
  return testing::StoreBatch(kContext, HolderKey{holder, 0}, std::move(keys), tier,
                             std::move(locations));
}

CommandBatch Remove(const std::string& holder, std::vector<BlockKey> keys) {
  RemoveCommand remove;
  remove.context = kContext;
  remove.holder = HolderKey{holder, 0};
  remove.hashes = std::move(keys);
  CommandBatch batch;
  batch.commands.emplace_back(std::move(remove));
  return batch;
}

std::vector<FeedRecord> Drain(Watcher& w) { return testing::DrainRecords(w); }

using Fixture = testing::FeedFixture;

TEST_SUITE("ChangeFeed") {
  TEST_CASE("ChangeFeed: stores, removes, clears and evictions become records") {
    ChangeFeedOptions options;
    Fixture f(options);
    auto w = f.feed.Subscribe(0, {});
    REQUIRE(w.has_value());
    ApplyOne(f.machine, Store("a", {1, 2, 3}));
    ApplyOne(f.machine, Store("a", {1}));  // a second reference: no new copy, no record
    ApplyOne(f.machine, Store("pool", {1, 2}, Tier::kShared, {"s3://1", "s3://2"}));
    ApplyOne(f.machine, Remove("a", {3}));
    CommandBatch clear;
    clear.commands.emplace_back(ClearCommand{HolderKey{"pool", 0}, std::nullopt, std::nullopt});
    const Revision last = ApplyOne(f.machine, clear);

    std::vector<FeedRecord> records = Drain(**w);
    REQUIRE(records.size() == 4);
    CHECK(records[0].op == FeedOp::kStored);
    CHECK(records[0].revision == 1);
    CHECK(records[0].holder.id == "a");
    CHECK(records[0].context == kContext);
    CHECK(records[0].keys == std::vector<BlockKey>{1, 2, 3});
    CHECK(records[0].locations.empty());
    CHECK(records[1].revision == 3);
    CHECK(records[1].tier == Tier::kShared);
    CHECK(records[1].locations == std::vector<std::string>{"s3://1", "s3://2"});
    CHECK(records[2].op == FeedOp::kRemoved);
    CHECK(records[2].keys == std::vector<BlockKey>{3});
    CHECK(records[3].op == FeedOp::kCleared);
    CHECK(records[3].revision == last);
    CHECK(std::set<BlockKey>(records[3].keys.begin(), records[3].keys.end()) ==
          std::set<BlockKey>{1, 2});
    CHECK((*w)->ResumeFrom() == last);
    CHECK(f.feed.Stats().records_published == 4);
  }

  TEST_CASE("ChangeFeed: the per-context cap's evictions are records too") {
    StateMachineOptions options;
    options.index.max_entries_per_context = 2;
    ChangeFeed feed;
    StateMachine machine(options, nullptr);
    machine.SetApplyObserver(&feed);
    REQUIRE(machine.Recover().ok());
    auto w = feed.Subscribe(std::nullopt, {});
    REQUIRE(w.has_value());
    ApplyOne(machine, Store("a", {1, 2}));
    ApplyOne(machine, Store("a", {3}));
    std::vector<FeedRecord> records = Drain(**w);
    REQUIRE(records.size() == 3);
    CHECK(records[1].op == FeedOp::kStored);
    CHECK(records[2].op == FeedOp::kEvicted);
    CHECK(records[2].keys == std::vector<BlockKey>{1});
  }

  TEST_CASE("ChangeFeed: filters, and from = now") {
    Fixture f;
    ApplyOne(f.machine, Store("a", {1}));
    FeedFilter only_b;
    only_b.holder_id = "b";
    auto b = f.feed.Subscribe(std::nullopt, only_b);  // from now: revision 1 is not sent
    FeedFilter cpu;
    cpu.tier = Tier::kCpu;
    auto tier = f.feed.Subscribe(0, cpu);
    FeedFilter other_model;
    other_model.model = "other";
    auto none = f.feed.Subscribe(0, other_model);
    REQUIRE((b.has_value() && tier.has_value() && none.has_value()));
    ApplyOne(f.machine, Store("b", {2}));
    ApplyOne(f.machine, Store("a", {3}, Tier::kCpu));
    std::vector<FeedRecord> got_b = Drain(**b);
    REQUIRE(got_b.size() == 1);
    CHECK(got_b[0].keys == std::vector<BlockKey>{2});
    std::vector<FeedRecord> got_cpu = Drain(**tier);
    REQUIRE(got_cpu.size() == 1);
    CHECK(got_cpu[0].keys == std::vector<BlockKey>{3});
    CHECK(Drain(**none).empty());
    CHECK((*none)->ResumeFrom() == 3);  // filtered-out revisions still count as delivered
  }

  TEST_CASE("ChangeFeed: resume from a revision; compacted and future revisions are errors") {
    ChangeFeedOptions options;
    options.window_keys = 3;
    Fixture f(options);
    for (BlockKey k = 1; k <= 5; ++k) ApplyOne(f.machine, Store("a", {k}));
    // The window holds the last 3 keys (revisions 3..5): from 2 still misses nothing.
    auto w = f.feed.Subscribe(2, {});
    REQUIRE(w.has_value());
    std::vector<FeedRecord> records = Drain(**w);
    REQUIRE(records.size() == 3);
    CHECK(records.front().revision == 3);
    Result<std::unique_ptr<Watcher>> old = f.feed.Subscribe(1, {});
    REQUIRE_FALSE(old.has_value());
    CHECK(old.error().code() == StatusCode::kCompacted);
    CHECK(old.error().message() ==
          "from: revision 1 is compacted; the oldest revision to watch from is 2, the current "
          "revision is 5 (list with GET /v1/snapshot, then watch)");
    CHECK(f.feed.Subscribe(6, {}).error().code() == StatusCode::kInvalidArgument);
  }

  // The window's bound is its memory: a chunk of 1,000 keys takes at least 8,000 bytes, so a
  // 12,000-byte window holds one such chunk, and the older ones are compacted.
  TEST_CASE("ChangeFeed: the window is bounded by the bytes its records take") {
    ChangeFeedOptions options;
    options.window_bytes = 12'000;
    Fixture f(options);
    for (BlockKey first : {1, 1001, 2001}) {
      std::vector<BlockKey> keys(1000);
      for (BlockKey i = 0; i < 1000; ++i) keys[i] = first + i;
      ApplyOne(f.machine, Store("a", std::move(keys)));
    }
    const FeedStats stats = f.feed.Stats();
    CHECK(stats.window_chunks == 1);
    CHECK(stats.window_keys == 1000);
    CHECK(stats.window_bytes >= 8'000);
    CHECK(stats.window_bytes <= options.window_bytes);
    CHECK(stats.compacted_through == 2);
    CHECK(f.feed.Subscribe(1, {}).error().code() == StatusCode::kCompacted);
    auto w = f.feed.Subscribe(2, {});
    REQUIRE(w.has_value());
    CHECK(Drain(**w).size() == 1);
    // A record's locations count too: the same keys with long locations take more.
    ChangeFeedOptions wide;
    Fixture g(wide);
    ApplyOne(g.machine, Store("a", {1, 2}));
    const size_t without = g.feed.Stats().window_bytes;
    ApplyOne(g.machine,
             Store("b", {1, 2}, Tier::kShared, {std::string(100, 'x'), std::string(100, 'y')}));
    CHECK(g.feed.Stats().window_bytes - without > without + 200);
  }

  TEST_CASE("ChangeFeed: a slow watcher is cut, resumable; the others get everything") {
    ChangeFeedOptions options;
    options.watcher_queue_chunks = 2;
    Fixture f(options);
    auto slow = f.feed.Subscribe(0, {});
    auto fast = f.feed.Subscribe(0, {});
    REQUIRE((slow.has_value() && fast.has_value()));
    size_t fast_records = 0;
    for (BlockKey k = 1; k <= 6; ++k) {
      ApplyOne(f.machine, Store("a", {k}));
      fast_records += Drain(**fast).size();
    }
    CHECK(fast_records == 6);
    // The slow one gets what was queued before the cut, then the cut with its resume point.
    CHECK(Drain(**slow).size() == 2);
    Result<std::vector<FeedRecord>> cut = (*slow)->Next(10ms);
    REQUIRE_FALSE(cut.has_value());
    CHECK(cut.error().code() == StatusCode::kWatchCut);
    CHECK(cut.error().message().ends_with("watch again from revision 2"));
    CHECK(f.feed.Stats().cuts == 1);
    auto again = f.feed.Subscribe((*slow)->ResumeFrom(), {});
    REQUIRE(again.has_value());
    CHECK(Drain(**again).size() == 4);
  }

  TEST_CASE("ChangeFeed: complete and in order under concurrent apply") {
    Fixture f;
    auto w = f.feed.Subscribe(0, {});
    REQUIRE(w.has_value());
    constexpr BlockKey kGroups = 2000;
    std::thread writer([&] {
      for (BlockKey k = 1; k <= kGroups; ++k) ApplyOne(f.machine, Store("a", {k, k + 100000}));
    });
    std::vector<BlockKey> keys;
    Revision last = 0;
    bool ordered = true;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (keys.size() < 2 * kGroups && std::chrono::steady_clock::now() < deadline) {
      Result<std::vector<FeedRecord>> next = (*w)->Next(100ms);
      REQUIRE(next.has_value());
      for (const FeedRecord& r : *next) {
        ordered &= r.revision > last;
        last = r.revision;
        keys.insert(keys.end(), r.keys.begin(), r.keys.end());
      }
    }
    writer.join();
    CHECK(ordered);
    REQUIRE(keys.size() == 2 * kGroups);
    for (BlockKey k = 1; k <= kGroups; ++k) {
      CHECK(keys[2 * (k - 1)] == k);
      CHECK(keys[2 * (k - 1) + 1] == k + 100000);
    }
  }

  TEST_CASE("ChangeFeed: a state replaced wholesale cuts watchers and restarts the window") {
    Fixture f;
    ApplyOne(f.machine, Store("a", {1}));
    auto w = f.feed.Subscribe(0, {});
    REQUIRE(w.has_value());
    f.feed.OnReset(40, Index());  // as after a snapshot install at revision 40
    CHECK(Drain(**w).size() == 1);
    CHECK((*w)->Next(1ms).error().code() == StatusCode::kWatchCut);
    CHECK(f.feed.Subscribe(39, {}).error().code() == StatusCode::kCompacted);
    CHECK(f.feed.Subscribe(40, {}).has_value());
  }
}

}  // namespace
}  // namespace kvatlas::server
