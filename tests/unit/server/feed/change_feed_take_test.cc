// Watcher::TryTake and the notify hook (the binary protocol's non-blocking consumption of a
// watcher): bounded takes of whole revisions, `through` past filtered and empty revisions, one
// notification per transition, and a cut reported after what was queued.
#include <doctest/doctest.h>

#include <atomic>

#include "server/feed/change_feed.h"
#include "tests/support/feed_fixture.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using testing::ApplyOne;

const ContextKey kContext{"default", "m", "", 2, ""};

CommandBatch Store(const std::string& holder, std::vector<BlockKey> keys) {
  return testing::StoreBatch(kContext, HolderKey{holder, 0}, std::move(keys));
}

using Fixture = testing::FeedFixture;

TEST_SUITE("ChangeFeed") {
  TEST_CASE("ChangeFeedTake: takes are bounded, whole revisions, and notify once per arrival") {
    Fixture f;
    auto w = f.feed.Subscribe(std::nullopt, {});
    REQUIRE(w.has_value());
    std::atomic<int> notified{0};
    (*w)->SetNotify([&notified] { notified.fetch_add(1); });
    CHECK(notified.load() == 0);  // nothing queued yet

    Result<Watcher::Take> empty = (*w)->TryTake(100);
    REQUIRE(empty.has_value());
    CHECK(empty->records.empty());
    CHECK_FALSE(empty->more);

    const Revision r1 = ApplyOne(f.machine, Store("a", {1, 2, 3}));
    const Revision r2 = ApplyOne(f.machine, Store("a", {4, 5, 6}));
    const Revision r3 = ApplyOne(f.machine, Store("a", {7}));
    CHECK(notified.load() == 1);  // armed once: one notification for three groups

    // 4 keys: the first group (3 keys) fits, the second would not: one group per take.
    Result<Watcher::Take> first = (*w)->TryTake(4);
    REQUIRE(first.has_value());
    REQUIRE(first->records.size() == 1);
    CHECK(first->records[0].revision == r1);
    CHECK(first->through == r1);
    CHECK(first->more);
    // A take larger than the bound still takes one group.
    Result<Watcher::Take> second = (*w)->TryTake(1);
    REQUIRE(second.has_value());
    CHECK(second->through == r2);
    Result<Watcher::Take> third = (*w)->TryTake(100);
    REQUIRE(third.has_value());
    CHECK(third->through == r3);
    CHECK_FALSE(third->more);
    CHECK((*w)->ResumeFrom() == r3);
    CHECK(notified.load() == 1);

    ApplyOne(f.machine, Store("a", {8}));
    CHECK(notified.load() == 2);  // re-armed by the take that drained the queue
  }

  TEST_CASE("ChangeFeedTake: filtered revisions advance through without records") {
    Fixture f;
    FeedFilter other;
    other.holder_id = "b";
    auto w = f.feed.Subscribe(std::nullopt, other);
    REQUIRE(w.has_value());
    (*w)->SetNotify([] {});
    const Revision r1 = ApplyOne(f.machine, Store("a", {1}));
    Result<Watcher::Take> take = (*w)->TryTake(100);
    REQUIRE(take.has_value());
    CHECK(take->records.empty());
    CHECK(take->through == r1);
  }

  TEST_CASE("ChangeFeedTake: a revision without records notifies and advances through") {
    Fixture f;
    auto w = f.feed.Subscribe(std::nullopt, {});
    REQUIRE(w.has_value());
    std::atomic<int> notified{0};
    (*w)->SetNotify([&notified] { notified.fetch_add(1); });
    RemoveCommand remove;  // of blocks nobody holds: no mutation, no record
    remove.context = kContext;
    remove.holder = HolderKey{"nobody", 0};
    remove.hashes = {42};
    CommandBatch batch;
    batch.commands.emplace_back(std::move(remove));
    const Revision empty = ApplyOne(f.machine, batch);
    CHECK(notified.load() == 1);
    Result<Watcher::Take> take = (*w)->TryTake(10);
    REQUIRE(take.has_value());
    CHECK(take->records.empty());
    CHECK(take->through == empty);
    // A record after it: its revision, not the empty one, ends the next take.
    const Revision stored = ApplyOne(f.machine, Store("a", {1}));
    CHECK(notified.load() == 2);
    CHECK((*w)->TryTake(10)->through == stored);
  }

  TEST_CASE("ChangeFeedTake: a cut is reported after what was queued, and notifies") {
    ChangeFeedOptions options;
    options.watcher_queue_chunks = 2;
    Fixture f(options);
    auto w = f.feed.Subscribe(std::nullopt, {});
    REQUIRE(w.has_value());
    std::atomic<int> notified{0};
    (*w)->SetNotify([&notified] { notified.fetch_add(1); });
    ApplyOne(f.machine, Store("a", {1}));
    const Revision r2 = ApplyOne(f.machine, Store("a", {2}));
    ApplyOne(f.machine, Store("a", {3}));  // the queue is full: cut
    Result<Watcher::Take> queued = (*w)->TryTake(1000);
    REQUIRE(queued.has_value());
    CHECK(queued->records.size() == 2);
    CHECK(queued->more);  // the end is still to be reported
    Result<Watcher::Take> end = (*w)->TryTake(1000);
    REQUIRE_FALSE(end.has_value());
    CHECK(end.error().code() == StatusCode::kWatchCut);
    CHECK((*w)->ResumeFrom() == r2);
  }

  TEST_CASE("ChangeFeedTake: SetNotify on a watcher with a backlog notifies at once") {
    Fixture f;
    const Revision r1 = ApplyOne(f.machine, Store("a", {1}));
    auto w = f.feed.Subscribe(0, {});
    REQUIRE(w.has_value());
    std::atomic<int> notified{0};
    (*w)->SetNotify([&notified] { notified.fetch_add(1); });
    CHECK(notified.load() == 1);
    CHECK((*w)->TryTake(10)->through == r1);
  }
}

}  // namespace
}  // namespace kvatlas::server
