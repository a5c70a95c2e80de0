// Holder leases (docs/leases.md): applying ExpireHolderCommand (every entry of the holder
// goes, reported to the change feed as holder-expired; the race guard and the publisher
// exemption skip it), and the LeaseTracker's decisions (TTL, heartbeats, leadership).
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/feed/change_feed.h"
#include "server/state/lease_tracker.h"
#include "server/state/state_machine.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using testing::ApplyOne;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const ContextKey kContext{"default", "m", "", 2, ""};
const ContextKey kOtherContext{"default", "other", "", 2, ""};
const HolderKey kA{"a", 0};
const HolderKey kB{"b", 0};

CommandBatch Store(const HolderKey& holder, std::vector<uint64_t> keys, Tier tier = Tier::kGpu,
                   const ContextKey& context = kContext) {
  return testing::StoreBatch(context, holder, std::move(keys), tier);
}

CommandBatch Expire(const HolderKey& holder, Revision last_activity_revision) {
  CommandBatch batch;
  batch.commands.emplace_back(ExpireHolderCommand{holder, last_activity_revision});
  return batch;
}

uint64_t EntriesOf(const StateMachine& machine, const HolderKey& holder) {
  return machine.Read([&](const Index& index, Revision) {
    for (const HolderInfo& h : index.Holders()) {
      if (h.holder == holder) return h.entries;
    }
    return uint64_t{0};
  });
}

TEST_SUITE("Leases") {
  TEST_CASE("Expire: drops every entry of the holder, in every tier and context") {
    ChangeFeed feed;
    StateMachine machine({}, nullptr);
    machine.SetApplyObserver(&feed);
    REQUIRE(machine.Recover().ok());
    Result<std::unique_ptr<Watcher>> watcher = feed.Subscribe(0, FeedFilter{});
    REQUIRE(watcher.has_value());
    ApplyOne(machine, Store(kA, {1, 2, 3}));
    ApplyOne(machine, Store(kA, {1, 2}, Tier::kCpu));
    ApplyOne(machine, Store(kA, {7}, Tier::kShared, kOtherContext));
    ApplyOne(machine, Store(kA, {1}));  // a second reference: expiry ignores refcounts
    const Revision last = ApplyOne(machine, Store(kB, {1, 2}));
    REQUIRE(EntriesOf(machine, kA) == 6);

    const Revision expired = ApplyOne(machine, Expire(kA, last));
    CHECK(EntriesOf(machine, kA) == 0);
    CHECK(EntriesOf(machine, kB) == 2);
    CHECK(machine.counters().holders_expired == 1);
    CHECK(machine.counters().expiries_skipped == 0);
    // Blocks only A held are gone; those B holds stay.
    CHECK(machine.Read([](const Index& index, Revision) { return index.Stats().blocks; }) == 2);

    Result<std::vector<FeedRecord>> records = (*watcher)->Next(1s);
    REQUIRE(records.has_value());
    std::multiset<std::pair<Tier, BlockKey>> dropped;
    for (const FeedRecord& r : *records) {
      if (r.revision != expired) continue;
      CHECK(r.op == FeedOp::kExpired);
      CHECK(r.holder == kA);
      CHECK(FeedOpName(r.op) == "holder-expired");
      for (BlockKey key : r.keys) dropped.emplace(r.tier, key);
    }
    CHECK(dropped == std::multiset<std::pair<Tier, BlockKey>>{{Tier::kGpu, 1},
                                                              {Tier::kGpu, 2},
                                                              {Tier::kGpu, 3},
                                                              {Tier::kCpu, 1},
                                                              {Tier::kCpu, 2},
                                                              {Tier::kShared, 7}});
    // An expiry of a holder with nothing left (a second proposal) changes nothing.
    ApplyOne(machine, Expire(kA, expired));
    CHECK(machine.counters().holders_expired == 1);
  }

  TEST_CASE("Expire: the race guard skips it when the holder came back after the revision") {
    StateMachine machine({}, nullptr);
    const Revision seen = ApplyOne(machine, Store(kA, {1}));
    ApplyOne(machine, Store(kB, {9}));  // another holder's event does not count
    // The leader decided at `seen`; an event of A lands before the expiry.
    ApplyOne(machine, Store(kA, {2}));
    ApplyOne(machine, Expire(kA, seen));
    CHECK(EntriesOf(machine, kA) == 2);
    CHECK(machine.counters().expiries_skipped == 1);
    CHECK(machine.counters().holders_expired == 0);

    SUBCASE("an event in the same batch before the expiry counts") {
      const Revision now = machine.applied_revision();
      CommandBatch batch = Store(kA, {3});
      batch.commands.emplace_back(ExpireHolderCommand{kA, now});
      ApplyOne(machine, batch);
      CHECK(EntriesOf(machine, kA) == 3);
      CHECK(machine.counters().expiries_skipped == 2);
    }
    SUBCASE("a remove or a clear is activity too") {
      const Revision now = machine.applied_revision();
      CommandBatch batch;
      batch.commands.emplace_back(RemoveCommand{kContext, kA, std::nullopt, {1}});
      ApplyOne(machine, batch);
      ApplyOne(machine, Expire(kA, now));
      CHECK(EntriesOf(machine, kA) == 1);
      CHECK(machine.counters().expiries_skipped == 2);
    }
    SUBCASE("an event after the expiry in the same batch is kept") {
      CommandBatch batch = Expire(kA, machine.applied_revision());
      batch.commands.emplace_back(Store(kA, {5}).commands.front());
      ApplyOne(machine, batch);
      CHECK(EntriesOf(machine, kA) == 1);
      CHECK(machine.counters().holders_expired == 1);
    }
  }

  TEST_CASE("Expire: a batch of expiries applies each one's guard, the due ones together") {
    StateMachine machine({}, nullptr);
    const HolderKey c{"c", 0};
    ApplyOne(machine, Store(kA, {1, 2}));
    ApplyOne(machine, Store(c, {2}, Tier::kCpu));  // block 2 chained: A's copy and C's
    const Revision seen = ApplyOne(machine, Store(kB, {7}));
    ApplyOne(machine, Store(kB, {8}));  // B came back after `seen`
    CommandBatch batch;
    batch.commands.emplace_back(ExpireHolderCommand{kA, seen});
    batch.commands.emplace_back(ExpireHolderCommand{kB, seen});
    batch.commands.emplace_back(ExpireHolderCommand{c, seen});
    batch.commands.emplace_back(ExpireHolderCommand{{"never-seen", 0}, seen});
    batch.commands.emplace_back(Store(kA, {3}).commands.front());  // after the run: kept
    ApplyOne(machine, batch);
    CHECK(EntriesOf(machine, kA) == 1);
    CHECK(EntriesOf(machine, kB) == 2);
    CHECK(EntriesOf(machine, c) == 0);
    CHECK(machine.counters().holders_expired == 2);   // A and C
    CHECK(machine.counters().expiries_skipped == 1);  // B
  }

  TEST_CASE("Expire: holders of registered publishers are exempt") {
    StateMachine machine({}, nullptr);
    CommandBatch reg;
    reg.commands.emplace_back(RegisterCommand{testing::PublisherRegistration("p")});
    ApplyOne(machine, reg);
    CommandBatch stored = Store(HolderKey{"p", 0}, {1, 2});
    stored.position = StreamPosition{testing::PublisherRegistration("p").Key(), 0, false};
    ApplyOne(machine, stored);
    ApplyOne(machine, Expire(HolderKey{"p", 0}, machine.applied_revision()));
    CHECK(EntriesOf(machine, HolderKey{"p", 0}) == 2);
    CHECK(machine.counters().expiries_skipped == 1);
    // Another dp rank of the same instance is not the registered publisher.
    ApplyOne(machine, Store(HolderKey{"p", 1}, {1}));
    ApplyOne(machine, Expire(HolderKey{"p", 1}, machine.applied_revision()));
    CHECK(EntriesOf(machine, HolderKey{"p", 1}) == 0);
  }

  TEST_CASE("Expire: replicas applying the same log decide alike") {
    StateMachine one({}, nullptr), two({}, nullptr);
    std::vector<CommandBatch> log = {Store(kA, {1, 2}), Store(kB, {1}), Expire(kA, 1),
                                     Store(kA, {4}),    Expire(kB, 2),  Expire(kA, 3)};
    for (const CommandBatch& batch : log) {
      ApplyOne(one, batch);
      ApplyOne(two, batch);
    }
    const auto digest = [](const StateMachine& m) {
      return m.Read([](const Index& index, Revision) { return index.StateDigest(); });
    };
    CHECK(digest(one) == digest(two));
    CHECK(EntriesOf(one, kA) == 1);  // Expire(kA, 3) came after A's event at revision 4
    CHECK(EntriesOf(one, kB) == 0);
    CHECK(one.counters().holders_expired == two.counters().holders_expired);
  }

  // A fake raft: the term this server leads in, or nullopt.
  struct FakeLeadership {
    std::optional<uint64_t> term = 1;
    LeaseTracker::LeaderTerm Fn() {
      return [this] { return term; };
    }
  };

  LeaseOptions Ttl(std::chrono::milliseconds ttl) {
    LeaseOptions options;
    options.ttl = ttl;
    return options;
  }

  std::set<std::string> Names(const std::vector<ExpireHolderCommand>& due) {
    std::set<std::string> out;
    for (const ExpireHolderCommand& c : due) out.insert(c.holder.id);
    return out;
  }

  TEST_CASE("LeaseTracker: off by default, and then does nothing") {
    StateMachine machine({}, nullptr);
    ApplyOne(machine, Store(kA, {1}));
    FakeLeadership raft;
    LeaseTracker tracker(LeaseOptions{}, &machine, raft.Fn());
    CHECK_FALSE(tracker.enabled());
    CHECK(tracker.DueExpiries(Clock::now() + 100h).empty());
    CHECK(tracker.Heartbeat(std::vector<HolderKey>{kA}).ok());
    CHECK_FALSE(tracker.IdleSeconds(std::vector<HolderKey>{kA}, Clock::now()).has_value());
  }

  TEST_CASE("LeaseTracker: check interval is a quarter of the TTL, at least 100 ms") {
    StateMachine machine({}, nullptr);
    FakeLeadership raft;
    CHECK(LeaseTracker(Ttl(1s), &machine, raft.Fn()).check_interval() == 250ms);
    CHECK(LeaseTracker(Ttl(200ms), &machine, raft.Fn()).check_interval() == 100ms);
  }

  TEST_CASE("LeaseTracker: silent holders are due after a full TTL from the start of leadership") {
    StateMachine machine({}, nullptr);
    ApplyOne(machine, Store(kA, {1}));
    const Revision b_revision = ApplyOne(machine, Store(kB, {2}));
    const Revision a_revision = ApplyOne(machine, Store(kA, {3}));
    FakeLeadership raft;
    LeaseTracker tracker(Ttl(10s), &machine, raft.Fn());
    // The events were applied "now"; this server starts leading an hour later.
    const Clock::time_point lead = Clock::now() + 1h;
    CHECK(tracker.DueExpiries(lead).empty());
    CHECK(tracker.DueExpiries(lead + 9s).empty());
    // B heartbeats; A does not.
    REQUIRE(tracker.Heartbeat(std::vector<HolderKey>{kB}, lead + 5s).ok());
    std::vector<ExpireHolderCommand> due = tracker.DueExpiries(lead + 10s);
    REQUIRE(due.size() == 1);
    CHECK(due[0].holder == kA);
    // The revision of A's last event: the race guard skips the expiry if A sends another.
    CHECK(due[0].last_activity_revision == a_revision);
    const std::optional<std::vector<double>> idle =
        tracker.IdleSeconds(std::vector<HolderKey>{kA, kB}, lead + 10s);
    REQUIRE(idle.has_value());
    CHECK((*idle)[0] == doctest::Approx(10.0));
    CHECK((*idle)[1] == doctest::Approx(5.0));
    // B's heartbeat runs out too.
    due = tracker.DueExpiries(lead + 15s);
    CHECK(Names(due) == std::set<std::string>{"a", "b"});
    for (const ExpireHolderCommand& c : due) {
      if (c.holder == kB) CHECK(c.last_activity_revision == b_revision);
    }

    SUBCASE("proposed and applied: gone, and not due again") {
      CommandBatch batch;
      for (ExpireHolderCommand& c : due) batch.commands.emplace_back(std::move(c));
      ApplyOne(machine, batch);
      CHECK(EntriesOf(machine, kA) == 0);
      CHECK(machine.counters().holders_expired == 2);
      CHECK(tracker.DueExpiries(lead + 20s).empty());
    }
  }

  TEST_CASE("LeaseTracker: an applied event renews the lease") {
    StateMachine machine({}, nullptr);
    ApplyOne(machine, Store(kA, {1}));
    FakeLeadership raft;
    LeaseTracker tracker(Ttl(10s), &machine, raft.Fn());
    // Leading since long before the events below.
    const Clock::time_point lead = Clock::now() - 1h;
    CHECK(tracker.DueExpiries(lead).empty());
    CHECK(tracker.DueExpiries(Clock::now()).empty());  // its event is recent
    const Clock::time_point before = Clock::now();
    const Revision revision = ApplyOne(machine, Store(kA, {2}));
    const Clock::time_point after = Clock::now();
    CHECK(tracker.DueExpiries(before + 9s).empty());
    const std::vector<ExpireHolderCommand> due = tracker.DueExpiries(after + 10s);
    REQUIRE(due.size() == 1);
    CHECK(due[0].last_activity_revision == revision);
  }

  TEST_CASE("LeaseTracker: a new term forgets heartbeats and grants a full TTL again") {
    StateMachine machine({}, nullptr);
    ApplyOne(machine, Store(kA, {1}));
    FakeLeadership raft;
    LeaseTracker tracker(Ttl(10s), &machine, raft.Fn());
    const Clock::time_point t = Clock::now() + 1h;
    CHECK(tracker.DueExpiries(t).empty());
    REQUIRE(tracker.Heartbeat(std::vector<HolderKey>{kA}, t + 8s).ok());
    // Leadership lost: nothing is proposed, heartbeats are refused (REST forwards them).
    raft.term.reset();
    CHECK(tracker.DueExpiries(t + 30s).empty());
    CHECK(tracker.Heartbeat(std::vector<HolderKey>{kA}, t + 30s).code() == StatusCode::kNotLeader);
    CHECK_FALSE(tracker.IdleSeconds(std::vector<HolderKey>{kA}, t + 30s).has_value());
    // Leading again in a later term: a full TTL from then, whatever happened before.
    raft.term = 3;
    CHECK(tracker.DueExpiries(t + 40s).empty());
    CHECK(tracker.DueExpiries(t + 49s).empty());
    CHECK(Names(tracker.DueExpiries(t + 50s)) == std::set<std::string>{"a"});
    // A term change between two checks counts even if both see this server leading.
    raft.term = 4;
    CHECK(tracker.DueExpiries(t + 51s).empty());
  }

  TEST_CASE("LeaseTracker: publishers' holders and holders without entries are never due") {
    StateMachine machine({}, nullptr);
    CommandBatch reg;
    reg.commands.emplace_back(RegisterCommand{testing::PublisherRegistration("p")});
    ApplyOne(machine, reg);
    CommandBatch stored = Store(HolderKey{"p", 0}, {1});
    stored.position = StreamPosition{testing::PublisherRegistration("p").Key(), 0, false};
    ApplyOne(machine, stored);
    ApplyOne(machine, Store(kA, {1}));
    CommandBatch clear;
    clear.commands.emplace_back(ClearCommand{kA, std::nullopt, std::nullopt});
    ApplyOne(machine, clear);
    ApplyOne(machine, Store(kB, {1}));
    FakeLeadership raft;
    LeaseTracker tracker(Ttl(1s), &machine, raft.Fn());
    const Clock::time_point t = Clock::now() + 1h;
    CHECK(tracker.DueExpiries(t).empty());
    CHECK(Names(tracker.DueExpiries(t + 2s)) == std::set<std::string>{"b"});
  }

  TEST_CASE("LeaseTracker: one check proposes at most max_expiries_per_check, oldest first") {
    StateMachine machine({}, nullptr);
    for (int i = 0; i < 5; ++i)
      ApplyOne(machine, Store(HolderKey{"h" + std::to_string(i), 0}, {1}));
    FakeLeadership raft;
    LeaseOptions options = Ttl(10s);
    options.max_expiries_per_check = 2;
    LeaseTracker tracker(options, &machine, raft.Fn());
    const Clock::time_point t = Clock::now() + 1h;
    CHECK(tracker.DueExpiries(t).empty());
    // h0..h2 heartbeat late, h3 and h4 never: the two silent longest are proposed first.
    for (int i = 0; i < 3; ++i) {
      REQUIRE(tracker.Heartbeat(std::vector<HolderKey>{{"h" + std::to_string(i), 0}}, t + 1s).ok());
    }
    const std::vector<ExpireHolderCommand> due = tracker.DueExpiries(t + 11s);
    CHECK(Names(due) == std::set<std::string>{"h3", "h4"});
  }

  TEST_CASE("LeaseTracker: heartbeats of too many distinct holders are refused") {
    StateMachine machine({}, nullptr);
    FakeLeadership raft;
    LeaseOptions options = Ttl(10s);
    options.max_heartbeat_holders = 2;
    LeaseTracker tracker(options, &machine, raft.Fn());
    const Clock::time_point t = Clock::now();
    REQUIRE(tracker.Heartbeat(std::vector<HolderKey>{kA, kB}, t).ok());
    CHECK(tracker.Heartbeat(std::vector<HolderKey>{kA, kB}, t + 1s).ok());  // known ones
    CHECK(tracker.Heartbeat(std::vector<HolderKey>{{"c", 0}}, t + 2s).code() ==
          StatusCode::kResourceExhausted);
    // Once the old heartbeats are past the TTL they make room.
    CHECK(tracker.Heartbeat(std::vector<HolderKey>{{"c", 0}}, t + 12s).ok());
  }
}

}  // namespace
}  // namespace kvatlas::server
