// Which servers hold each group's replicas (PlaceReplicas): rendezvous hashing, balanced.
#include "server/placement/replica_placement.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "kvatlas/common/placement.h"

namespace kvatlas::server {
namespace {

std::vector<uint64_t> Servers(uint64_t n) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= n; ++id) ids.push_back(id);
  return ids;
}

std::map<uint64_t, size_t> Held(const std::vector<std::vector<uint64_t>>& members) {
  std::map<uint64_t, size_t> held;
  for (size_t g = 2; g <= members.size(); ++g) {
    for (const uint64_t id : members[g - 1]) ++held[id];
  }
  return held;
}

// Replicas that are on a server in `after` and were not in `before`.
size_t Moved(const std::vector<std::vector<uint64_t>>& before,
             const std::vector<std::vector<uint64_t>>& after) {
  size_t moved = 0;
  for (size_t g = 2; g <= before.size(); ++g) {
    for (const uint64_t id : after[g - 1]) {
      moved += std::find(before[g - 1].begin(), before[g - 1].end(), id) == before[g - 1].end();
    }
  }
  return moved;
}

}  // namespace

TEST_SUITE("replica_placement") {
  TEST_CASE("PlaceReplicas: group 1 and replicas 0 on every server") {
    const std::vector<uint64_t> six = {6, 2, 5, 1, 4, 3};
    for (const size_t replicas : {size_t{0}, size_t{6}, size_t{9}}) {
      const auto members = PlaceReplicas(4, six, replicas);
      REQUIRE(members.size() == 4);
      for (const auto& group : members) CHECK(group == Servers(6));
    }
    const auto members = PlaceReplicas(4, six, 3);
    CHECK(members[0] == Servers(6));
    CHECK(PlaceReplicas(0, six, 3).empty());
  }

  TEST_CASE("PlaceReplicas: each group on its rendezvous choice, then balanced within one") {
    for (const size_t groups : {6, 12, 24, 64}) {
      for (const uint64_t servers : {4, 5, 6, 9}) {
        CAPTURE(groups);
        CAPTURE(servers);
        const auto members = PlaceReplicas(groups, Servers(servers), 3);
        size_t kept = 0;
        for (size_t g = 2; g <= groups; ++g) {
          const std::vector<uint64_t>& in = members[g - 1];
          REQUIRE(in.size() == 3);
          CHECK(std::is_sorted(in.begin(), in.end()));
          CHECK(std::adjacent_find(in.begin(), in.end()) == in.end());
          const std::vector<uint64_t> chosen =
              ChooseMembers(static_cast<GroupId>(g), Servers(servers), 3);
          for (const uint64_t id : in) {
            kept += std::find(chosen.begin(), chosen.end(), id) != chosen.end();
          }
        }
        // Most replicas stay where rendezvous hashing put them.
        CHECK(kept * 10 >= (groups - 1) * 3 * 7);
        const std::map<uint64_t, size_t> held = Held(members);
        REQUIRE(held.size() == servers);
        size_t most = 0;
        size_t fewest = groups;
        for (const auto& [id, count] : held) {
          most = std::max(most, count);
          fewest = std::min(fewest, count);
        }
        CHECK(most <= fewest + 1);
        // Deterministic, whatever order the servers are listed in.
        std::vector<uint64_t> reversed = Servers(servers);
        std::reverse(reversed.begin(), reversed.end());
        CHECK(PlaceReplicas(groups, reversed, 3) == members);
      }
    }
  }

  TEST_CASE("PlaceReplicas: a server added or removed moves about its share") {
    for (const size_t groups : {12, 24, 64}) {
      for (const uint64_t servers : {5, 6, 9}) {
        CAPTURE(groups);
        CAPTURE(servers);
        const auto before = PlaceReplicas(groups, Servers(servers), 3);
        const auto added = PlaceReplicas(groups, Servers(servers + 1), 3);
        // Its share: (groups - 1) * 3 / (servers + 1) replicas; at most 1.5 times that move.
        const size_t share = (groups - 1) * 3 / (servers + 1);
        CHECK(Moved(before, added) <= share * 3 / 2 + 1);
        CHECK(Held(added).at(servers + 1) >= share);
        std::vector<uint64_t> without_2 = Servers(servers);
        without_2.erase(without_2.begin() + 1);
        const auto removed = PlaceReplicas(groups, without_2, 3);
        CHECK(Moved(before, removed) <= Held(before).at(2) * 3 / 2 + 1);
        for (const auto& group : removed) {
          CHECK(std::find(group.begin(), group.end(), 2) == group.end());
        }
      }
    }
  }
}

}  // namespace kvatlas::server
