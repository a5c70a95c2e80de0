#include "server/index/index.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/common/block_hasher.h"
#include "tests/unit/server/index/index_commands.h"

namespace kvatlas::server {
namespace {

using test::kCtx;
using test::Remove;

StoreCommand Store(const std::string& holder, Tier tier, std::vector<uint64_t> keys,
                   uint32_t rank = 0) {
  StoreCommand c;
  c.context = kCtx;
  c.holder = {holder, rank};
  c.tier = tier;
  c.hashes = std::move(keys);
  return c;
}

const HolderMatch* Find(const LookupResult& r, const std::string& id, uint32_t rank = 0) {
  for (const HolderMatch& m : r.holders) {
    if (m.holder.id == id && m.holder.dp_rank == rank) return &m;
  }
  return nullptr;
}

std::vector<uint64_t> Keys(uint64_t first, size_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST_SUITE("Index") {
  TEST_CASE("a stored chain is found from block 0, cumulative per tier") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {1, 2}), kDefaultHashSeed, nullptr);
    index.Apply(Store("a", Tier::kCpu, {3}), kDefaultHashSeed, nullptr);
    index.Apply(Store("a", Tier::kDisk, {4}), kDefaultHashSeed, nullptr);
    index.Apply(Store("b", Tier::kCpu, {1}), kDefaultHashSeed, nullptr);
    const auto r = index.Lookup(kCtx, Keys(1, 6));
    CHECK(r.blocks_queried == 6);
    CHECK(r.blocks_found == 4);
    REQUIRE(r.holders.size() == 2);
    const HolderMatch* a = Find(r, "a");
    REQUIRE(a);
    CHECK(a->gpu == 2);
    CHECK(a->cpu == 3);
    CHECK(a->disk == 4);
    CHECK(a->shared == 0);
    CHECK(a->cpu_only == 0);  // block 0 is only on GPU
    CHECK(a->disk_only == 0);
    const HolderMatch* b = Find(r, "b");
    REQUIRE(b);
    CHECK(b->gpu == 0);
    CHECK(b->cpu == 1);
    CHECK(b->disk == 1);
    CHECK(b->cpu_only == 1);
  }

  TEST_CASE("a gap ends the prefix even if later blocks are held") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {1, 3, 4}), kDefaultHashSeed, nullptr);
    const auto r = index.Lookup(kCtx, Keys(1, 4));
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].disk == 1);
    CHECK(r.blocks_found == 1);
  }

  TEST_CASE("holders that lack block 0 do not match") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {2, 3}), kDefaultHashSeed, nullptr);
    CHECK(index.Lookup(kCtx, Keys(1, 3)).holders.empty());
  }

  TEST_CASE("an unknown context or empty chain answers no matches") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {1}), kDefaultHashSeed, nullptr);
    ContextKey other = kCtx;
    other.lora_name = "adapter";
    CHECK(index.Lookup(other, Keys(1, 1)).holders.empty());
    CHECK(index.Lookup(kCtx, {}).holders.empty());
  }

  TEST_CASE("shared-tier matches report locations") {
    Index index;
    StoreCommand c = Store("pool", Tier::kShared, {1, 2});
    c.locations = {"s3://b/1", "s3://b/2"};
    index.Apply(c, kDefaultHashSeed, nullptr);
    const auto r = index.Lookup(kCtx, Keys(1, 3));
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].shared == 2);
    CHECK(r.holders[0].disk == 0);
    CHECK(r.holders[0].shared_locations == std::vector<std::string>{"s3://b/1", "s3://b/2"});
    const auto locs = index.Locate(2);
    REQUIRE(locs.size() == 1);
    CHECK(locs[0].location == "s3://b/2");
    CHECK(locs[0].tier == Tier::kShared);
    CHECK(locs[0].depth == 1);
  }

  TEST_CASE("dp ranks are separate holders and the instance filter keeps all ranks") {
    Index index;
    index.Apply(Store("i", Tier::kGpu, {1, 2}, 0), kDefaultHashSeed, nullptr);
    index.Apply(Store("i", Tier::kGpu, {1}, 1), kDefaultHashSeed, nullptr);
    index.Apply(Store("j", Tier::kGpu, {1, 2, 3}), kDefaultHashSeed, nullptr);
    LookupOptions only_i;
    only_i.instance_id = "i";
    const auto r = index.Lookup(kCtx, Keys(1, 3), only_i);
    REQUIRE(r.holders.size() == 2);
    CHECK(Find(r, "i", 0)->disk == 2);
    CHECK(Find(r, "i", 1)->disk == 1);
    CHECK(r.blocks_found == 2);
  }

  TEST_CASE("a report keeps a held block's count; a copy adds one; tallies say which") {
    Index index;
    StoreCommand copy = Store("a", Tier::kGpu, {1, 2});
    copy.engine_hashes = {101, 102};
    StoreCommand report = copy;
    report.report = true;
    CommandTally t = index.Apply(copy, kDefaultHashSeed, nullptr);
    CHECK(t.stored_blocks == 2);
    CHECK(t.held_stores == 0);
    MutationList mutations;
    t = index.Apply(report, kDefaultHashSeed, &mutations);
    CHECK(t.stored_blocks == 2);
    CHECK(t.held_stores == 2);
    CHECK(mutations.empty());  // nothing changed: no storage write, no feed event
    t = index.Apply(Remove("a", Tier::kGpu, {101, 102, 103}), kDefaultHashSeed, nullptr);
    CHECK(t.removed_hashes == 3);
    CHECK(t.found_removes == 2);
    CHECK(index.Stats().entries == 0);  // one remove each: the report added no copy

    // A report of a block not held places it, once; a copy on top of it needs its own remove.
    index.Apply(report, kDefaultHashSeed, nullptr);
    index.Apply(report, kDefaultHashSeed, nullptr);
    index.Apply(copy, kDefaultHashSeed, nullptr);
    index.Apply(Remove("a", Tier::kGpu, {101, 102}), kDefaultHashSeed, nullptr);
    CHECK(index.Stats().entries == 2);
    index.Apply(Remove("a", Tier::kGpu, {101, 102}), kDefaultHashSeed, nullptr);
    CHECK(index.Stats().entries == 0);
  }

  TEST_CASE("a report that moves a block's location or engine hash is written") {
    Index index;
    StoreCommand shared = Store("a", Tier::kShared, {1});
    shared.locations = {"s3://x"};
    index.Apply(shared, kDefaultHashSeed, nullptr);
    shared.report = true;
    shared.locations = {"s3://y"};
    MutationList mutations;
    index.Apply(shared, kDefaultHashSeed, &mutations);
    CHECK(mutations.size() == 1);
    CHECK(index.Locate(1).at(0).location == "s3://y");
    CHECK(index.Stats().entries == 1);
  }

  TEST_CASE("removal by engine hash removes only that tier") {
    Index index;
    StoreCommand gpu = Store("a", Tier::kGpu, {1, 2});
    gpu.engine_hashes = {101, 102};
    StoreCommand cpu = Store("a", Tier::kCpu, {1, 2});
    cpu.engine_hashes = {101, 102};
    index.Apply(gpu, kDefaultHashSeed, nullptr);
    index.Apply(cpu, kDefaultHashSeed, nullptr);
    CHECK(index.Stats().aliases == 2);
    index.Apply(Remove("a", Tier::kGpu, {102}), kDefaultHashSeed, nullptr);
    auto r = index.Lookup(kCtx, Keys(1, 2));
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].gpu == 1);
    CHECK(r.holders[0].cpu == 2);
    CHECK(index.Stats().aliases == 2);  // the CPU copy still carries 102
    index.Apply(Remove("a", Tier::kCpu, {102}), kDefaultHashSeed, nullptr);
    CHECK(index.Stats().aliases == 1);
    CHECK(index.Stats().blocks == 1);
  }

  TEST_CASE("duplicate stores are reference-counted per holder and tier") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {1}), kDefaultHashSeed, nullptr);
    index.Apply(Store("a", Tier::kGpu, {1}), kDefaultHashSeed, nullptr);
    CHECK(index.Stats().entries == 1);
    index.Apply(Remove("a", Tier::kGpu, {1}), kDefaultHashSeed, nullptr);
    CHECK(index.Lookup(kCtx, Keys(1, 1)).holders.size() == 1);
    index.Apply(Remove("a", Tier::kGpu, {1}), kDefaultHashSeed, nullptr);
    CHECK(index.Lookup(kCtx, Keys(1, 1)).holders.empty());
    CHECK(index.Stats().blocks == 0);
  }

  TEST_CASE("removes of unknown keys, holders and contexts change nothing") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {1}), kDefaultHashSeed, nullptr);
    const uint64_t digest = index.StateDigest();
    const uint64_t bytes = index.Stats().memory_bytes;
    MutationList out;
    for (uint64_t k = 1000; k < 101000; ++k)
      index.Apply(Remove("a", std::nullopt, {k}), kDefaultHashSeed, &out);
    index.Apply(Remove("zzz", std::nullopt, {1}), kDefaultHashSeed, &out);
    ClearCommand clear{HolderKey{"nobody", 0}, std::nullopt, std::nullopt};
    index.Apply(clear, kDefaultHashSeed, &out);
    CHECK(out.empty());
    CHECK(index.StateDigest() == digest);
    CHECK(index.Stats().memory_bytes == bytes);
    CHECK(index.Stats().holders == 1);
  }

  TEST_CASE("clear drops one holder's entries, optionally by tier or context") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {1, 2, 3}), kDefaultHashSeed, nullptr);
    index.Apply(Store("a", Tier::kCpu, {1, 2}), kDefaultHashSeed, nullptr);
    index.Apply(Store("b", Tier::kGpu, {1, 2}), kDefaultHashSeed, nullptr);
    ContextKey other = kCtx;
    other.model = "other";
    StoreCommand elsewhere = Store("a", Tier::kGpu, {1});
    elsewhere.context = other;
    index.Apply(elsewhere, kDefaultHashSeed, nullptr);

    index.Apply(ClearCommand{HolderKey{"a", 0}, kCtx, Tier::kGpu}, kDefaultHashSeed, nullptr);
    auto r = index.Lookup(kCtx, Keys(1, 3));
    CHECK(Find(r, "a")->gpu == 0);
    CHECK(Find(r, "a")->cpu == 2);
    CHECK(index.Lookup(other, Keys(1, 1)).holders.size() == 1);

    MutationList out;
    index.Apply(ClearCommand{HolderKey{"a", 0}, std::nullopt, std::nullopt}, kDefaultHashSeed,
                &out);
    r = index.Lookup(kCtx, Keys(1, 3));
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].holder.id == "b");
    CHECK(index.Lookup(other, Keys(1, 1)).holders.empty());
    // Block 3 was only a's, as was the block in `other`.
    CHECK(index.Stats().blocks == 2);
    int deleted_entries = 0;
    for (const Mutation& m : out) {
      deleted_entries += m.kind == MutationKind::kDeleteEntry ? 1 : 0;
      CHECK(m.cause == MutationCause::kCleared);
    }
    CHECK(deleted_entries == 3);
  }

  TEST_CASE("a context over its cap evicts its oldest blocks whole") {
    IndexOptions options;
    options.max_entries_per_context = 5;
    Index index(options);
    index.Apply(Store("a", Tier::kGpu, {1, 2}), kDefaultHashSeed, nullptr);
    index.Apply(Store("b", Tier::kGpu, {1, 2}), kDefaultHashSeed, nullptr);  // 4 entries
    MutationList out;
    index.Apply(Store("c", Tier::kGpu, {7, 8}), kDefaultHashSeed, &out);  // 6 > 5
    // Block 1 (two entries) is the oldest; evicting it brings the context to 4.
    CHECK(index.Stats().entries == 4);
    CHECK(index.Lookup(kCtx, Keys(1, 2)).holders.empty());
    CHECK(index.Locate(2).size() == 2);
    CHECK(index.Contexts()[0].evicted_blocks == 1);
    int evicted = 0;
    for (const Mutation& m : out) evicted += m.cause == MutationCause::kEvicted ? 1 : 0;
    CHECK(evicted == 3);  // two entries and the block record
  }

  TEST_CASE("local hashes chain from a parent resolved through the holder's alias") {
    Index index;
    BlockHasher hasher;
    std::vector<uint32_t> tokens(64);
    std::iota(tokens.begin(), tokens.end(), 1000);
    const auto expected = hasher.SequenceHashes(tokens, 16);
    const auto locals = hasher.LocalHashes(tokens, 16);

    StoreCommand first = Store("a", Tier::kGpu, {locals[0], locals[1]});
    first.mode = KeyMode::kLocal;
    first.engine_hashes = {0xe1, 0xe2};
    index.Apply(first, hasher.seed(), nullptr);
    StoreCommand second = Store("a", Tier::kGpu, {locals[2], locals[3]});
    second.mode = KeyMode::kLocal;
    second.parent = 0xe2;  // the engine's hash of block 1
    second.engine_hashes = {0xe3, 0xe4};
    index.Apply(second, hasher.seed(), nullptr);

    const auto r = index.Lookup(kCtx, expected);
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].gpu == 4);
    const auto locs = index.Locate(expected[3]);
    REQUIRE(locs.size() == 1);
    CHECK(locs[0].depth == 3);
    CHECK(locs[0].engine_hash == 0xe4);
  }

  TEST_CASE("a store emits the records storage must write") {
    Index index;
    MutationList out;
    StoreCommand c = Store("a", Tier::kCpu, {5});
    c.engine_hashes = {55};
    index.Apply(c, kDefaultHashSeed, &out);
    REQUIRE(out.size() == 4);
    CHECK(out[0].kind == MutationKind::kPutContext);
    CHECK(*out[0].context_key == kCtx);
    CHECK(out[1].kind == MutationKind::kPutHolder);
    CHECK(*out[1].holder_key == (HolderKey{"a", 0}));
    CHECK(out[2].kind == MutationKind::kPutBlock);
    CHECK(out[2].key == 5);
    CHECK(out[2].stamp == 1);
    CHECK(out[3].kind == MutationKind::kPutEntry);
    CHECK(out[3].tier == Tier::kCpu);
    CHECK(out[3].engine_hash == 55);
    CHECK(out[3].refcount == 1);
  }

  TEST_CASE("lookups stop at max_lookup_blocks") {
    IndexOptions options;
    options.max_lookup_blocks = 3;
    Index index(options);
    index.Apply(Store("a", Tier::kGpu, Keys(1, 10)), kDefaultHashSeed, nullptr);
    const auto r = index.Lookup(kCtx, Keys(1, 10));
    CHECK(r.blocks_queried == 3);
    CHECK(r.holders[0].gpu == 3);
  }

  TEST_CASE("blocks held by many holders stay exact as they turn hot and cold") {
    Index index;
    // 20 holders on blocks 1..3, CPU and GPU, with aliases: crosses kHotChain both ways.
    for (int h = 0; h < 20; ++h) {
      for (Tier t : {Tier::kGpu, Tier::kCpu}) {
        StoreCommand c = Store("h" + std::to_string(h), t, {1, 2, 3});
        c.engine_hashes = {1000u + h, 2000u + h, 3000u + h};
        index.Apply(c, kDefaultHashSeed, nullptr);
      }
    }
    CHECK(index.Stats().entries == 120);
    auto r = index.Lookup(kCtx, Keys(1, 3));
    CHECK(r.holders.size() == 20);
    // A duplicate store on a hot block finds the existing entry (refcount, no new entry).
    StoreCommand again = Store("h7", Tier::kGpu, {1});
    again.engine_hashes = {1007};
    index.Apply(again, kDefaultHashSeed, nullptr);
    CHECK(index.Stats().entries == 120);
    index.Apply(Remove("h7", Tier::kGpu, {1007}), kDefaultHashSeed, nullptr);
    CHECK(index.Stats().entries == 120);
    // Remove most holders by engine hash: the blocks cool down and everything stays found.
    for (int h = 0; h < 18; ++h) {
      index.Apply(Remove("h" + std::to_string(h), std::nullopt, {3000u + h}), kDefaultHashSeed,
                  nullptr);
    }
    r = index.Lookup(kCtx, Keys(1, 3));
    REQUIRE(r.holders.size() == 20);
    CHECK(Find(r, "h0")->disk == 2);
    CHECK(Find(r, "h19")->disk == 3);
    CHECK(index.Locate(3).size() == 4);
    for (int h = 0; h < 20; ++h) {
      index.Apply(ClearCommand{HolderKey{"h" + std::to_string(h), 0}, std::nullopt, std::nullopt},
                  kDefaultHashSeed, nullptr);
    }
    CHECK(index.Stats().entries == 0);
    CHECK(index.Stats().blocks == 0);
    CHECK(index.Stats().aliases == 0);
  }

  TEST_CASE("holders and contexts are listed with their counts") {
    Index index;
    index.Apply(Store("a", Tier::kGpu, {1, 2}), kDefaultHashSeed, nullptr);
    index.Apply(Store("a", Tier::kDisk, {1}), kDefaultHashSeed, nullptr);
    const auto holders = index.Holders();
    REQUIRE(holders.size() == 1);
    CHECK(holders[0].entries == 3);
    CHECK(holders[0].entries_by_tier[static_cast<int>(Tier::kDisk)] == 1);
    const auto contexts = index.Contexts();
    REQUIRE(contexts.size() == 1);
    CHECK(contexts[0].blocks == 2);
    CHECK(contexts[0].entries == 3);
    const auto st = index.Stats();
    CHECK(st.contexts == 1);
    CHECK(st.holders == 1);
    CHECK(st.memory_bytes > 0);
  }

  TEST_CASE("spares made ahead are wanted near growth and change nothing but where it lands") {
    Index index, plain;
    uint64_t next = 1;
    // Stores of 1000 blocks until the forward table wants a spare.
    std::vector<SpareNeed> needs;
    while (needs.empty()) {
      StoreCommand store = Store("a", Tier::kGpu, Keys(next, 1000));
      next += 1000;
      index.Apply(store, kDefaultHashSeed, nullptr);
      plain.Apply(store, kDefaultHashSeed, nullptr);
      needs = index.SparesWanted();
    }
    REQUIRE(needs.size() == 1);  // no aliases, no hot blocks
    CHECK(needs[0].part == IndexPart::kForward);
    CHECK(needs[0].capacity == 2 * index.table_capacities().forward);
    index.ProvideSpare(Index::MakeSpare(needs[0]));
    CHECK(index.SparesWanted().empty());  // held
    // Through the growth: the same answers and capacities as an index without spares.
    const uint64_t capacity = index.table_capacities().forward;
    while (index.table_capacities().forward == capacity) {
      StoreCommand store = Store("a", Tier::kGpu, Keys(next, 1000));
      next += 1000;
      index.Apply(store, kDefaultHashSeed, nullptr);
      plain.Apply(store, kDefaultHashSeed, nullptr);
    }
    CHECK(index.table_capacities().forward == plain.table_capacities().forward);
    CHECK(index.StateDigest() == plain.StateDigest());
    CHECK(index.Stats().blocks == next - 1);
  }

  TEST_CASE(
      "a pool's spare chunk is wanted near its chunk's end and changes nothing but where "
      "records land") {
    Index index, plain;
    uint64_t next = 1;
    const auto find = [](const std::vector<SpareNeed>& needs, IndexPart part) {
      const auto it = std::find_if(needs.begin(), needs.end(),
                                   [&](const SpareNeed& n) { return n.part == part; });
      return it == needs.end() ? std::optional<SpareNeed>() : std::optional<SpareNeed>(*it);
    };
    // Stores of 4000 one-copy blocks (one block and one entry record each); every spare
    // other than the block pool's is provided as it is wanted, as the state machine does.
    const auto store_until_blocks_want = [&](size_t above) {
      for (;;) {
        REQUIRE(next < (size_t{4} << 20));  // a pool that never wants a spare fails, not hangs
        StoreCommand store = Store("a", Tier::kGpu, Keys(next, 4000));
        next += 4000;
        index.Apply(store, kDefaultHashSeed, nullptr);
        plain.Apply(store, kDefaultHashSeed, nullptr);
        const std::vector<SpareNeed> needs = index.SparesWanted();
        for (const SpareNeed& need : needs) {
          if (need.part != IndexPart::kBlocks) index.ProvideSpare(Index::MakeSpare(need));
        }
        if (auto blocks = find(needs, IndexPart::kBlocks); blocks && blocks->capacity > above) {
          return *blocks;
        }
      }
    };
    const SpareNeed first = store_until_blocks_want(0);
    CHECK(first.capacity > index.Stats().blocks);
    const uint64_t before = index.Stats().memory_bytes;
    index.ProvideSpare(Index::MakeSpare(first));
    CHECK_FALSE(find(index.SparesWanted(), IndexPart::kBlocks));  // held
    CHECK(index.Stats().memory_bytes >= before + (2u << 20));     // and counted
    // Through the chunk the spare became, until the next one is half used.
    const SpareNeed second = store_until_blocks_want(first.capacity);
    CHECK(second.capacity > first.capacity);
    CHECK(index.StateDigest() == plain.StateDigest());
    CHECK(index.Stats().blocks == next - 1);
    CHECK(index.Stats().entries == next - 1);
  }

  TEST_CASE("an index whose tables grow into spares answers as one that grew by itself") {
    // Stores from 24 holders: a shared 16-block prefix (its blocks turn hot), unique tails,
    // engine hashes (aliases), a second tier, removes and a small cap (evictions) — every
    // table grows (incrementally, flat_table.h) and shrinks underneath. One index is given
    // every spare it wants, as the state machine does; the other allocates its own.
    IndexOptions options;
    options.max_entries_per_context = 60000;
    Index spared(options), grown(options);
    std::vector<std::vector<uint64_t>> chains;
    int provided = 0;
    for (uint64_t step = 0; step < 1200; ++step) {
      const std::string holder = "h" + std::to_string(step % 24);
      StoreCommand store = Store(holder, step % 5 == 4 ? Tier::kCpu : Tier::kGpu, Keys(1, 16));
      for (uint64_t i = 0; i < 64; ++i) store.hashes.push_back((step << 20) + 1000 + i);
      for (uint64_t key : store.hashes) store.engine_hashes.push_back(key * 31 + step % 24);
      chains.push_back(store.hashes);
      for (const SpareNeed& need : spared.SparesWanted()) {
        spared.ProvideSpare(Index::MakeSpare(need));
        ++provided;
      }
      spared.Apply(store, kDefaultHashSeed, nullptr);
      grown.Apply(store, kDefaultHashSeed, nullptr);
      CAPTURE(step);
      REQUIRE(spared.Lookup(kCtx, store.hashes).blocks_found ==
              grown.Lookup(kCtx, store.hashes).blocks_found);
      if (step % 7 == 6) {
        const RemoveCommand remove = Remove(holder, std::nullopt, {store.engine_hashes[20]});
        spared.Apply(remove, kDefaultHashSeed, nullptr);
        grown.Apply(remove, kDefaultHashSeed, nullptr);
      }
    }
    CHECK(provided > 5);
    CHECK(spared.Stats().evicted_blocks > 0);
    CHECK(spared.StateDigest() == grown.StateDigest());
    const IndexStats a = spared.Stats(), b = grown.Stats();
    CHECK(a.blocks == b.blocks);
    CHECK(a.entries == b.entries);
    CHECK(a.aliases == b.aliases);
    for (size_t c = 0; c < chains.size(); c += 37) {
      const LookupResult x = spared.Lookup(kCtx, chains[c]);
      const LookupResult y = grown.Lookup(kCtx, chains[c]);
      CHECK(x.blocks_found == y.blocks_found);
      REQUIRE(x.holders.size() == y.holders.size());
      for (size_t h = 0; h < x.holders.size(); ++h) {
        CHECK(x.holders[h].holder == y.holders[h].holder);
        CHECK(x.holders[h].gpu == y.holders[h].gpu);
        CHECK(x.holders[h].cpu == y.holders[h].cpu);
        CHECK(x.holders[h].disk == y.holders[h].disk);
      }
      CHECK(spared.Locate(chains[c].back(), &kCtx).size() ==
            grown.Locate(chains[c].back(), &kCtx).size());
    }
    CHECK(spared.Lookup(kCtx, chains.back()).blocks_found == 80);
  }
}

}  // namespace
}  // namespace kvatlas::server
