// A context split over groups answers a lookup exactly as one group holding all of it:
// random maps, queries and split points; each "group" answers Index::CopiesAt for the keys
// its ranges own, and MergeSplitLookup's answer must equal Index::Lookup's.
#include "common/internal/split_lookup.h"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "kvatlas/common/placement.h"
#include "server/index/index.h"
#include "tests/unit/server/index/index_commands.h"

namespace kvatlas::server {
namespace {

using test::kCtx;

struct World {
  Index index;
  std::vector<std::vector<uint64_t>> chains;
};

// Chains of random keys; holders store random prefixes of them in random tiers (a shared
// backend with locations), and remove a few blocks to leave holes in their prefixes.
void Populate(World* w, std::mt19937_64& rng) {
  const std::vector<HolderKey> holders = {{"a", 0}, {"a", 1}, {"b", 0}, {"c", 0}, {"s", 0}};
  for (int c = 0; c < 6; ++c) {
    std::vector<uint64_t> chain(40);
    for (uint64_t& k : chain) k = rng();
    w->chains.push_back(std::move(chain));
  }
  uint64_t seed = 0;
  for (int i = 0; i < 60; ++i) {
    const auto& chain = w->chains[rng() % w->chains.size()];
    const HolderKey& holder = holders[rng() % holders.size()];
    StoreCommand store;
    store.context = kCtx;
    store.holder = holder;
    store.tier = holder.id == "s" ? Tier::kShared : static_cast<Tier>(rng() % 3);
    store.base_depth = 0;
    store.hashes.assign(chain.begin(), chain.begin() + 1 + rng() % chain.size());
    if (store.tier == Tier::kShared) {
      for (uint64_t k : store.hashes) store.locations.push_back("obj/" + std::to_string(k % 997));
    }
    MutationList out;
    (void)w->index.Apply(Command{store}, ++seed, &out);
    if (rng() % 4 == 0) {
      RemoveCommand remove;
      remove.context = kCtx;
      remove.holder = holder;
      remove.hashes = {store.hashes[rng() % store.hashes.size()]};
      (void)w->index.Apply(Command{remove}, ++seed, &out);
    }
  }
}

ContextPlacement RandomPlacement(std::mt19937_64& rng, int groups) {
  PlacementDirectory dir;
  for (GroupId g = 1; g <= static_cast<GroupId>(groups); ++g) {
    REQUIRE(dir.AddGroup({g, {"server-" + std::to_string(g)}, true}).ok());
  }
  REQUIRE(dir.Assign(kCtx, 1).ok());
  const int cuts = static_cast<int>(rng() % 8);
  for (int i = 0; i < cuts; ++i) {
    REQUIRE(dir.SplitAt(kCtx, rng(), static_cast<GroupId>(1 + rng() % groups)).ok());
  }
  return *dir.Find(kCtx);
}

LookupAnswer Split(const Index& index, const ContextPlacement& placement,
                   const std::vector<uint64_t>& keys, const LookupOptions& options) {
  std::vector<GroupCopies> parts;
  for (const GroupShare& share : PartitionKeys(placement, keys)) {
    parts.push_back(index.CopiesAt(kCtx, keys, share.positions));  // as group share.group would
  }
  const LookupResult merged = MergeSplitLookup(static_cast<uint32_t>(keys.size()), parts,
                                               options.instance_id, options.include_locations);
  return BuildLookupAnswer(merged, kCtx, options.instance_id, 7);
}

TEST_CASE("a split context's merged lookup equals the unsplit lookup") {
  std::mt19937_64 rng(20261205);
  int compared = 0;
  int with_match = 0;
  for (int world = 0; world < 20; ++world) {
    World w;
    Populate(&w, rng);
    for (int q = 0; q < 50; ++q) {
      std::vector<uint64_t> keys = w.chains[rng() % w.chains.size()];
      keys.resize(1 + rng() % keys.size());
      if (rng() % 5 == 0) keys[rng() % keys.size()] = rng();  // a miss inside the query
      LookupOptions options;
      options.include_locations = rng() % 2 == 0;
      if (rng() % 4 == 0) options.instance_id = rng() % 2 == 0 ? "a" : "s";
      const ContextPlacement placement = RandomPlacement(rng, 1 + static_cast<int>(rng() % 4));
      const LookupAnswer whole =
          BuildLookupAnswer(w.index.Lookup(kCtx, keys, options), kCtx, options.instance_id, 7);
      CAPTURE(world);
      CAPTURE(q);
      CHECK(Split(w.index, placement, keys, options) == whole);
      ++compared;
      with_match += whole.blocks_found > 0 ? 1 : 0;
    }
  }
  CHECK(compared == 1000);
  CHECK(with_match > 500);  // the comparisons are not all of empty answers
}

TEST_CASE("the merge stops at the first block no holder has, whichever group owns it") {
  Index index;
  StoreCommand store;
  store.context = kCtx;
  store.holder = {"a", 0};
  store.base_depth = 0;
  store.hashes = {10, 20, 30, 40};
  MutationList out;
  (void)index.Apply(Command{store}, 1, &out);
  const std::vector<uint64_t> keys = {10, 20, 99, 40};  // 99 is not held: the prefix is 2
  ContextPlacement placement;
  placement.ranges = {{0, 1}, {25, 2}, {50, 3}};  // 10, 20 on 1; 40 on 2; 99 on 3
  const LookupAnswer answer = Split(index, placement, keys, {});
  REQUIRE(answer.instances.size() == 1);
  CHECK(answer.instances[0].blocks.gpu == 2);
  CHECK(answer.blocks_found == 2);
  CHECK(answer.blocks_queried == 4);
}

}  // namespace
}  // namespace kvatlas::server
