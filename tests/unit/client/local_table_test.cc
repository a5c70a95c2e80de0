// LocalTable (the data of kvatlas::LocalIndex) against the server itself: a real in-memory
// StateMachine applies random stores, removes, clears and cap evictions; its ChangeFeed's
// records drive LocalTables (one from the start, one from a mid-stream snapshot); on
// thousands of random chains both answer exactly what the server's Index answers.
#include "client/src/local_table.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "server/feed/change_feed.h"
#include "server/state/state_machine.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::client_internal {
namespace {

using namespace std::chrono_literals;
using server::ChangeFeed;
using server::CommandBatch;
using server::StateMachine;
using testing::ApplyOne;

const ContextKey kContexts[] = {{"default", "m", "", 16, ""}, {"t2", "m", "lora", 16, "salt"}};
const std::string kHolders[] = {"gpu-a", "gpu-b", "gpu-c", "store"};

// Chains of keys: document d's block i has key d * 1000 + i + 1, so prefixes share keys.
BlockKey KeyOf(uint32_t doc, uint32_t block) { return uint64_t{doc} * 1000 + block + 1; }

class RandomLoad {
 public:
  explicit RandomLoad(uint32_t seed) : rng_(seed) {}

  CommandBatch Next() {
    CommandBatch batch;
    const uint32_t n = Pick(3) + 1;
    for (uint32_t i = 0; i < n; ++i) batch.commands.push_back(OneCommand());
    return batch;
  }

  std::vector<BlockKey> Chain() {
    const uint32_t doc = Pick(kDocs);
    std::vector<BlockKey> keys;
    const uint32_t length = Pick(kBlocks) + 1;
    const uint32_t switch_at = Pick(4) == 0 ? Pick(length) : length;  // sometimes diverge
    for (uint32_t b = 0; b < length; ++b) keys.push_back(KeyOf(b < switch_at ? doc : doc + 1, b));
    return keys;
  }
  const ContextKey& Context() { return kContexts[Pick(2)]; }
  uint32_t Pick(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_); }

 private:
  static constexpr uint32_t kDocs = 30;
  static constexpr uint32_t kBlocks = 40;

  server::Command OneCommand() {
    const HolderKey holder{kHolders[Pick(4)], Pick(2)};
    const uint32_t kind = Pick(20);
    if (kind == 0) {
      server::ClearCommand clear;
      clear.holder = holder;
      if (Pick(2) == 0) clear.context = Context();
      return clear;
    }
    const uint32_t doc = Pick(kDocs);
    const uint32_t begin = Pick(3) == 0 ? Pick(kBlocks) : 0;
    const uint32_t end = std::min(kBlocks, begin + Pick(kBlocks) + 1);
    std::vector<uint64_t> keys;
    for (uint32_t b = begin; b < end; ++b) keys.push_back(KeyOf(doc, b));
    if (kind < 7) {
      server::RemoveCommand remove;
      remove.context = Context();
      remove.holder = holder;
      if (Pick(2) == 0) remove.tier = static_cast<Tier>(Pick(kNumTiers));
      remove.hashes = std::move(keys);
      return remove;
    }
    server::StoreCommand store;
    store.context = Context();
    store.holder = holder;
    store.tier = static_cast<Tier>(Pick(kNumTiers));
    store.base_depth = begin;
    if (store.tier == Tier::kShared && Pick(2) == 0) {
      for (uint64_t k : keys) store.locations.push_back("s3://bucket/" + std::to_string(k));
    }
    store.hashes = std::move(keys);
    return store;
  }

  std::mt19937 rng_;
};

void Drain(server::Watcher& watcher, LocalTable& table) {
  while (true) {
    Result<std::vector<FeedRecord>> next = watcher.Next(0ms);
    REQUIRE(next.has_value());
    if (next->empty()) return;
    for (const FeedRecord& r : *next) table.Apply(r);
  }
}

std::vector<LocalCopy> SnapshotOf(StateMachine& machine, const ContextKey& context, Revision* at) {
  std::vector<LocalCopy> copies;
  *at = machine.Read([&](const server::Index& index, Revision revision) {
    index.ForEachCopy(context, [&](BlockKey key, const BlockCopy& c) {
      copies.push_back(LocalCopy{key, c.holder, c.tier, c.location});
    });
    return revision;
  });
  return copies;
}

// Both answers, shaped as the APIs return them (holder ids differ between the two).
void CheckSame(StateMachine& machine, const LocalTable& table, RandomLoad& load, int chains) {
  for (int i = 0; i < chains; ++i) {
    const ContextKey& context = load.Context();
    const std::vector<BlockKey> keys = load.Chain();
    const std::string instance = load.Pick(5) == 0 ? kHolders[load.Pick(4)] : "";
    server::LookupOptions options;
    const LookupResult want_result = machine.Read(
        [&](const server::Index& index, Revision) { return index.Lookup(context, keys, options); });
    const LookupAnswer want = BuildLookupAnswer(want_result, context, instance, 0);
    const LookupAnswer got =
        BuildLookupAnswer(table.Lookup(context, keys, {}, true, 8192), context, instance, 0);
    if (!(got == want)) {
      FAIL_CHECK("lookup " << i << " of " << keys.size() << " keys from " << keys[0]
                           << ": local found " << got.blocks_found << " blocks, "
                           << got.instances.size() << " instances; server " << want.blocks_found
                           << ", " << want.instances.size() << "\nlocal:  "
                           << EncodeLookupAnswer(got) << "\nserver: " << EncodeLookupAnswer(want));
      return;
    }
  }
}

TEST_CASE(
    "LocalTable follows the feed to the server's answers, from the start and from a "
    "mid-stream snapshot") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    server::StateMachineOptions options;
    options.index.max_entries_per_context = 900;  // evictions happen too
    ChangeFeed feed;
    StateMachine machine(options, nullptr);
    machine.SetApplyObserver(&feed);
    REQUIRE(machine.Recover().ok());
    auto watcher = feed.Subscribe(0, {});
    REQUIRE(watcher.has_value());

    LocalTable from_start;
    for (const ContextKey& c : kContexts) from_start.Track(c);
    RandomLoad load(seed);
    for (int i = 0; i < 300; ++i) ApplyOne(machine, load.Next());
    Drain(**watcher, from_start);
    CheckSame(machine, from_start, load, 1000);

    // List-then-watch: snapshots at one revision, then the records after it.
    LocalTable from_snapshot;
    Revision at = 0;
    for (const ContextKey& c : kContexts) {
      std::vector<LocalCopy> copies = SnapshotOf(machine, c, &at);
      from_snapshot.Load(c, copies);
    }
    auto later = feed.Subscribe(at, {});
    REQUIRE(later.has_value());
    for (int i = 0; i < 300; ++i) ApplyOne(machine, load.Next());
    Drain(**watcher, from_start);
    Drain(**later, from_snapshot);
    CheckSame(machine, from_start, load, 1000);
    CheckSame(machine, from_snapshot, load, 1000);
    CHECK(from_start.copies() == from_snapshot.copies());
    CHECK(from_start.blocks() == from_snapshot.blocks());
  }
}

TEST_CASE(
    "LocalTable: untracked contexts are ignored; replays and removals of absent copies "
    "are harmless; shared locations are kept") {
  LocalTable table;
  const ContextKey& c = kContexts[0];
  FeedRecord stored{1, FeedOp::kStored, c, HolderKey{"s", 0}, Tier::kShared, {5, 6}, {"x", "y"}};
  table.Apply(stored);  // not tracked yet
  CHECK(table.copies() == 0);
  table.Track(c);
  table.Apply(stored);
  table.Apply(stored);
  CHECK(table.copies() == 2);
  const LookupResult r = table.Lookup(c, std::vector<BlockKey>{5, 6, 7}, {}, true, 8192);
  CHECK(r.blocks_queried == 3);
  CHECK(r.blocks_found == 2);
  REQUIRE(r.holders.size() == 1);
  CHECK(r.holders[0].shared == 2);
  CHECK(r.holders[0].shared_locations == std::vector<std::string>{"x", "y"});
  CHECK(table.Lookup(c, std::vector<BlockKey>{5, 6}, {}, true, 1).blocks_queried == 1);

  FeedRecord removed{2, FeedOp::kExpired, c, HolderKey{"s", 0}, Tier::kShared, {6, 9}, {}};
  table.Apply(removed);
  table.Apply(removed);
  CHECK(table.copies() == 1);
  CHECK(table.blocks() == 1);
}

TEST_CASE("LocalTable: many blocks grow and shrink the table without losing any") {
  LocalTable table;
  const ContextKey& c = kContexts[0];
  table.Track(c);
  std::vector<BlockKey> keys;
  for (BlockKey k = 1; k <= 20'000; ++k) keys.push_back(k * 7919);
  table.Apply(FeedRecord{1, FeedOp::kStored, c, HolderKey{"a", 0}, Tier::kGpu, keys, {}});
  CHECK(table.blocks() == keys.size());
  CHECK(table.Lookup(c, keys, {}, false, 100'000).blocks_found == keys.size());
  // Remove every other block: chains through the removed ones stop there.
  std::vector<BlockKey> odd;
  for (size_t i = 1; i < keys.size(); i += 2) odd.push_back(keys[i]);
  table.Apply(FeedRecord{2, FeedOp::kRemoved, c, HolderKey{"a", 0}, Tier::kGpu, odd, {}});
  CHECK(table.blocks() == keys.size() / 2);
  for (size_t i = 0; i < keys.size(); i += 2) {
    const BlockKey one[] = {keys[i]};
    REQUIRE(table.Lookup(c, one, {}, false, 10).blocks_found == 1);
  }
  for (BlockKey k : odd) {
    const BlockKey one[] = {k};
    REQUIRE(table.Lookup(c, one, {}, false, 10).blocks_found == 0);
  }
}

TEST_CASE("LocalTable: a growth prepared beside readers is adopted, and refused once stale") {
  LocalTable table;
  const ContextKey& c = kContexts[0];
  table.Track(c);
  CHECK(table.PrepareGrowth(c, 5) == nullptr);                   // 16 slots hold 14 blocks
  CHECK(table.PrepareGrowth(kContexts[1], 100'000) == nullptr);  // not tracked
  std::vector<BlockKey> keys;
  for (BlockKey k = 1; k <= 20'000; ++k) keys.push_back(k * 7919);
  const HolderKey a{"a", 0};
  const std::vector<BlockKey> first(keys.begin(), keys.begin() + 1'000);
  const std::vector<BlockKey> rest(keys.begin() + 1'000, keys.end());
  table.Apply(FeedRecord{1, FeedOp::kStored, c, a, Tier::kGpu, first, {}});
  LocalTable::PreparedGrowth growth = table.PrepareGrowth(c, rest.size());
  REQUIRE(growth != nullptr);
  CHECK(table.AdoptGrowth(std::move(growth)));
  const uint64_t memory = table.memory_bytes();
  table.Apply(FeedRecord{2, FeedOp::kStored, c, a, Tier::kGpu, rest, {}});
  CHECK(table.memory_bytes() == memory);  // room for all of them: no growth under the lock
  CHECK(table.Lookup(c, keys, {}, false, 100'000).blocks_found == keys.size());

  // A change between the prepare and the adopt (only possible when misused) is caught: the
  // copy is dropped and the table is as the change left it.
  LocalTable::PreparedGrowth stale = table.PrepareGrowth(c, 100'000);
  REQUIRE(stale != nullptr);
  const BlockKey one[] = {keys[0]};
  table.Apply(FeedRecord{3, FeedOp::kRemoved, c, a, Tier::kGpu, {keys[0]}, {}});
  CHECK_FALSE(table.AdoptGrowth(std::move(stale)));
  CHECK(table.memory_bytes() == memory);
  CHECK(table.Lookup(c, one, {}, false, 10).blocks_found == 0);
  CHECK(table.Lookup(c, std::span<const BlockKey>(keys).subspan(1), {}, false, 100'000)
            .blocks_found == keys.size() - 1);
}

// A chain's blocks as records of `holder`: each its own record, in `order` (indexes).
void StoreEach(LocalTable& table, const ContextKey& c, const HolderKey& holder,
               const std::vector<BlockKey>& chain, const std::vector<size_t>& order,
               Revision* revision) {
  for (size_t i : order) {
    table.Apply(FeedRecord{++*revision, FeedOp::kStored, c, holder, Tier::kGpu, {chain[i]}, {}});
  }
}

TEST_CASE(
    "LocalTable: a chain is found whole however its records lie: in one run, scattered, in "
    "pieces, with keys whose low 32 bits clash") {
  const ContextKey& c = kContexts[0];
  std::mt19937_64 rng(7);
  // Keys that differ only in their high 32 bits share the slot tag: every slot probe then
  // matches the tag of other blocks, and the record's key has to decide. Chains have
  // different holders, so that a block resolved to another's record changes the answer.
  auto clashing = [](size_t n, uint64_t salt) {
    std::vector<BlockKey> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(((salt * 1'000 + i + 1) << 32) | 0x5eed);
    return keys;
  };
  auto random_keys = [&](size_t n) {
    std::vector<BlockKey> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(rng());
    return keys;
  };
  for (const bool clash : {false, true}) {
    CAPTURE(clash);
    LocalTable table;
    table.Track(c);
    Revision revision = 0;
    std::vector<std::vector<BlockKey>> chains;
    for (uint64_t k = 0; k < 40; ++k) {
      chains.push_back(clash ? clashing(200, k) : random_keys(200));
      const std::vector<BlockKey>& chain = chains.back();
      const HolderKey holder{"h" + std::to_string(k % 5), 0};
      std::vector<size_t> order(chain.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      switch (k % 4) {
        case 0:  // one record: consecutive records
          table.Apply(FeedRecord{++revision, FeedOp::kStored, c, holder, Tier::kGpu, chain, {}});
          break;
        case 1:  // block by block, shuffled: no two neighbours adjacent
          std::shuffle(order.begin(), order.end(), rng);
          StoreEach(table, c, holder, chain, order, &revision);
          break;
        case 2:  // runs of 1 to 40 blocks, the runs in a random order
          for (size_t begin = 0; begin < order.size();) {
            const size_t end = std::min(order.size(), begin + 1 + rng() % 40);
            std::rotate(order.begin() + begin, order.begin() + begin + rng() % (end - begin),
                        order.begin() + end);
            begin = end;
          }
          StoreEach(table, c, holder, chain, order, &revision);
          break;
        default:  // backwards
          std::reverse(order.begin(), order.end());
          StoreEach(table, c, holder, chain, order, &revision);
          break;
      }
    }
    for (size_t k = 0; k < chains.size(); ++k) {
      CAPTURE(k);
      const LookupResult whole = table.Lookup(c, chains[k], {}, false, 8192);
      CHECK(whole.blocks_found == chains[k].size());
      REQUIRE(whole.holders.size() == 1);
      CHECK(whole.holders[0].gpu == chains[k].size());
      // Cut at random depths by keys nobody has, and by a block of another chain (of
      // another holder).
      for (int trial = 0; trial < 8; ++trial) {
        std::vector<BlockKey> cut = chains[k];
        const size_t at = 1 + rng() % (cut.size() - 1);
        cut[at] = clash ? ((rng() % 1'000'000 + 1'000'000) << 32) | 0x5eed : rng();
        CHECK(table.Lookup(c, cut, {}, false, 8192).blocks_found == at);
        cut[at] = chains[(k + 1) % chains.size()][at];
        const LookupResult crossed = table.Lookup(c, cut, {}, false, 8192);
        CHECK(crossed.blocks_found == at);
        REQUIRE(crossed.holders.size() == 1);
        CHECK(crossed.holders[0].gpu == at);
      }
    }
  }
}

TEST_CASE("LocalTable: the records removed blocks leave are compacted away, lookups unchanged") {
  const ContextKey& c = kContexts[0];
  const HolderKey a{"a", 0};
  auto chain_of = [](uint64_t k) {
    std::vector<BlockKey> keys;
    for (uint64_t i = 0; i < 500; ++i) keys.push_back((k + 1) * 1'000'003 + i * 7);
    return keys;
  };
  for (const bool prepared : {false, true}) {
    CAPTURE(prepared);
    LocalTable table;
    table.Track(c);
    for (uint64_t k = 0; k < 40; ++k) {
      table.Apply(FeedRecord{k + 1, FeedOp::kStored, c, a, Tier::kGpu, chain_of(k), {}});
    }
    const uint64_t full = table.memory_bytes();
    // 36 of 40 chains go: 18,000 records are holes, 2,000 blocks are left.
    for (uint64_t k = 0; k < 36; ++k) {
      table.Apply(FeedRecord{100 + k, FeedOp::kRemoved, c, a, Tier::kGpu, chain_of(k), {}});
    }
    CHECK(table.blocks() == 2'000);
    CHECK(table.memory_bytes() == full);  // holes until something is stored
    const std::vector<BlockKey> fresh = chain_of(1'000);
    if (prepared) {
      LocalTable::PreparedGrowth growth = table.PrepareGrowth(c, fresh.size());
      REQUIRE(growth != nullptr);
      REQUIRE(table.AdoptGrowth(std::move(growth)));
    }
    table.Apply(FeedRecord{200, FeedOp::kStored, c, a, Tier::kGpu, fresh, {}});
    CHECK(table.memory_bytes() < full / 2);
    CHECK(table.blocks() == 2'500);
    for (uint64_t k : {0, 35, 36, 39, 1'000}) {
      CAPTURE(k);
      const size_t want = k < 36 ? 0 : 500;
      CHECK(table.Lookup(c, chain_of(k), {}, false, 8192).blocks_found == want);
    }
  }
}

}  // namespace
}  // namespace kvatlas::client_internal
