// The StateMachine's placement state: the directory (PlaceContextCommand,
// SetGroupAcceptingCommand), disowned contexts and the batches refused for them
// (DisownContextCommand), placed stream keys; persisted, snapshotted and in the replica
// digest. And PlacedStreamKey / BaseStreamKey themselves.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/state/state_machine.h"
#include "tests/support/state_machine_helpers.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::OpenStorage;

const ContextKey kHere{"default", "m", "", 2, ""};   // held by the group
const ContextKey kAway{"default", "m", "x", 2, ""};  // placed elsewhere
const ContextKey kOther{"acme", "m", "", 2, ""};
const HolderKey kHolder{"a", 0};

Result<Revision> ApplyOne(StateMachine& machine, const CommandBatch& batch) {
  const CommandBatch* one[] = {&batch};
  return machine.Apply(one);
}

CommandBatch One(Command command) {
  CommandBatch batch;
  batch.commands.push_back(std::move(command));
  return batch;
}

// A store of nothing in `context` by holder "a".
StoreCommand StoreOf(const ContextKey& context) {
  StoreCommand store;
  store.context = context;
  store.holder = kHolder;
  return store;
}

// A store of `key` in `context` by holder "a", at `sequence` of stream `stream`.
CommandBatch StoreAt(const ContextKey& context, uint64_t key, const std::string& stream,
                     uint64_t sequence) {
  CommandBatch batch = testing::StoreBatch(context, kHolder, {key});
  batch.position = StreamPosition{stream, sequence, false};
  return batch;
}

uint64_t Entries(const StateMachine& machine) {
  return machine.Read([](const Index& index, Revision) { return index.Stats().entries; });
}

std::map<std::string, uint64_t, std::less<>> Positions(const StateMachine& machine) {
  return machine.ReadRegistry([](const Registry& r, Revision) { return r.positions; });
}

void CheckDigest(const StateMachine& machine) {
  CHECK(machine.ReplicaDigest() == machine.RecomputeReplicaDigest());
}

TEST_SUITE("StateMachine placement") {
  TEST_CASE("PlacedStreamKey is injective and BaseStreamKey gives its stream back") {
    const std::string stream = "a|default|0";
    CHECK(BaseStreamKey(stream) == stream);
    CHECK(BaseStreamKey("") == "");
    CHECK(BaseStreamKey("writer:w") == "writer:w");
    const std::string placed = PlacedStreamKey(stream, kAway);
    CHECK(placed.starts_with(stream + kPlacedStreamSeparator));
    CHECK(BaseStreamKey(placed) == stream);
    // Different streams or contexts give different keys, also where the fields' bytes
    // could run into each other without the encoding's lengths.
    const std::vector<std::pair<std::string, ContextKey>> pairs = {
        {stream, kAway},
        {stream, kHere},
        {stream, kOther},
        {"a|default|1", kAway},
        {stream, ContextKey{"ab", "", "", 0, ""}},
        {stream, ContextKey{"a", "b", "", 0, ""}},
        {stream, ContextKey{"", "", "", 0, "\x1f"}},
        {stream, ContextKey{"", "", "\x1f", 0, ""}},
        {stream, ContextKey{std::string("\0\x1f", 2), "", "", 300, ""}},
    };
    for (size_t i = 0; i < pairs.size(); ++i) {
      CHECK(BaseStreamKey(PlacedStreamKey(pairs[i].first, pairs[i].second)) == pairs[i].first);
      for (size_t j = i + 1; j < pairs.size(); ++j) {
        CAPTURE(i);
        CAPTURE(j);
        CHECK(PlacedStreamKey(pairs[i].first, pairs[i].second) !=
              PlacedStreamKey(pairs[j].first, pairs[j].second));
      }
    }
  }

  TEST_CASE("PlaceContext adds the group, advances the epoch and never moves a placed context") {
    StateMachine machine({}, nullptr);
    REQUIRE(machine.Recover().ok());
    const std::shared_ptr<const PlacementDirectory> empty = machine.directory();
    REQUIRE(empty != nullptr);
    CHECK(empty->epoch() == 0);
    const uint64_t digest_before = machine.ReplicaDigest();

    REQUIRE(ApplyOne(machine, One(PlaceContextCommand{kAway, 3})).has_value());
    std::shared_ptr<const PlacementDirectory> dir = machine.directory();
    CHECK(dir->epoch() == 2);  // the group added, then the context assigned
    REQUIRE(dir->FindGroup(3) != nullptr);
    CHECK(dir->FindGroup(3)->members.empty());
    CHECK(dir->FindGroup(3)->accepting);
    REQUIRE(dir->Find(kAway) != nullptr);
    CHECK(dir->Find(kAway)->GroupOf(0) == 3);
    CHECK(empty->epoch() == 0);  // a copy handed out stays as it was
    CHECK(machine.ReplicaDigest() != digest_before);
    CheckDigest(machine);

    // Placed already: nothing changes, whatever the group (a known one or a new one).
    REQUIRE(ApplyOne(machine, One(PlaceContextCommand{kAway, 3})).has_value());
    REQUIRE(ApplyOne(machine, One(PlaceContextCommand{kAway, 4})).has_value());
    CHECK(machine.directory() == dir);
    CHECK(machine.directory()->FindGroup(4) == nullptr);

    // A group that takes no new contexts refuses them, and keeps its own.
    REQUIRE(ApplyOne(machine, One(SetGroupAcceptingCommand{3, false})).has_value());
    CHECK(machine.directory()->epoch() == 3);
    REQUIRE(ApplyOne(machine, One(PlaceContextCommand{kOther, 3})).has_value());
    CHECK(machine.directory()->epoch() == 3);
    CHECK(machine.directory()->Find(kOther) == nullptr);
    CHECK(machine.directory()->Find(kAway)->GroupOf(0) == 3);
    // A group id out of range adds nothing.
    REQUIRE(ApplyOne(machine, One(PlaceContextCommand{kOther, kMaxGroupId + 1})).has_value());
    CHECK(machine.directory()->epoch() == 3);
    // A known accepting group: one epoch, the assignment.
    REQUIRE(ApplyOne(machine, One(SetGroupAcceptingCommand{5, true})).has_value());
    CHECK(machine.directory()->epoch() == 4);
    REQUIRE(ApplyOne(machine, One(PlaceContextCommand{kOther, 5})).has_value());
    CHECK(machine.directory()->epoch() == 5);
    CHECK(machine.directory()->Find(kOther)->GroupOf(0) == 5);
    CheckDigest(machine);
    // The registry holds what directory() publishes.
    CHECK(machine.ReadRegistry([](const Registry& r, Revision) { return r.directory; }) ==
          *machine.directory());
  }

  TEST_CASE("SetGroupAccepting adds an unknown group and changes nothing when equal") {
    StateMachine machine({}, nullptr);
    REQUIRE(machine.Recover().ok());
    REQUIRE(ApplyOne(machine, One(SetGroupAcceptingCommand{2, false})).has_value());
    std::shared_ptr<const PlacementDirectory> dir = machine.directory();
    CHECK(dir->epoch() == 1);
    REQUIRE(dir->FindGroup(2) != nullptr);
    CHECK_FALSE(dir->FindGroup(2)->accepting);
    CHECK(dir->FindGroup(2)->members.empty());
    REQUIRE(ApplyOne(machine, One(SetGroupAcceptingCommand{2, false})).has_value());
    CHECK(machine.directory() == dir);  // not even republished
    CHECK(machine.directory()->epoch() == 1);
    REQUIRE(ApplyOne(machine, One(SetGroupAcceptingCommand{2, true})).has_value());
    CHECK(machine.directory()->epoch() == 2);
    CHECK(machine.directory()->FindGroup(2)->accepting);
    REQUIRE(ApplyOne(machine, One(SetGroupAcceptingCommand{kNoGroup, true})).has_value());
    CHECK(machine.directory()->epoch() == 2);
    CheckDigest(machine);
  }

  TEST_CASE("SetGroupMembers records a group's members, adding an unknown group") {
    StateMachine machine({}, nullptr);
    REQUIRE(machine.Recover().ok());
    REQUIRE(ApplyOne(machine, One(SetGroupMembersCommand{4, {1, 3, 5}})).has_value());
    std::shared_ptr<const PlacementDirectory> dir = machine.directory();
    CHECK(dir->epoch() == 1);
    REQUIRE(dir->FindGroup(4) != nullptr);
    CHECK(dir->FindGroup(4)->members == std::vector<std::string>{"1", "3", "5"});
    CHECK(dir->FindGroup(4)->accepting);
    // Equal members: not even republished.
    REQUIRE(ApplyOne(machine, One(SetGroupMembersCommand{4, {1, 3, 5}})).has_value());
    CHECK(machine.directory() == dir);
    // A replaced member: one epoch; whether the group takes new contexts is kept.
    REQUIRE(ApplyOne(machine, One(SetGroupAcceptingCommand{4, false})).has_value());
    REQUIRE(ApplyOne(machine, One(SetGroupMembersCommand{4, {1, 3, 6}})).has_value());
    CHECK(machine.directory()->epoch() == 3);
    CHECK(machine.directory()->FindGroup(4)->members == std::vector<std::string>{"1", "3", "6"});
    CHECK_FALSE(machine.directory()->FindGroup(4)->accepting);
    // An id out of range changes nothing.
    REQUIRE(ApplyOne(machine, One(SetGroupMembersCommand{kNoGroup, {1}})).has_value());
    CHECK(machine.directory()->epoch() == 3);
    CheckDigest(machine);
  }

  TEST_CASE("a disowned context's batches are refused whole and record no position") {
    StateMachine machine({}, nullptr);
    REQUIRE(machine.Recover().ok());
    const std::string stream = testing::PublisherRegistration("a").Key();
    testing::ApplyOne(machine, One(RegisterCommand{testing::PublisherRegistration("a")}));
    testing::ApplyOne(machine, StoreAt(kHere, 1, stream, 1));
    CHECK(Entries(machine) == 1);

    // Held here: disowning it is a no-op.
    REQUIRE(ApplyOne(machine, One(DisownContextCommand{kHere, 4})).has_value());
    CHECK_FALSE(machine.Disowned(kHere).has_value());
    const uint64_t digest_before = machine.ReplicaDigest();
    const Revision disowned_at = testing::ApplyOne(machine, One(DisownContextCommand{kAway, 4}));
    CHECK(machine.Disowned(kAway) == std::optional<DisownedContext>({disowned_at, 4}));
    CHECK(machine.ReplicaDigest() != digest_before);
    CheckDigest(machine);
    // Disowned already: the first record stays.
    REQUIRE(ApplyOne(machine, One(DisownContextCommand{kAway, 9})).has_value());
    CHECK(machine.Disowned(kAway) == std::optional<DisownedContext>({disowned_at, 4}));

    // A store of it, with a position past the stream's: refused, no position, no entry.
    const uint64_t digest = machine.ReplicaDigest();
    const Revision before = machine.applied_revision();
    CommandBatch mixed = StoreAt(kHere, 2, stream, 2);
    mixed.commands.emplace_back(StoreOf(kAway));
    REQUIRE(ApplyOne(machine, mixed).has_value());
    CHECK(machine.applied_revision() == before + 1);  // it still takes its revision
    CHECK(machine.counters().wrong_group_batches == 1);
    CHECK(Entries(machine) == 1);
    CHECK(Positions(machine).at(stream) == 1);
    CHECK(machine.ReplicaDigest() == digest);
    // A remove, a clear of the context, a prediction: refused as well.
    CommandBatch remove = StoreAt(kHere, 3, stream, 2);
    remove.commands.emplace_back(RemoveCommand{kAway, kHolder, std::nullopt, {1}});
    CommandBatch clear;
    clear.commands.emplace_back(ClearCommand{kHolder, kAway, std::nullopt});
    CommandBatch predict;
    predict.commands.emplace_back(PredictCommand{kAway, HolderKey{"p", 0}, 60'000, 0, {1}});
    for (const CommandBatch* refused : {&remove, &clear, &predict}) {
      REQUIRE(ApplyOne(machine, *refused).has_value());
    }
    CHECK(machine.counters().wrong_group_batches == 4);
    CHECK(Entries(machine) == 1);
    CHECK(Positions(machine).at(stream) == 1);
    CHECK(machine.ReplicaDigest() == digest);

    // A batch not naming it applies, a clear of the whole holder too.
    REQUIRE(ApplyOne(machine, StoreAt(kHere, 2, stream, 2)).has_value());
    CHECK(Entries(machine) == 2);
    CHECK(Positions(machine).at(stream) == 2);
    REQUIRE(ApplyOne(machine, One(ClearCommand{kHolder, std::nullopt, std::nullopt})).has_value());
    CHECK(Entries(machine) == 0);
    CHECK(machine.counters().wrong_group_batches == 4);
    CheckDigest(machine);
  }

  TEST_CASE("a placed stream key has a position of its own under its stream's registration") {
    StateMachine machine({}, nullptr);
    REQUIRE(machine.Recover().ok());
    const std::string stream = testing::PublisherRegistration("a").Key();
    const std::string placed = PlacedStreamKey(stream, kAway);
    testing::ApplyOne(machine, One(RegisterCommand{testing::PublisherRegistration("a")}));
    testing::ApplyOne(machine, One(RegisterCommand{testing::PublisherRegistration("b")}));
    testing::ApplyOne(machine, StoreAt(kHere, 1, stream, 5));
    // The same sequence under the placed key: not a duplicate of the stream's own position.
    REQUIRE(ApplyOne(machine, StoreAt(kAway, 1, placed, 5)).has_value());
    CHECK(Entries(machine) == 2);
    CHECK(machine.counters().duplicate_batches == 0);
    CHECK(Positions(machine) ==
          std::map<std::string, uint64_t, std::less<>>{{stream, 5}, {placed, 5}});
    // Delivered again: a duplicate by the whole key.
    REQUIRE(ApplyOne(machine, StoreAt(kAway, 2, placed, 5)).has_value());
    CHECK(machine.counters().duplicate_batches == 1);
    CHECK(Entries(machine) == 2);
    // The tally counts it for its stream.
    CHECK(machine.TallyOf(stream).stored_blocks == 2);
    // The orphan check reads the stream's registration: one never registered is refused.
    REQUIRE(
        ApplyOne(machine, StoreAt(kAway, 3, PlacedStreamKey("c|default|0", kAway), 1)).has_value());
    CHECK(machine.counters().orphan_batches == 1);
    // Listener and writer streams need none, placed or not.
    REQUIRE(
        ApplyOne(machine, StoreAt(kAway, 4, PlacedStreamKey("writer:w", kAway), 1)).has_value());
    CHECK(machine.counters().orphan_batches == 1);
    // A restart of a placed part forgets that position only; a restart of the stream, its
    // placed positions here too (the publisher's sequence starts again).
    CommandBatch restart_placed = StoreAt(kAway, 5, placed, 0);
    restart_placed.position->restart = true;
    REQUIRE(ApplyOne(machine, restart_placed).has_value());
    CHECK_FALSE(Positions(machine).contains(placed));
    CHECK(Positions(machine).at(stream) == 5);
    REQUIRE(ApplyOne(machine, StoreAt(kAway, 5, placed, 1)).has_value());
    CommandBatch restart = StoreAt(kHere, 5, stream, 0);
    restart.position->restart = true;
    REQUIRE(ApplyOne(machine, restart).has_value());
    CHECK(Positions(machine) ==
          std::map<std::string, uint64_t, std::less<>>{{PlacedStreamKey("writer:w", kAway), 1}});
    CheckDigest(machine);
    testing::ApplyOne(machine, StoreAt(kHere, 6, stream, 1));
    testing::ApplyOne(machine, StoreAt(kAway, 6, placed, 1));
    CHECK(Positions(machine).size() == 3);
    const std::string b_placed = PlacedStreamKey(testing::PublisherRegistration("b").Key(), kAway);
    testing::ApplyOne(machine, StoreAt(kOther, 1, b_placed, 1));
    CheckDigest(machine);

    // Unregistering a erases its own position and its placed ones, not b's.
    testing::ApplyOne(machine, One(UnregisterCommand{"a", "default", 0}));
    CHECK(Positions(machine) == std::map<std::string, uint64_t, std::less<>>{
                                    {PlacedStreamKey("writer:w", kAway), 1}, {b_placed, 1}});
    CheckDigest(machine);
    // A late batch of the unregistered stream's placed part is an orphan.
    REQUIRE(ApplyOne(machine, StoreAt(kAway, 9, placed, 6)).has_value());
    CHECK(machine.counters().orphan_batches == 2);
  }

  TEST_CASE("the directory, disowned contexts and placed positions persist and snapshot") {
    testing::TempDir dir;
    const std::string path = (dir.path() / "a").string();
    const std::string stream = testing::PublisherRegistration("a").Key();
    const std::string placed = PlacedStreamKey(stream, kAway);
    std::string snapshot;
    PlacementDirectory expected;
    uint64_t digest = 0;
    {
      std::unique_ptr<Storage> storage = OpenStorage(path);
      StateMachine machine({}, storage.get());
      REQUIRE(machine.Recover().ok());
      CommandBatch batch;
      batch.commands.emplace_back(RegisterCommand{testing::PublisherRegistration("a")});
      batch.commands.emplace_back(PlaceContextCommand{kAway, 2});
      batch.commands.emplace_back(SetGroupAcceptingCommand{3, false});
      batch.commands.emplace_back(DisownContextCommand{kOther, 7});
      REQUIRE(ApplyOne(machine, batch).has_value());
      REQUIRE(ApplyOne(machine, StoreAt(kAway, 1, placed, 3)).has_value());
      expected = *machine.directory();
      CHECK(expected.epoch() == 3);
      CheckDigest(machine);
      digest = machine.ReplicaDigest();
      snapshot = testing::SnapshotBytes(machine, 64);
    }
    const auto check = [&](const StateMachine& machine) {
      CHECK(*machine.directory() == expected);
      CHECK(machine.Disowned(kOther) == std::optional<DisownedContext>({1, 7}));
      CHECK_FALSE(machine.Disowned(kAway).has_value());
      CHECK(Positions(machine).at(placed) == 3);
      CHECK(machine.ReplicaDigest() == digest);
      CheckDigest(machine);
    };
    {
      // Reopened: loaded with the registry, and published.
      std::unique_ptr<Storage> storage = OpenStorage(path);
      StateMachine machine({}, storage.get());
      REQUIRE(machine.Recover().ok());
      check(machine);
      // Still refusing, still placing nothing twice.
      REQUIRE(ApplyOne(machine, One(StoreOf(kOther))).has_value());
      CHECK(machine.counters().wrong_group_batches == 1);
      REQUIRE(ApplyOne(machine, One(PlaceContextCommand{kAway, 3})).has_value());
      CHECK(machine.directory()->epoch() == 3);
    }
    std::unique_ptr<Storage> storage = OpenStorage((dir.path() / "b").string());
    StateMachine machine({}, storage.get());
    REQUIRE(machine.Recover().ok());
    CHECK(machine.directory()->epoch() == 0);
    REQUIRE(machine.Restore(snapshot).ok());
    check(machine);
  }

  TEST_CASE("holder-wide ids: the last 64 per holder, persisted, snapshotted, in the digest") {
    testing::TempDir dir;
    const HolderKey other{"b", 1};
    std::string snapshot;
    uint64_t digest = 0;
    std::vector<uint64_t> expected;
    {
      std::unique_ptr<Storage> storage = OpenStorage((dir.path() / "a").string());
      StateMachine machine({}, storage.get());
      REQUIRE(machine.Recover().ok());
      for (uint64_t id = 1; id <= kHolderWideKept + 2; ++id) {
        ClearCommand clear{kHolder, std::nullopt, std::nullopt};
        clear.fanout = id * 1'000;
        REQUIRE(ApplyOne(machine, One(clear)).has_value());
      }
      for (uint64_t id = 3; id <= kHolderWideKept + 2; ++id) expected.push_back(id * 1'000);
      CHECK(machine.HolderWideIds(kHolder) == expected);
      // Applied again (sent twice): recorded once.
      ClearCommand again{kHolder, std::nullopt, std::nullopt};
      again.fanout = 10'000;
      REQUIRE(ApplyOne(machine, One(again)).has_value());
      CHECK(machine.HolderWideIds(kHolder) == expected);
      // Without an id (one group; a clear in one context) nothing is recorded.
      REQUIRE(ApplyOne(machine, One(ClearCommand{other, std::nullopt, std::nullopt})).has_value());
      CHECK(machine.HolderWideIds(other).empty());
      const uint64_t before = machine.ReplicaDigest();
      UnregisterCommand unregister{"b", "default", 1};
      unregister.fanout = 77;
      REQUIRE(ApplyOne(machine, One(unregister)).has_value());
      CHECK(machine.HolderWideIds(other) == std::vector<uint64_t>{77});
      CHECK(machine.ReplicaDigest() != before);
      CheckDigest(machine);
      digest = machine.ReplicaDigest();
      snapshot = testing::SnapshotBytes(machine, 64);
    }
    // Reopened, and restored from the snapshot into an empty data directory.
    for (const bool restored : {false, true}) {
      CAPTURE(restored);
      std::unique_ptr<Storage> storage =
          OpenStorage((dir.path() / (restored ? "b" : "a")).string());
      StateMachine machine({}, storage.get());
      REQUIRE(machine.Recover().ok());
      if (restored) REQUIRE(machine.Restore(snapshot).ok());
      CHECK(machine.HolderWideIds(kHolder) == expected);
      CHECK(machine.HolderWideIds(other) == std::vector<uint64_t>{77});
      CHECK(machine.ReplicaDigest() == digest);
      CheckDigest(machine);
    }
  }
}

}  // namespace
}  // namespace kvatlas::server
