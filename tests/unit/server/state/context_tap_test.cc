// A move's catch-up (docs/scaling.md §Moves): the blocks a ContextTap names after a copy,
// read with their copies (MovedBlocks) and replaced in the other group
// (ReplaceCopiesCommand), make the same context there — the same copies of the same blocks
// in the same order (so the same eviction order), refcounts, engine-hash aliases and
// locations — over random changes, round after round; a round resent is skipped.
#include "server/state/context_tap.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "server/model/context_copy.h"
#include "server/state/state_machine.h"
#include "tests/support/context_fill.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using testing::ApplyOne;
using testing::Listed;

const ContextKey kMoved{"acme", "llama", "", 16, ""};
const ContextKey kStays{"acme", "llama", "lora-1", 16, ""};

std::unique_ptr<ContextTap> TapOf(StateMachine& machine, const ContextKey& context) {
  auto tap = machine.Read(
      [&](const Index& index, Revision) { return std::make_unique<ContextTap>(context, index); });
  machine.SetApplyObserver(tap.get());
  return tap;
}

// Copies `context` from `from` into `to` as a move's copy step does (ContextCopier).
// Returns the last sequence of the move's writer position.
uint64_t Copy(const StateMachine& from, StateMachine& to, const ContextKey& context) {
  ContextCopier copier(context, "move-1", 64, [&](CommandBatch batch) {
    ApplyOne(to, batch);
    return Status::Ok();
  });
  for (const Listed& listed : testing::ListCopies(from, context)) {
    REQUIRE(copier.Add(listed.key, listed.copy).ok());
  }
  REQUIRE(copier.Finish().ok());
  return copier.batches();
}

// One catch-up round: what the tap names, read from `from` and replaced in `to` in
// commands of at most `per_command` blocks, each batch at the next sequence of the move's
// writer position after `*sequence`. Returns the batches applied.
std::vector<CommandBatch> Round(ContextTap& tap, const StateMachine& from, StateMachine& to,
                                size_t per_command, uint64_t* sequence) {
  std::vector<TappedBlock> tapped;
  REQUIRE(tap.Take(&tapped));
  const std::vector<MovedBlock> moved =
      from.Read([&](const Index& index, Revision) { return MovedBlocks(index, kMoved, tapped); });
  std::vector<CommandBatch> batches;
  for (size_t at = 0; at < moved.size(); at += per_command) {
    ReplaceCopiesCommand replace{kMoved, {}};
    for (size_t i = at; i < std::min(moved.size(), at + per_command); ++i) {
      replace.blocks.push_back(moved[i]);
    }
    CommandBatch batch;
    batch.commands.emplace_back(std::move(replace));
    batch.position = StreamPosition{"writer:move-1", ++*sequence, false};
    ApplyOne(to, batch);
    batches.push_back(std::move(batch));
  }
  return batches;
}

void Apply(StateMachine& machine, Command command) {
  CommandBatch batch;
  batch.commands.push_back(std::move(command));
  ApplyOne(machine, batch);
}

// A store of one copy of the listed block `at`: another reference, or with `engine_hash`
// and `location` set.
StoreCommand StoreAgain(const Listed& at, uint64_t engine_hash, std::string location) {
  StoreCommand store;
  store.context = kMoved;
  store.holder = at.copy.holder;
  store.tier = at.copy.tier;
  store.base_depth = at.copy.depth;
  store.hashes = {at.key};
  store.engine_hashes = {engine_hash};
  if (!location.empty()) store.locations = {std::move(location)};
  return store;
}

// Random changes to kMoved of `machine` after a copy: references added and removed (to
// none), holders cleared in the context, copies re-announced under new engine hashes or
// moved to new locations, blocks removed whole and made again, new chains.
void Churn(StateMachine& machine, uint32_t seed) {
  std::mt19937_64 rng(seed);
  for (int n = 0; n < 40; ++n) {
    const std::vector<Listed> listed = testing::ListCopies(machine, kMoved);
    if (listed.empty()) {  // all gone: new chains
      testing::FillContext(machine, kMoved, static_cast<uint32_t>(rng()), 4);
      continue;
    }
    const Listed& at = listed[rng() % listed.size()];
    const uint64_t own = at.copy.engine_hash;
    switch (rng() % 7) {
      case 0:
        Apply(machine, RemoveCommand{kMoved, at.copy.holder, at.copy.tier, {own}});
        break;
      case 1:
        Apply(machine, StoreAgain(at, own, ""));
        break;
      case 2:
        Apply(machine, StoreAgain(at, own, "nvme://n/" + std::to_string(rng() % 100)));
        break;
      case 3:
        Apply(machine, ClearCommand{at.copy.holder, kMoved, std::nullopt});
        break;
      case 4:
        Apply(machine, StoreAgain(at, own ^ 0x7777, ""));  // re-announced under a new hash
        break;
      case 5: {  // the block goes (every copy), then comes back in another holder
        for (const Listed& copy : listed) {
          if (copy.key != at.key) continue;
          for (uint32_t i = 0; i < copy.copy.refcount; ++i) {
            Apply(machine,
                  RemoveCommand{kMoved, copy.copy.holder, copy.copy.tier, {copy.copy.engine_hash}});
          }
        }
        Listed again = at;
        again.copy.holder = testing::kFillHolders[rng() % 3];
        Apply(machine, StoreAgain(again, at.key, ""));
        break;
      }
      default:
        testing::FillContext(machine, kMoved, static_cast<uint32_t>(rng()), 2);
    }
  }
}

TEST_CASE("a copy, then rounds of replaced copies, make the same context in the other group") {
  for (const uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    CAPTURE(seed);
    StateMachine from({}, nullptr);
    StateMachine to({}, nullptr);
    testing::FillContext(from, kMoved, seed);
    testing::FillContext(from, kStays, seed + 100);
    testing::FillContext(to, kStays, seed + 200);  // the receiving group holds other contexts
    const std::vector<Listed> stays = testing::SortedCopies(to, kStays);
    const std::unique_ptr<ContextTap> tap = TapOf(from, kMoved);
    // Writes between the tap's start and the copy are in both: sent again, harmlessly.
    testing::FillContext(from, kMoved, seed + 300, 10);
    uint64_t sequence = Copy(from, to, kMoved);
    for (uint32_t round = 0; round < 4; ++round) {
      CAPTURE(round);
      Churn(from, seed * 10 + round);
      const std::vector<CommandBatch> batches = Round(*tap, from, to, 1 + round * 5, &sequence);
      CHECK_FALSE(batches.empty());
      const std::vector<Listed> copies = testing::SortedCopies(from, kMoved);
      CHECK(testing::SortedCopies(to, kMoved) == copies);
      // A round resent is skipped whole by its position (a block made anew would otherwise
      // be made anew again, a later place in the eviction order).
      const uint64_t duplicates = to.counters().duplicate_batches;
      for (const CommandBatch& batch : batches) ApplyOne(to, batch);
      CHECK(to.counters().duplicate_batches == duplicates + batches.size());
      CHECK(testing::SortedCopies(to, kMoved) == copies);
    }
    CHECK(testing::SortedCopies(to, kStays) == stays);
    // The aliases are the same: a removal naming a publisher's own hashes finds the blocks.
    size_t own_hashes = 0;
    for (const HolderKey& holder : testing::kFillHolders) {
      RemoveCommand remove{kMoved, holder, std::nullopt, {}};
      for (const Listed& listed : testing::ListCopies(from, kMoved)) {
        if (listed.copy.holder == holder && listed.copy.engine_hash != listed.key) {
          remove.hashes.push_back(listed.copy.engine_hash);
        }
      }
      own_hashes += remove.hashes.size();
      Apply(from, remove);
      Apply(to, remove);
    }
    CHECK(own_hashes > 0);
    CHECK(testing::SortedCopies(to, kMoved) == testing::SortedCopies(from, kMoved));
    from.SetApplyObserver(nullptr);
  }
}

TEST_CASE("the tap: blocks that were there first, then new ones in the order they were made") {
  StateMachine machine({}, nullptr);
  ApplyOne(machine, testing::StoreBatch(kMoved, {"e1", 0}, {50, 60}));
  const std::unique_ptr<ContextTap> tap = TapOf(machine, kMoved);
  std::vector<TappedBlock> tapped;
  REQUIRE(tap->Take(&tapped));
  CHECK(tapped.empty());
  ApplyOne(machine, testing::StoreBatch(kMoved, {"e1", 0}, {50, 9, 3}));  // 9, then 3 made
  ApplyOne(machine, testing::StoreBatch(kMoved, {"e2", 0}, {60}));
  ApplyOne(machine, testing::StoreBatch(kStays, {"e1", 0}, {1}));  // another context
  REQUIRE(tap->Take(&tapped));
  CHECK(tapped == std::vector<TappedBlock>{{50, false}, {60, false}, {9, false}, {3, false}});
  // Block 50 goes whole and is made again: it went away, and is new.
  Apply(machine, ClearCommand{{"e1", 0}, kMoved, std::nullopt});
  ApplyOne(machine, testing::StoreBatch(kMoved, {"e2", 0}, {50}));
  REQUIRE(tap->Take(&tapped));
  CHECK(tapped == std::vector<TappedBlock>{{3, true}, {9, true}, {60, false}, {50, true}});
  const std::vector<MovedBlock> moved = machine.Read(
      [&](const Index& index, Revision) { return MovedBlocks(index, kMoved, tapped); });
  REQUIRE(moved.size() == 4);
  CHECK(moved[0].copies.empty());
  CHECK_FALSE(moved[0].anew);  // gone: nothing to make anew
  CHECK_FALSE(moved[2].anew);
  REQUIRE(moved[3].copies.size() == 1);
  CHECK(moved[3].copies[0].holder == HolderKey{"e2", 0});
  CHECK(moved[3].anew);
  // A state replaced under the tap (a snapshot restored): it no longer knows.
  machine.Read([&](const Index& index, Revision at) { tap->OnReset(at, index); });
  CHECK_FALSE(tap->Take(&tapped));
  machine.SetApplyObserver(nullptr);
}

TEST_CASE("a tap on a context made after it starts") {
  StateMachine machine({}, nullptr);
  const std::unique_ptr<ContextTap> tap = TapOf(machine, kMoved);
  ApplyOne(machine, testing::StoreBatch(kStays, {"e1", 0}, {1}));
  ApplyOne(machine, testing::StoreBatch(kMoved, {"e1", 0}, {7}));
  std::vector<TappedBlock> tapped;
  REQUIRE(tap->Take(&tapped));
  CHECK(tapped == std::vector<TappedBlock>{{7, false}});
  machine.SetApplyObserver(nullptr);
}

}  // namespace
}  // namespace kvatlas::server
