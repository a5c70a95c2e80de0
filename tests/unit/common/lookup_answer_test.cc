#include <doctest/doctest.h>

#include <random>
#include <utility>
#include <vector>

#include "common/internal/prefix_match.h"

namespace kvatlas {
namespace {

HolderMatch Match(std::string id, uint32_t rank, uint32_t gpu, uint32_t cpu, uint32_t disk,
                  uint32_t shared = 0, std::vector<std::string> locations = {}) {
  HolderMatch m;
  m.holder = HolderKey{std::move(id), rank};
  m.gpu = gpu;
  m.cpu = cpu;
  m.disk = disk;
  m.shared = shared;
  m.shared_locations = std::move(locations);
  return m;
}

const ContextKey kContext{"default", "m", "", 16, ""};

TEST_SUITE("PrefixWalk") {
  TEST_CASE(
      "PrefixWalk: RepeatDepths(n) and RepeatsLastOnly are n more depths with the copies of "
      "the last one") {
    // Random chains of depths, each a random set of (holder, tier) copies; a depth may
    // repeat the one before. One walk steps through every depth, the other folds each
    // repeat into RepeatDepths, as the lookups do: both must end alike, in every tier.
    std::mt19937 rng(11);
    auto pick = [&](uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng); };
    for (int trial = 0; trial < 2'000; ++trial) {
      CAPTURE(trial);
      using Copies = std::vector<std::pair<uint32_t, Tier>>;
      std::vector<Copies> depths;
      const uint32_t n = 1 + pick(40);
      for (uint32_t d = 0; d < n; ++d) {
        if (d > 0 && pick(3) != 0) {
          depths.push_back(depths.back());
          continue;
        }
        Copies copies;
        const uint32_t k = 1 + pick(3);
        for (uint32_t i = 0; i < k; ++i) {
          copies.emplace_back(pick(4), static_cast<Tier>(pick(kNumTiers)));
        }
        depths.push_back(std::move(copies));
      }
      PrefixWalk stepped;
      PrefixWalk folded;
      PrefixWalk asked;  // as the lookups walk: RepeatsLastOnly for one-copy depths
      stepped.Reset(4);
      folded.Reset(4);
      asked.Reset(4);
      uint32_t repeated = 0;
      for (uint32_t d = 0; d < n; ++d) {
        for (const auto& [holder, tier] : depths[d]) stepped.Add(holder, tier);
        const bool goes_on = stepped.EndDepth();
        const bool one = depths[d].size() == 1;
        if (!one || !asked.RepeatsLastOnly(depths[d][0].first, depths[d][0].second)) {
          for (const auto& [holder, tier] : depths[d]) asked.Add(holder, tier);
          CHECK(asked.EndDepth() == goes_on);
        }
        if (d > 0 && depths[d] == depths[d - 1] && folded.depth() == d - repeated) {
          ++repeated;  // the last depth extended the walk: this one folds
        } else {
          if (repeated > 0) folded.RepeatDepths(std::exchange(repeated, 0));
          if (folded.depth() == d) {
            for (const auto& [holder, tier] : depths[d]) folded.Add(holder, tier);
            (void)folded.EndDepth();
          }
        }
        if (!goes_on) break;
      }
      if (repeated > 0) folded.RepeatDepths(repeated);
      CHECK(folded.depth() == stepped.depth());
      CHECK(asked.depth() == stepped.depth());
      const std::span<const PrefixWalk::Run> a = stepped.SortedRuns();
      for (PrefixWalk* other : {&folded, &asked}) {
        const std::span<const PrefixWalk::Run> b = other->SortedRuns();
        REQUIRE(a.size() == b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          CHECK(a[i].holder == b[i].holder);
          CHECK(a[i].gpu == b[i].gpu);
          CHECK(a[i].cpu == b[i].cpu);
          CHECK(a[i].disk == b[i].disk);
          CHECK(a[i].shared == b[i].shared);
          CHECK(a[i].cpu_only == b[i].cpu_only);
          CHECK(a[i].disk_only == b[i].disk_only);
        }
      }
    }
  }
}

TEST_SUITE("LookupAnswer") {
  TEST_CASE("LookupAnswer: groups ranks into instances with the max over ranks") {
    LookupResult result;
    result.blocks_queried = 8;
    result.blocks_found = 5;
    result.holders = {Match("a", 1, 0, 4, 4), Match("a", 0, 2, 2, 3), Match("b", 0, 5, 5, 5)};
    const LookupAnswer answer = BuildLookupAnswer(result, kContext, "", 9);
    CHECK(answer.revision == 9);
    CHECK(answer.blocks_queried == 8);
    CHECK(answer.blocks_found == 5);
    REQUIRE(answer.instances.size() == 2);
    CHECK(answer.instances[0] == InstanceMatch{"b", {5, 5, 5}, {RankMatch{0, {5, 5, 5}}}});
    CHECK(answer.instances[1] ==
          InstanceMatch{"a", {2, 4, 4}, {RankMatch{0, {2, 2, 3}}, RankMatch{1, {0, 4, 4}}}});
    CHECK(answer.shared.empty());
  }

  TEST_CASE("LookupAnswer: SHARED-tier matches are backends, not instances") {
    LookupResult result;
    result.holders = {Match("pool", 0, 0, 0, 0, 3, {"x", "y", "z"}), Match("c", 0, 1, 1, 1, 2),
                      Match("pool2", 0, 0, 0, 0, 3)};
    const LookupAnswer answer = BuildLookupAnswer(result, kContext, "", 1);
    REQUIRE(answer.instances.size() == 1);
    CHECK(answer.instances[0].instance_id == "c");
    REQUIRE(answer.shared.size() == 3);
    CHECK(answer.shared[0] == SharedMatch{"pool", 0, 3, {"x", "y", "z"}});
    CHECK(answer.shared[1].backend_id == "pool2");
    CHECK(answer.shared[2] == SharedMatch{"c", 0, 2, {}});
  }

  TEST_CASE("LookupAnswer: a named instance is reported alone, with zeros when unmatched") {
    LookupResult result;
    result.holders = {Match("a", 0, 1, 1, 1), Match("pool", 0, 0, 0, 0, 1)};
    const LookupAnswer only_a = BuildLookupAnswer(result, kContext, "a", 1);
    REQUIRE(only_a.instances.size() == 1);
    CHECK(only_a.instances[0].instance_id == "a");
    CHECK(only_a.shared.size() == 1);
    const LookupAnswer missing = BuildLookupAnswer(result, kContext, "zz", 1);
    REQUIRE(missing.instances.size() == 1);
    CHECK(missing.instances[0] == InstanceMatch{"zz", {}, {}});
  }
}

}  // namespace
}  // namespace kvatlas
