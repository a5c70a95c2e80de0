#include <doctest/doctest.h>

#include "kvatlas/common/prefix_match.h"

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
