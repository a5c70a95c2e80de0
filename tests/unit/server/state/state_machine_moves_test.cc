// A move's commands in one group (docs/scaling.md §Moves): a fenced context refuses its
// writes and keeps holder-wide commands (clears in every context, unregistrations, lease
// expiries) off its copies; an imported one keeps them off too while its copies come from
// the other group; a drop deletes its copies and ends the import; all of it kept in
// storage, restored by a restart and a raft snapshot, and in the replica digest.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/state/state_machine.h"
#include "tests/support/state_machine_helpers.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::ApplyOne;
using testing::StoreBatch;

const ContextKey kMoved{"acme", "llama", "", 16, ""};
const ContextKey kStays{"acme", "llama", "lora-1", 16, ""};
const ContextKey kAlso{"acme", "mistral", "", 16, ""};
const HolderKey kEngine{"e1", 0};
const HolderKey kOther{"e2", 0};

Revision Apply(StateMachine& machine, Command command, uint64_t fanout = 0) {
  if (auto* clear = std::get_if<ClearCommand>(&command)) clear->fanout = fanout;
  if (auto* unregister = std::get_if<UnregisterCommand>(&command)) unregister->fanout = fanout;
  CommandBatch batch;
  batch.commands.push_back(std::move(command));
  return ApplyOne(machine, batch);
}

// The copies of `holder` in `context`.
size_t CopiesOf(const StateMachine& machine, const ContextKey& context, const HolderKey& holder) {
  size_t n = 0;
  machine.Read([&](const Index& index, Revision) {
    index.ForEachCopy(context,
                      [&](BlockKey, const BlockCopy& copy) { n += copy.holder == holder; });
  });
  return n;
}

// kMoved and kStays, each with three blocks of kEngine and one of kOther.
void Fill(StateMachine& machine) {
  for (const ContextKey& context : {kMoved, kStays}) {
    ApplyOne(machine, StoreBatch(context, kEngine, {1, 2, 3}));
    ApplyOne(machine, StoreBatch(context, kOther, {1}, Tier::kCpu));
  }
}

void CheckDigest(const StateMachine& machine) {
  CHECK(machine.ReplicaDigest() == machine.RecomputeReplicaDigest());
}

TEST_CASE("a fenced context refuses its writes and keeps holder-wide commands off its copies") {
  StateMachine machine({}, nullptr);
  REQUIRE(machine.Recover().ok());
  Fill(machine);
  Registration registration = testing::PublisherRegistration(kEngine.id);
  Apply(machine, RegisterCommand{registration});
  const Revision fenced = Apply(machine, FenceContextCommand{kMoved, 7});
  REQUIRE(machine.Disowned(kMoved).has_value());
  CHECK(machine.Disowned(kMoved)->revision == fenced);
  CHECK(machine.Disowned(kMoved)->epoch == 7u);
  // Fenced again: the first fence stands.
  Apply(machine, FenceContextCommand{kMoved, 9});
  CHECK(machine.Disowned(kMoved)->revision == fenced);
  // Writes naming it are refused whole.
  const uint64_t refused = machine.counters().wrong_group_batches;
  Apply(machine, StoreCommand{kMoved,
                              kEngine,
                              Tier::kGpu,
                              KeyMode::kSequence,
                              std::nullopt,
                              std::nullopt,
                              {4},
                              {},
                              {},
                              false});
  CHECK(machine.counters().wrong_group_batches == refused + 1);
  CHECK(CopiesOf(machine, kMoved, kEngine) == 3);
  // A holder's clear in every context (in one tier, then all), its unregistration and its
  // lease expiry reach the other contexts only.
  Apply(machine, ClearCommand{kOther, std::nullopt, Tier::kCpu}, 11);
  CHECK(CopiesOf(machine, kStays, kOther) == 0);
  CHECK(CopiesOf(machine, kMoved, kOther) == 1);
  CHECK(machine.HolderWideIds(kOther) == std::vector<uint64_t>{11});
  Apply(machine, UnregisterCommand{registration.instance_id, registration.tenant_id, 0}, 12);
  CHECK(CopiesOf(machine, kStays, kEngine) == 0);
  CHECK(CopiesOf(machine, kMoved, kEngine) == 3);
  CHECK(machine.HolderWideIds(kEngine) == std::vector<uint64_t>{12});
  ApplyOne(machine, StoreBatch(kStays, kOther, {5}));
  Apply(machine, ExpireHolderCommand{kOther, machine.applied_revision()});
  CHECK(machine.counters().holders_expired == 1);
  CHECK(CopiesOf(machine, kStays, kOther) == 0);
  CHECK(CopiesOf(machine, kMoved, kOther) == 1);
  CheckDigest(machine);
  // The drop (the move's last step here) deletes its copies; its writes stay refused.
  Apply(machine, DropContextCommand{kMoved});
  CHECK(CopiesOf(machine, kMoved, kEngine) == 0);
  CHECK(CopiesOf(machine, kMoved, kOther) == 0);
  CHECK(machine.Disowned(kMoved).has_value());
  CheckDigest(machine);
}

TEST_CASE("an imported context keeps holder-wide commands off it until its drop") {
  StateMachine machine({}, nullptr);
  REQUIRE(machine.Recover().ok());
  ApplyOne(machine, StoreBatch(kStays, kEngine, {1, 2}));
  const uint64_t before = machine.ReplicaDigest();
  const Revision started = Apply(machine, ImportContextCommand{kMoved});
  CHECK(machine.ReplicaDigest() != before);
  CHECK(machine.ReadRegistry([](const Registry& r, Revision) { return r.importing; }) ==
        std::map<ContextKey, Revision, ContextKeyLess>{{kMoved, started}});
  Apply(machine, ImportContextCommand{kMoved});  // again: nothing changes
  CHECK(machine.ReadRegistry([](const Registry& r, Revision) { return r.importing; }).at(kMoved) ==
        started);
  // The copies come (the copy step's stores, a round's replacement) and stay through a
  // holder-wide clear, which reaches the other contexts.
  ApplyOne(machine, StoreBatch(kMoved, kEngine, {1, 2, 3}));
  Apply(machine, ReplaceCopiesCommand{kMoved, {{9, 0, {{kOther, Tier::kDisk, 2, 9, ""}}, false}}});
  Apply(machine, ClearCommand{kEngine, std::nullopt, std::nullopt}, 21);
  Apply(machine, ClearCommand{kOther, std::nullopt, std::nullopt}, 22);
  CHECK(CopiesOf(machine, kStays, kEngine) == 0);
  CHECK(CopiesOf(machine, kMoved, kEngine) == 3);
  CHECK(CopiesOf(machine, kMoved, kOther) == 1);
  CheckDigest(machine);
  // A drop (an abandoned move) deletes them and ends the import: clears reach it again.
  Apply(machine, DropContextCommand{kMoved});
  CHECK(CopiesOf(machine, kMoved, kEngine) == 0);
  CHECK(machine.ReadRegistry([](const Registry& r, Revision) { return r.importing.empty(); }));
  CheckDigest(machine);
  ApplyOne(machine, StoreBatch(kMoved, kEngine, {1}));
  Apply(machine, ClearCommand{kEngine, std::nullopt, std::nullopt}, 23);
  CHECK(CopiesOf(machine, kMoved, kEngine) == 0);
  // A context the group disowned is not imported.
  Apply(machine, DisownContextCommand{kAlso, 3});
  Apply(machine, ImportContextCommand{kAlso});
  CHECK(machine.ReadRegistry([](const Registry& r, Revision) { return r.importing.empty(); }));
}

TEST_CASE("fences and imports are kept in storage and in a raft snapshot") {
  testing::TempDir dir;
  Registry registry;
  uint64_t digest = 0;
  {
    std::unique_ptr<Storage> storage = testing::OpenStorage((dir.path() / "a").string());
    StateMachine machine({}, storage.get());
    REQUIRE(machine.Recover().ok());
    Fill(machine);
    Apply(machine, FenceContextCommand{kMoved, 4});
    Apply(machine, ImportContextCommand{kAlso});
    registry = machine.ReadRegistry([](const Registry& r, Revision) { return r; });
    digest = machine.ReplicaDigest();
  }
  std::unique_ptr<Storage> storage = testing::OpenStorage((dir.path() / "a").string());
  StateMachine restarted({}, storage.get());
  REQUIRE(restarted.Recover().ok());
  CHECK(restarted.ReadRegistry([](const Registry& r, Revision) { return r; }) == registry);
  CHECK(restarted.ReplicaDigest() == digest);
  CheckDigest(restarted);
  // A replica restored from its raft snapshot has them too.
  std::unique_ptr<Storage> other = testing::OpenStorage((dir.path() / "b").string());
  StateMachine restored({}, other.get());
  REQUIRE(restored.Recover().ok());
  REQUIRE(restored.Restore(testing::SnapshotBytes(restarted, 64)).ok());
  CHECK(restored.ReadRegistry([](const Registry& r, Revision) { return r; }) == registry);
  CHECK(restored.ReplicaDigest() == digest);
  // Still kept apart after the restart.
  Apply(restarted, ClearCommand{kEngine, std::nullopt, std::nullopt}, 31);
  CHECK(CopiesOf(restarted, kMoved, kEngine) == 3);
  CHECK(CopiesOf(restarted, kStays, kEngine) == 0);
}

}  // namespace
}  // namespace kvatlas::server
