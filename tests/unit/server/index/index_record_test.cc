// The 32-byte block record's narrow fields (server/index/index_impl.h): 16-bit context ids,
// 24-bit depths, a 4-bit inline refcount, a 7-bit chain length with longer chains counted
// beside it, and inline copies that no holder list links (a clear finds them by a pass over
// the block records). Each case crosses one of those edges and checks the public answers.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/common/block_hasher.h"
#include "kvatlas/common/events.h"
#include "server/index/index.h"
#include "tests/unit/server/index/index_commands.h"

namespace kvatlas::server {
namespace {

using test::kCtx;
using test::Remove;

StoreCommand Store(const std::string& holder, Tier tier, std::vector<uint64_t> keys,
                   ContextKey context = kCtx) {
  StoreCommand c;
  c.context = std::move(context);
  c.holder = {holder, 0};
  c.tier = tier;
  c.hashes = std::move(keys);
  return c;
}

void Apply(Index& index, const Command& c, MutationList* out = nullptr) {
  index.Apply(c, kDefaultHashSeed, out);
}

uint64_t EntriesOf(const Index& index, const std::string& holder) {
  for (const HolderInfo& h : index.Holders()) {
    if (h.holder.id == holder) return h.entries;
  }
  return 0;
}

TEST_SUITE("Index block record") {
  TEST_CASE("a chain past the record's 7-bit count keeps exact counts both ways") {
    Index index;
    constexpr int kHolders = 300;  // past 127: the count moves beside the record
    for (int h = 0; h < kHolders; ++h) {
      Apply(index, Store("h" + std::to_string(h), Tier::kGpu, {9, 10}));
    }
    CHECK(index.Locate(9).size() == kHolders);
    CHECK(index.Stats().entries == 2 * kHolders);
    for (int h = 0; h < kHolders; ++h) {
      Apply(index, Remove("h" + std::to_string(h), Tier::kGpu, {9}));
      REQUIRE(index.Locate(9).size() == static_cast<size_t>(kHolders - 1 - h));
      // Every remaining holder is still found in O(1) (hot) or by walking the chain.
      if (h + 1 < kHolders) {
        const auto r = index.Lookup(kCtx, std::vector<uint64_t>{9, 10});
        CHECK(r.holders.size() == static_cast<size_t>(kHolders - 1 - h));
      }
    }
    CHECK(index.Stats().entries == kHolders);
    CHECK(index.Locate(10).size() == kHolders);
    // Up again past the edge, then cleared one holder at a time.
    for (int h = 0; h < 200; ++h) Apply(index, Store("h" + std::to_string(h), Tier::kCpu, {10}));
    CHECK(index.Locate(10).size() == kHolders + 200);
    ClearCommand clear;
    for (int h = 0; h < kHolders; ++h) {
      clear.holder = {"h" + std::to_string(h), 0};
      Apply(index, clear);
    }
    CHECK(index.Locate(10).empty());
    CHECK(index.Stats().blocks == 0);
    CHECK(index.Stats().entries == 0);
  }

  TEST_CASE("refcount 15 is the last inline one; 16 moves the copy to the chained form") {
    Index index;
    for (int i = 0; i < 15; ++i) Apply(index, Store("a", Tier::kGpu, {3}));
    CHECK(index.Locate(3)[0].refcount == 15);
    Apply(index, Store("a", Tier::kGpu, {3}));
    CHECK(index.Locate(3)[0].refcount == 16);
    for (int i = 0; i < 15; ++i) Apply(index, Remove("a", Tier::kGpu, {3}));
    CHECK(index.Locate(3)[0].refcount == 1);
    Apply(index, Remove("a", Tier::kGpu, {3}));
    CHECK(index.Locate(3).empty());
  }

  TEST_CASE("a clear finds inline copies among freed records, other holders and tiers") {
    Index index;
    std::vector<uint64_t> a_keys, b_keys;
    for (uint64_t k = 1; k <= 2000; ++k) (k % 3 == 0 ? b_keys : a_keys).push_back(k);
    Apply(index, Store("a", Tier::kGpu, a_keys));
    Apply(index, Store("b", Tier::kGpu, b_keys));
    // Free every fourth of a's records, then let new blocks reuse some of them.
    std::vector<uint64_t> gone;
    for (size_t i = 0; i < a_keys.size(); i += 4) gone.push_back(a_keys[i]);
    Apply(index, Remove("a", std::nullopt, gone));
    Apply(index, Store("a", Tier::kCpu, {5001, 5002, 5003}));
    Apply(index, Store("b", Tier::kCpu, {6001, 6002}));
    const uint64_t a_before = EntriesOf(index, "a");
    CHECK(a_before == a_keys.size() - gone.size() + 3);

    ClearCommand cpu_only;
    cpu_only.holder = {"a", 0};
    cpu_only.tier = Tier::kCpu;
    Apply(index, cpu_only);
    CHECK(EntriesOf(index, "a") == a_before - 3);
    CHECK(index.Locate(5001).empty());
    CHECK(index.Locate(a_keys[1]).size() == 1);

    const ContextKey other{"default", "llama", "lora", 16, ""};
    Apply(index, Store("a", Tier::kGpu, {7001}, other));
    ClearCommand other_only;
    other_only.holder = {"a", 0};
    other_only.context = other;
    MutationList out;
    Apply(index, other_only, &out);
    CHECK(out.size() == 2);  // the entry and its block
    CHECK(EntriesOf(index, "a") == a_before - 3);

    ClearCommand all;
    all.holder = {"a", 0};
    Apply(index, all);
    CHECK(EntriesOf(index, "a") == 0);
    CHECK(EntriesOf(index, "b") == b_keys.size() + 2);
    CHECK(index.Stats().blocks == b_keys.size() + 2);
    const auto r = index.Lookup(kCtx, std::vector<uint64_t>{3, 6, 9});
    CHECK(r.blocks_found == 3);
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].holder.id == "b");
    CHECK(index.Lookup(kCtx, std::vector<uint64_t>{1, 2}).blocks_found == 0);
  }

  TEST_CASE("expiring several holders at once deletes exactly theirs, inline and chained") {
    Index index;
    for (int h = 0; h < 6; ++h) {
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 50; ++k) keys.push_back(1000 * (h + 1) + k);
      Apply(index, Store("h" + std::to_string(h), Tier::kGpu, keys));
    }
    Apply(index, Store("h1", Tier::kCpu, {5000, 5001}));  // h4's blocks turn chained
    Apply(index, Store("h0", Tier::kGpu, {2000}));        // h1's first block, chained
    const std::vector<HolderKey> due = {{"h0", 0}, {"h1", 0}, {"h3", 0}, {"nobody", 0}};
    MutationList out;
    CHECK(index.ExpireHolders(due, &out) == 3);
    for (const Mutation& m : out) CHECK(m.cause == MutationCause::kExpired);
    CHECK(EntriesOf(index, "h0") == 0);
    CHECK(EntriesOf(index, "h1") == 0);
    CHECK(EntriesOf(index, "h3") == 0);
    for (const char* kept : {"h2", "h4", "h5"}) {
      CAPTURE(kept);
      CHECK(EntriesOf(index, kept) == 50);
    }
    CHECK(index.Stats().entries == 150);
    CHECK(index.Stats().blocks == 150);
    CHECK(index.Locate(5000).size() == 1);       // h4's, its h1 copy gone
    CHECK(index.ExpireHolders(due, &out) == 0);  // nothing left to expire
  }

  TEST_CASE("blocks deeper than 24 bits are dropped; shallower ones of the store stay") {
    Index index;
    StoreCommand c = Store("a", Tier::kGpu, {1, 2, 3, 4});
    c.base_depth = kMaxBlockDepth - 1;  // 1 and 2 fit, 3 and 4 would not
    Apply(index, c);
    CHECK(index.Stats().blocks == 2);
    REQUIRE(index.Locate(2).size() == 1);
    CHECK(index.Locate(2)[0].depth == kMaxBlockDepth);
    CHECK(index.Locate(3).empty());
    // A child of the deepest block, through its parent: nothing to record either.
    StoreCommand child = Store("a", Tier::kGpu, {5});
    child.parent = 2;
    child.mode = KeyMode::kSequence;
    Apply(index, child);
    CHECK(index.Locate(5).empty());
    CHECK(index.LoadBlock(0, 77, kMaxBlockDepth + 1, 1000).code() == StatusCode::kCorruption);
  }

  TEST_CASE("65,536 contexts: stores into a new one are dropped, the others go on") {
    Index index;
    for (uint32_t i = 0; i < 65536; ++i) {
      ContextKey ctx = kCtx;
      ctx.model = "m" + std::to_string(i);
      Apply(index, Store("a", Tier::kGpu, {i + 1}, ctx));
    }
    CHECK(index.Stats().contexts == 65536);
    ContextKey last = kCtx;
    last.model = "m65535";
    CHECK(index.Lookup(last, std::vector<uint64_t>{65536}).blocks_found == 1);
    ContextKey one_more = kCtx;
    one_more.model = "m65536";
    Apply(index, Store("a", Tier::kGpu, {1}, one_more));
    CHECK(index.Stats().contexts == 65536);
    CHECK(index.Lookup(one_more, std::vector<uint64_t>{1}).blocks_found == 0);
    ContextKey first = kCtx;
    first.model = "m0";
    Apply(index, Store("a", Tier::kGpu, {2}, first));
    CHECK(index.Lookup(first, std::vector<uint64_t>{1, 2}).blocks_found == 2);
    Index loaded;
    CHECK(loaded.LoadContext(65536, kCtx).code() == StatusCode::kCorruption);
  }

  TEST_CASE("an event's base_block_idx past the deepest position is refused") {
    BlockEvent event;
    event.type = EventType::kStored;
    event.context = kCtx;
    event.holder = {"a", 0};
    event.seq_hashes = {1, 2};
    event.base_block_idx = kMaxBlockDepth - 1;
    CHECK(ValidateBlockEvent(event, "events[0]").ok());
    event.base_block_idx = kMaxBlockDepth;
    const Status s = ValidateBlockEvent(event, "events[0]");
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("events[0].base_block_idx") != std::string::npos);
  }
}

}  // namespace
}  // namespace kvatlas::server
