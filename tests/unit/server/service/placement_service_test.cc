// Placed contexts (placement_service.h, docs/scaling.md §Placed contexts) on in-memory
// groups: a new context whose home group takes no new contexts is placed elsewhere by two
// commits, a group refuses what it disowned, and a refused write is routed again.
#include "server/service/placement_service.h"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "server/feed/change_feed.h"
#include "server/service/feed_service.h"
#include "server/service/group_service.h"
#include "server/service/ingest_service.h"
#include "server/service/lookup_service.h"
#include "server/service/metrics.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"
#include "tests/support/feed_fixture.h"

namespace kvatlas::server {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kGroups = 3;

// kGroups in-memory groups (a state machine and an applier each, no raft), composed as a
// server of several groups composes them (server.cc): group copies with their group id and
// group 1's state as the cluster's.
struct Groups {
  Groups() {
    auto copies = std::make_shared<std::vector<Services>>();
    for (uint32_t g = 0; g < kGroups; ++g) {
      feeds[g] = std::make_unique<ChangeFeed>();
      machines[g] = std::make_unique<StateMachine>(StateMachineOptions{}, nullptr);
      machines[g]->SetApplyObserver(feeds[g].get());
      REQUIRE(machines[g]->Recover().ok());
      appliers[g] = std::make_unique<Applier>(machines[g].get());
    }
    for (uint32_t g = 0; g < kGroups; ++g) {
      Services part;
      part.machine = machines[g].get();
      part.applier = appliers[g].get();
      part.feed = feeds[g].get();
      part.metrics = &metrics;
      part.group = g + 1;
      part.cluster = machines[0].get();
      copies->push_back(part);
    }
    for (uint32_t g = 0; g < kGroups; ++g) {
      appliers[g]->SetPlacedHere([this, id = g + 1](const ContextKey& c) {
        const ContextPlacement* placed = machines[0]->directory()->Find(c);
        return placed != nullptr && placed->ranges.front().group == id;
      });
    }
    services.machine = machines[0].get();
    services.applier = appliers[0].get();
    services.metrics = &metrics;
    services.groups = copies;
  }
  ~Groups() {
    for (auto& applier : appliers) applier->Stop();
  }

  const Services& group(GroupId id) const { return (*services.groups)[id - 1]; }
  const PlacementDirectory& directory() const {
    held_directory = machines[0]->directory();
    return *held_directory;
  }
  // Applies `command` in group `id`.
  void Commit(GroupId id, Command command) {
    CommandBatch batch;
    batch.commands.push_back(std::move(command));
    REQUIRE(appliers[id - 1]->Submit(std::move(batch)).get().has_value());
  }
  uint64_t Entries(GroupId id) const {
    return machines[id - 1]->Read(
        [](const Index& index, Revision) { return index.Stats().entries; });
  }
  bool Holds(GroupId id, const ContextKey& context) const {
    return machines[id - 1]->Read(
        [&](const Index& index, Revision) { return index.HasContext(context); });
  }

  std::array<std::unique_ptr<ChangeFeed>, kGroups> feeds;  // outlive the machines
  std::array<std::unique_ptr<StateMachine>, kGroups> machines;
  std::array<std::unique_ptr<Applier>, kGroups> appliers;
  Metrics metrics;
  Services services;
  mutable std::shared_ptr<const PlacementDirectory> held_directory;
};

// A context of model `prefix` + N whose home group is `home`.
ContextKey ContextHomedIn(GroupId home, const std::string& prefix) {
  for (int i = 0;; ++i) {
    ContextKey context{"default", prefix + std::to_string(i), "", 16, ""};
    if (HomeGroup(context, kGroups) == home) return context;
  }
}

StoreCommand Store(const ContextKey& context, uint64_t key, const std::string& holder = "e1") {
  StoreCommand store;
  store.context = context;
  store.holder = HolderKey{holder, 0};
  store.hashes = {key};
  return store;
}

CommandBatch BatchOf(std::vector<Command> commands) {
  CommandBatch batch;
  batch.commands = std::move(commands);
  return batch;
}

// The refcount of `holder`'s copy of block `key` in `group`, 0 when it holds none.
uint32_t Refcount(const Groups& g, GroupId group, BlockKey key) {
  return g.machines[group - 1]->Read([&](const Index& index, Revision) {
    uint32_t refcount = 0;
    for (const BlockCopy& copy : index.Locate(key)) refcount += copy.refcount;
    return refcount;
  });
}

}  // namespace

TEST_SUITE("placement_service") {
  TEST_CASE(
      "a new context whose home group takes no new contexts is placed on the accepting "
      "group with the fewest entries") {
    Groups g;
    const ContextKey fresh = ContextHomedIn(2, "fresh");
    const ContextKey other = ContextHomedIn(1, "other");
    // Group 1 holds an entry, so group 3 (none) has the fewest.
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(other, 1)})).has_value());
    g.Commit(1, SetGroupAcceptingCommand{2, false});
    const Epoch before = g.directory().epoch();
    CHECK(PlacementActive(g.services));

    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(fresh, 7)})).has_value());
    const ContextPlacement* placed = g.directory().Find(fresh);
    REQUIRE(placed != nullptr);
    CHECK(placed->ranges.front().group == 3);
    CHECK(g.directory().epoch() > before);
    CHECK(GroupOf(g.services, fresh) == 3);
    CHECK(g.Holds(3, fresh));
    CHECK_FALSE(g.Holds(2, fresh));
    REQUIRE(g.machines[1]->Disowned(fresh).has_value());
    CHECK(g.machines[1]->has_disowned());
    CHECK_FALSE(g.machines[2]->has_disowned());

    // Written again: to group 3, no new placement.
    const Epoch placed_at = g.directory().epoch();
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(fresh, 8)})).has_value());
    CHECK(g.directory().epoch() == placed_at);
    CHECK(g.Entries(3) == 2);
  }

  TEST_CASE(
      "a placed context is written in its group though that group stopped taking new "
      "contexts since") {
    Groups g;
    const ContextKey fresh = ContextHomedIn(2, "fresh");
    g.Commit(1, SetGroupAcceptingCommand{2, false});
    g.Commit(1, SetGroupAcceptingCommand{1, false});
    // Placed (its first write not made yet), then group 3's guard refuses new contexts
    // before its leader records that in the directory: the placed context goes on.
    REQUIRE(EnsurePlaced(g.services, fresh, std::chrono::steady_clock::now() + 10s).ok());
    REQUIRE(GroupOf(g.services, fresh) == 3);
    CHECK(g.Entries(3) == 0);
    g.appliers[2]->SetNewContextsRefused("its snapshot is large");
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(fresh, 8)})).has_value());
    CHECK(g.Entries(3) == 1);
    const ContextKey other = ContextHomedIn(3, "other");
    const Result<Revision> refused = SubmitAndWait(g.services, BatchOf({Store(other, 9)}));
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  }

  TEST_CASE("a part sent to the group that disowned its context is refused whole, wrong_group") {
    Groups g;
    const ContextKey fresh = ContextHomedIn(2, "fresh");
    const ContextKey kept = ContextHomedIn(2, "kept");
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(kept, 1)})).has_value());
    g.Commit(1, SetGroupAcceptingCommand{2, false});
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(fresh, 7)})).has_value());

    // As a server routing with the directory before the placement would send it: to the
    // home group, with a held context's store and a stream position.
    CommandBatch stale = BatchOf({Store(kept, 2), Store(fresh, 8)});
    stale.position = StreamPosition{"writer:w", 5, false};
    std::promise<Result<Revision>> answered;
    SubmitPart(g.group(2), std::move(stale),
               [&answered](Result<Revision> r) { answered.set_value(std::move(r)); });
    const Result<Revision> refused = answered.get_future().get();
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.status().code() == StatusCode::kWrongGroup);
    CHECK(refused.status().message().find(fresh.ToString()) != std::string::npos);
    // Nothing of it applied: not the held context's store, not the position.
    CHECK(g.Entries(2) == 1);
    CHECK_FALSE(g.Holds(2, fresh));
    const bool position = g.machines[1]->ReadRegistry(
        [](const Registry& r, Revision) { return r.positions.contains("writer:w"); });
    CHECK_FALSE(position);
  }

  TEST_CASE("a write refused by a disown whose placement never finished is placed and applied") {
    Groups g;
    const ContextKey fresh = ContextHomedIn(2, "fresh");
    // The home group disowned it (a placement that stopped after its first commit); the
    // directory places it nowhere, and every group still accepts.
    g.Commit(2, DisownContextCommand{fresh, 1});
    REQUIRE(g.directory().Find(fresh) == nullptr);
    CHECK_FALSE(PlacementActive(g.services));

    CommandBatch batch = BatchOf({Store(fresh, 7)});
    batch.position = StreamPosition{"writer:w", 1, false};
    const Result<Revision> applied = SubmitAndWait(g.services, std::move(batch));
    REQUIRE(applied.has_value());
    const ContextPlacement* placed = g.directory().Find(fresh);
    REQUIRE(placed != nullptr);
    CHECK(placed->ranges.front().group != 2);
    CHECK(g.Holds(placed->ranges.front().group, fresh));
    CHECK(Refcount(g, placed->ranges.front().group, 7) == 1);
  }

  TEST_CASE("a watch of a placed LoRA context follows the group it is placed on") {
    Groups g;
    const ContextKey base = ContextHomedIn(2, "model");
    const ContextKey adapter{base.tenant, base.model, "adapter-1", base.block_size, ""};
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(base, 1)})).has_value());
    g.Commit(1, SetGroupAcceptingCommand{2, false});
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(adapter, 2)})).has_value());
    const GroupId placed = GroupOf(g.services, adapter);
    REQUIRE(placed != 2);  // its model's home keeps the model, the adapter went elsewhere

    Result<std::unique_ptr<Watcher>> adapter_watch =
        Subscribe(g.services, std::nullopt, FeedFilter::ForContext(adapter));
    Result<std::unique_ptr<Watcher>> base_watch =
        Subscribe(g.services, std::nullopt, FeedFilter::ForContext(base));
    REQUIRE(adapter_watch.has_value());
    REQUIRE(base_watch.has_value());
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(adapter, 3), Store(base, 4)})).has_value());
    const std::vector<FeedRecord> adapter_records = testing::DrainRecords(**adapter_watch);
    REQUIRE(adapter_records.size() == 1);
    CHECK(adapter_records[0].keys == std::vector<BlockKey>{3});
    const std::vector<FeedRecord> base_records = testing::DrainRecords(**base_watch);
    REQUIRE(base_records.size() == 1);
    CHECK(base_records[0].keys == std::vector<BlockKey>{4});
  }

  TEST_CASE("a held context stays in its home group though it takes no new contexts") {
    Groups g;
    const ContextKey held = ContextHomedIn(2, "held");
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(held, 1)})).has_value());
    g.Commit(1, SetGroupAcceptingCommand{2, false});
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(held, 2)})).has_value());
    CHECK(g.directory().Find(held) == nullptr);
    CHECK_FALSE(g.machines[1]->Disowned(held).has_value());
    CHECK(g.Entries(2) == 2);
  }

  TEST_CASE("with no other group taking new contexts a new context is refused, not disowned") {
    Groups g;
    const ContextKey fresh = ContextHomedIn(2, "fresh");
    for (GroupId id = 1; id <= kGroups; ++id) g.Commit(1, SetGroupAcceptingCommand{id, false});
    const Result<Revision> refused = SubmitAndWait(g.services, BatchOf({Store(fresh, 7)}));
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.status().code() == StatusCode::kResourceExhausted);
    CHECK_FALSE(g.machines[1]->Disowned(fresh).has_value());
    CHECK(g.directory().Find(fresh) == nullptr);
  }

  TEST_CASE("a writer's batch over a placed context and its group's own is applied once") {
    Groups g;
    const ContextKey fresh = ContextHomedIn(2, "fresh");
    const ContextKey native = ContextHomedIn(3, "native");
    g.Commit(1, SetGroupAcceptingCommand{2, false});
    g.Commit(1, SetGroupAcceptingCommand{1, false});
    REQUIRE(SubmitAndWait(g.services, BatchOf({Store(fresh, 7)})).has_value());
    REQUIRE(GroupOf(g.services, fresh) == 3);

    CommandBatch batch = BatchOf({Store(native, 100), Store(fresh, 101)});
    batch.position = StreamPosition{"writer:w", 9, false};
    // Group 3 gets two parts: its own context's under the writer's stream, the placed one's
    // under PlacedStreamKey.
    const auto parts = SplitByGroup(g.services, batch);
    REQUIRE(parts.size() == 2);
    for (const auto& [group, part] : parts) {
      CHECK(group == &g.group(3));
      REQUIRE(part.position.has_value());
      const bool placed_part = std::get<StoreCommand>(part.commands.front()).context == fresh;
      CHECK(part.position->stream ==
            (placed_part ? PlacedStreamKey("writer:w", fresh) : std::string("writer:w")));
      CHECK(part.position->sequence == 9);
    }
    REQUIRE(SubmitAndWait(g.services, batch).has_value());
    REQUIRE(SubmitAndWait(g.services, batch).has_value());  // resent: skipped in both parts
    CHECK(Refcount(g, 3, 100) == 1);
    CHECK(Refcount(g, 3, 101) == 1);
  }

  TEST_CASE("a publisher's restart reaches every group") {
    Groups g;
    CommandBatch batch = BatchOf({Store(ContextHomedIn(2, "m"), 1)});
    batch.position = StreamPosition{"writer:w", 0, true};
    const auto parts = SplitByGroup(g.services, std::move(batch));
    CHECK(parts.size() == kGroups);
    for (const auto& [group, part] : parts) {
      REQUIRE(part.position.has_value());
      CHECK(part.position->restart);
    }
  }

  TEST_CASE("a server answers for a group while its record names it, and lists no other") {
    Groups g;
    const ContextKey in_2 = ContextHomedIn(2, "r");
    g.Commit(2, Store(in_2, 7));
    // No record: every server holds every group (replicas 0).
    for (GroupId id = 1; id <= kGroups; ++id) CHECK(HostsGroup(g.group(id)));
    CHECK(UnhostedGroups(g.services).empty());
    CHECK(ListHolders(g.services).holders.size() == 1);
    // Group 2 recorded on servers 1 and 3: server 1 holds it, server 2 does not.
    g.Commit(1, SetGroupMembersCommand{2, {1, 3}});
    CHECK(RecordedMembers(g.directory(), 2) == std::vector<uint64_t>{1, 3});
    CHECK(RecordedMembers(g.directory(), 3).empty());
    CHECK(HostsGroup(g.group(2)));
    auto on_server_2 = std::make_shared<std::vector<Services>>(*g.services.groups);
    for (Services& part : *on_server_2) part.server_id = 2;
    Services server_2 = g.services;
    server_2.server_id = 2;
    server_2.groups = on_server_2;
    CHECK(HostsGroup((*on_server_2)[0]));  // group 1: every server's
    CHECK_FALSE(HostsGroup((*on_server_2)[1]));
    CHECK(HostsGroup((*on_server_2)[2]));  // no record of group 3
    const Status refused = CheckHostsGroup((*on_server_2)[1]);
    CHECK(refused.code() == StatusCode::kWrongGroup);
    CHECK(refused.message().find("its members are servers 1, 3") != std::string::npos);
    CHECK(UnhostedGroups(server_2) == std::vector<GroupId>{2});
    // Its listings leave group 2 out (the REST adapter asks a member for it), unless asked
    // for group 2 alone.
    CHECK(ListHolders(server_2).holders.empty());
    CHECK(ListContexts(server_2).contexts.empty());
    CHECK(ListHolders(server_2, GroupId{2}).holders.size() == 1);
    CHECK(ListHolders(g.services).holders.size() == 1);
    // With replicas set and no record yet, a server holds a group while raft counts it a
    // voter there; a copy without raft (this fixture) is taken as held.
    (*on_server_2)[2].replicas = 3;
    CHECK(HostsGroup((*on_server_2)[2]));
  }
}

}  // namespace kvatlas::server
