// A block's single copy is kept inline in its block record and moves to the chained form
// (entry records) with a second copy, a non-standard engine hash or a refcount past the
// inline field (server/index/index_impl.h). These cases cross those transitions and check
// that every public answer stays exact across them.
#include <doctest/doctest.h>

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/common/block_hasher.h"
#include "server/index/index.h"
#include "tests/unit/server/index/index_commands.h"

namespace kvatlas::server {
namespace {

using test::kCtx;
using test::Remove;
const ContextKey kOther{"default", "llama", "lora", 16, ""};

StoreCommand Store(const std::string& holder, Tier tier, std::vector<uint64_t> keys,
                   std::vector<uint64_t> engine_hashes = {},
                   std::vector<std::string> locations = {}) {
  StoreCommand c;
  c.context = kCtx;
  c.holder = {holder, 0};
  c.tier = tier;
  c.hashes = std::move(keys);
  c.engine_hashes = std::move(engine_hashes);
  c.locations = std::move(locations);
  return c;
}

ClearCommand Clear(const std::string& holder) {
  ClearCommand c;
  c.holder = {holder, 0};
  return c;
}

uint64_t EntriesOf(const Index& index, const std::string& holder) {
  for (const HolderInfo& h : index.Holders()) {
    if (h.holder.id == holder) return h.entries;
  }
  return 0;
}

const BlockLocation* CopyOf(const std::vector<BlockLocation>& copies, const std::string& holder,
                            Tier tier) {
  for (const BlockLocation& c : copies) {
    if (c.holder.id == holder && c.tier == tier) return &c;
  }
  return nullptr;
}

void Apply(Index& index, const Command& c, MutationList* out = nullptr) {
  index.Apply(c, kDefaultHashSeed, out);
}

TEST_SUITE("Index inline copies") {
  TEST_CASE("a second copy, then removing the first, keeps every answer exact") {
    Index index;
    Apply(index, Store("a", Tier::kGpu, {1, 2, 3}));
    Apply(index, Store("b", Tier::kCpu, {1, 2}));
    Apply(index, Store("a", Tier::kCpu, {2}));  // a second copy of a's own block
    CHECK(index.Locate(2).size() == 3);
    CHECK(index.Stats().entries == 6);
    Apply(index, Remove("a", Tier::kGpu, {1, 2}));
    const auto two = index.Locate(2);
    REQUIRE(two.size() == 2);
    CHECK(CopyOf(two, "a", Tier::kCpu));
    CHECK(CopyOf(two, "b", Tier::kCpu));
    CHECK(index.Locate(1).size() == 1);
    CHECK(EntriesOf(index, "a") == 2);  // GPU 3, CPU 2
    CHECK(EntriesOf(index, "b") == 2);
    const auto r = index.Lookup(kCtx, std::vector<uint64_t>{1, 2, 3});
    CHECK(r.blocks_found == 2);  // block 1 is b's only
    Apply(index, Remove("b", std::nullopt, {1}));
    CHECK(index.Locate(1).empty());
    CHECK(index.Stats().blocks == 2);
    Apply(index, Clear("a"));
    Apply(index, Clear("b"));
    CHECK(index.Stats().blocks == 0);
    CHECK(index.Stats().entries == 0);
  }

  TEST_CASE("refcounts past the inline field count exactly") {
    Index index;
    constexpr int kStores = 5000;  // beyond the 4-bit inline refcount
    for (int i = 0; i < kStores; ++i) Apply(index, Store("a", Tier::kGpu, {7}));
    REQUIRE(index.Locate(7).size() == 1);
    CHECK(index.Locate(7)[0].refcount == kStores);
    for (int i = 1; i < kStores; ++i) Apply(index, Remove("a", Tier::kGpu, {7}));
    REQUIRE(index.Locate(7).size() == 1);
    CHECK(index.Locate(7)[0].refcount == 1);
    Apply(index, Remove("a", Tier::kGpu, {7}));
    CHECK(index.Locate(7).empty());
    CHECK(index.Stats().blocks == 0);
  }

  TEST_CASE("a copy re-announced under its own engine hash keeps an alias") {
    Index index;
    Apply(index, Store("a", Tier::kGpu, {1}));
    Apply(index, Store("a", Tier::kGpu, {1}, {77}));
    auto copies = index.Locate(1);
    REQUIRE(copies.size() == 1);
    CHECK(copies[0].engine_hash == 77);
    CHECK(copies[0].refcount == 2);
    CHECK(index.Stats().aliases == 1);
    Apply(index, Remove("a", std::nullopt, {77}));
    CHECK(index.Locate(1)[0].refcount == 1);
    Apply(index, Remove("a", std::nullopt, {77}));
    CHECK(index.Locate(1).empty());
    CHECK(index.Stats().aliases == 0);
  }

  TEST_CASE("locations follow a copy into the chained form") {
    Index index;
    Apply(index, Store("a", Tier::kShared, {1, 2}, {}, {"loc-1", "loc-2"}));
    Apply(index, Store("b", Tier::kGpu, {1}));
    const auto copies = index.Locate(1);
    REQUIRE(CopyOf(copies, "a", Tier::kShared));
    CHECK(CopyOf(copies, "a", Tier::kShared)->location == "loc-1");
    CHECK(index.Locate(2)[0].location == "loc-2");
    const auto r = index.Lookup(kCtx, std::vector<uint64_t>{1, 2});
    REQUIRE(r.holders.size() == 2);
    for (const HolderMatch& m : r.holders) {
      if (m.holder.id != "a") continue;
      CHECK(m.shared_locations == std::vector<std::string>{"loc-1", "loc-2"});
    }
    CHECK(index.Stats().locations == 2);
    Apply(index, Clear("a"));
    CHECK(index.Stats().locations == 0);
  }

  TEST_CASE("clearing a holder reaches inline and chained copies in every context") {
    Index index;
    std::vector<uint64_t> keys;
    for (uint64_t k = 1; k <= 100; ++k) keys.push_back(k);
    Apply(index, Store("a", Tier::kGpu, keys));
    Apply(index, Store("b", Tier::kGpu, {50, 51, 52}));
    StoreCommand other = Store("a", Tier::kCpu, {1, 2});
    other.context = kOther;
    Apply(index, other);
    ClearCommand in_other = Clear("a");
    in_other.context = kOther;
    Apply(index, in_other);
    CHECK(EntriesOf(index, "a") == 100);
    MutationList out;
    Apply(index, Clear("a"), &out);
    CHECK(EntriesOf(index, "a") == 0);
    CHECK(EntriesOf(index, "b") == 3);
    CHECK(index.Stats().blocks == 3);
    int deleted_blocks = 0;
    for (const Mutation& m : out) deleted_blocks += m.kind == MutationKind::kDeleteBlock;
    CHECK(deleted_blocks == 97);
    const auto r = index.Lookup(kCtx, std::vector<uint64_t>{50, 51, 52});
    CHECK(r.blocks_found == 3);
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].holder.id == "b");
  }

  TEST_CASE("a holder-wide clear can spare contexts: their inline and chained copies stay") {
    const ContextKey third{"acme", "llama", "", 16, ""};
    for (const bool chained : {false, true}) {
      CAPTURE(chained);
      Index index;
      for (const ContextKey* context : {&kCtx, &kOther, &third}) {
        StoreCommand store = Store("a", Tier::kGpu, {1, 2, 3});
        // A second tier of the same blocks makes the copies chained.
        StoreCommand cpu = Store("a", Tier::kCpu, {1, 2, 3});
        store.context = cpu.context = *context;
        Apply(index, store);
        if (chained) Apply(index, cpu);
        StoreCommand other = Store("b", Tier::kGpu, {1});
        other.context = *context;
        Apply(index, other);
      }
      const uint64_t per_context = chained ? 6 : 3;
      REQUIRE(EntriesOf(index, "a") == 3 * per_context);
      const std::vector<ContextKey> spared = {kOther, third, {"none", "x", "", 1, ""}};
      MutationList out;
      index.ClearHolderExcept({"a", 0}, std::nullopt, std::span(spared).subspan(0, 3), &out);
      CHECK(EntriesOf(index, "a") == 2 * per_context);
      CHECK(EntriesOf(index, "b") == 3);
      CHECK(index.Lookup(kCtx, std::vector<uint64_t>{1}).holders.size() == 1);
      for (const ContextKey* context : {&kOther, &third}) {
        const auto r = index.Lookup(*context, std::vector<uint64_t>{1, 2, 3});
        CHECK(r.blocks_found == 3);
        CHECK(r.holders.size() == 2);
      }
      for (const Mutation& m : out) CHECK(m.cause == MutationCause::kCleared);
      CHECK(index.ReplicaDigest() == index.RecomputeReplicaDigest());
      // Sparing nothing is a holder-wide clear.
      index.ClearHolderExcept({"a", 0}, std::nullopt, {}, nullptr);
      CHECK(EntriesOf(index, "a") == 0);
      // An unknown holder changes nothing.
      index.ClearHolderExcept({"zz", 0}, std::nullopt, spared, nullptr);
      CHECK(EntriesOf(index, "b") == 3);
    }
  }

  TEST_CASE("a block turns hot from an inline copy and back down to one copy") {
    Index index;
    for (int h = 0; h < 12; ++h) Apply(index, Store("h" + std::to_string(h), Tier::kGpu, {5, 6}));
    CHECK(index.Locate(5).size() == 12);
    for (int h = 0; h < 11; ++h) {
      Apply(index, Remove("h" + std::to_string(h), Tier::kGpu, {5}));
      CHECK(index.Locate(5).size() == static_cast<size_t>(11 - h));
    }
    const auto r = index.Lookup(kCtx, std::vector<uint64_t>{5, 6});
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].holder.id == "h11");
    CHECK(r.holders[0].gpu == 2);
    Apply(index, Store("h0", Tier::kGpu, {5}));  // a chained block takes new copies
    CHECK(index.Locate(5).size() == 2);
  }

  TEST_CASE("eviction removes inline and chained blocks whole") {
    IndexOptions options;
    options.max_entries_per_context = 4;
    Index index(options);
    MutationList out;
    Apply(index, Store("a", Tier::kGpu, {1, 2}));
    Apply(index, Store("b", Tier::kGpu, {1}));  // block 1 chained: 3 entries
    Apply(index, Store("a", Tier::kGpu, {3, 4, 5, 6}), &out);
    // 7 entries: the oldest block 1 (chained, 2 entries), then 2 (inline) go.
    CHECK(index.Stats().entries == 4);
    CHECK(index.Locate(1).empty());
    CHECK(index.Locate(2).empty());
    CHECK(index.Locate(3).size() == 1);
    CHECK(index.Stats().evicted_blocks == 2);
    CHECK(EntriesOf(index, "b") == 0);
    CHECK(EntriesOf(index, "a") == 4);
  }

  TEST_CASE("boot loading builds both forms with the digest of the applied index") {
    Index applied;
    Apply(applied, Store("a", Tier::kGpu, {1, 2, 3}));
    Apply(applied, Store("b", Tier::kCpu, {2}, {99}));
    Apply(applied, Store("a", Tier::kShared, {3}, {}, {"x"}));
    for (int i = 0; i < 4100; ++i) Apply(applied, Store("b", Tier::kGpu, {1}));

    Index loaded;
    REQUIRE(loaded.LoadContext(0, kCtx).ok());
    REQUIRE(loaded.LoadHolder(0, {"a", 0}).ok());
    REQUIRE(loaded.LoadHolder(1, {"b", 0}).ok());
    for (uint64_t k = 1; k <= 3; ++k) {
      REQUIRE(loaded.LoadBlock(0, k, static_cast<uint32_t>(k - 1), k).ok());
    }
    REQUIRE(loaded.LoadEntry(0, 1, 0, Tier::kGpu, 1, 1, "").ok());
    REQUIRE(loaded.LoadEntry(0, 1, 1, Tier::kGpu, 4100, 1, "").ok());
    REQUIRE(loaded.LoadEntry(0, 2, 0, Tier::kGpu, 1, 2, "").ok());
    REQUIRE(loaded.LoadEntry(0, 2, 1, Tier::kCpu, 1, 99, "").ok());
    REQUIRE(loaded.LoadEntry(0, 3, 0, Tier::kGpu, 1, 3, "").ok());
    REQUIRE(loaded.LoadEntry(0, 3, 0, Tier::kShared, 1, 3, "x").ok());
    CHECK(loaded.StateDigest() == applied.StateDigest());
    CHECK(loaded.LoadEntry(0, 3, 0, Tier::kShared, 1, 3, "").code() == StatusCode::kCorruption);
    // New blocks get stamps after the loaded ones, past 32 bits too.
    REQUIRE(loaded.LoadBlock(0, 4, 0, uint64_t{1} << 40).ok());
    CHECK(loaded.LoadBlock(0, 5, 0, uint64_t{1} << 48).code() == StatusCode::kCorruption);
    MutationList out;
    Apply(loaded, Store("a", Tier::kGpu, {6}), &out);
    bool put_block = false;
    for (const Mutation& m : out) {
      if (m.kind != MutationKind::kPutBlock) continue;
      put_block = true;
      CHECK(m.stamp == (uint64_t{1} << 40) + 1);
    }
    CHECK(put_block);
  }
}

}  // namespace
}  // namespace kvatlas::server
