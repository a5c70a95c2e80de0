// Which server should lead each group of a multi-group server (PreferredLeader).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "server/placement/replica_placement.h"
#include "server/service/group_service.h"

namespace kvatlas::server {
namespace {

ClusterStatus Primary(std::vector<uint64_t> voters, uint64_t leader) {
  ClusterStatus status;
  status.leader_id = leader;
  for (uint64_t id : voters) status.members.push_back(ClusterMember{id, "", "voter", {}, {}, {}});
  return status;
}

}  // namespace

TEST_SUITE("preferred_leader") {
  TEST_CASE("PreferredLeader: group 1's voters as a ring from its leader, spread evenly") {
    // Listed out of order: the ring is by ascending id.
    const ClusterStatus primary = Primary({3, 1, 2}, 2);
    CHECK(PreferredLeader(primary, 1) == 2);  // group 1: its own leader
    CHECK(PreferredLeader(primary, 2) == 3);
    CHECK(PreferredLeader(primary, 3) == 1);
    CHECK(PreferredLeader(primary, 4) == 2);

    // 12 groups over 3 voters: 4 each, whoever leads group 1.
    for (uint64_t leader : {1, 2, 3}) {
      std::map<uint64_t, int> led;
      for (GroupId g = 1; g <= 12; ++g) ++led[PreferredLeader(Primary({1, 2, 3}, leader), g)];
      CHECK(led == std::map<uint64_t, int>{{1, 4}, {2, 4}, {3, 4}});
    }
    // 4 groups over 3 voters: one server leads two, group 1's leader among them.
    std::map<uint64_t, int> led;
    for (GroupId g = 1; g <= 4; ++g) ++led[PreferredLeader(Primary({1, 2, 3}, 3), g)];
    CHECK(led == std::map<uint64_t, int>{{1, 1}, {2, 1}, {3, 2}});
  }

  TEST_CASE("PreferredLeader: non-voters take no group, and no leader means no preference") {
    ClusterStatus primary = Primary({1, 2}, 1);
    primary.members.push_back(ClusterMember{5, "", "standby", {}, {}, {}});
    primary.members.push_back(ClusterMember{6, "", "spare", {}, {}, {}});
    for (GroupId g = 1; g <= 8; ++g) {
      const uint64_t preferred = PreferredLeader(primary, g);
      CHECK((preferred == 1 || preferred == 2));
    }
    CHECK(PreferredLeader(Primary({1, 2, 3}, 0), 2) == 0);  // no leader known
    CHECK(PreferredLeader(Primary({1, 2, 3}, 9), 2) == 0);  // leader not a voter (leaving)
    CHECK(PreferredLeader(Primary({}, 0), 2) == 0);
    CHECK(PreferredLeader(Primary({1, 2, 3}, 1), kNoGroup) == 0);
  }

  TEST_CASE("PreferredLeader: a draining server leads no group, group 1 included") {
    const std::vector<uint64_t> draining{2};
    // Server 2 leads group 1 and drains: the ring starts past it, at 3.
    const ClusterStatus primary = Primary({1, 2, 3}, 2);
    CHECK(PreferredLeader(primary, 1, draining) == 3);
    CHECK(PreferredLeader(primary, 2, draining) == 1);
    CHECK(PreferredLeader(primary, 3, draining) == 3);
    std::map<uint64_t, int> led;
    for (GroupId g = 1; g <= 12; ++g) ++led[PreferredLeader(primary, g, draining)];
    CHECK(led == std::map<uint64_t, int>{{1, 6}, {3, 6}});
    // Once group 1 has moved to 3, the ring is the same: nothing moves twice.
    for (GroupId g = 1; g <= 12; ++g) {
      CHECK(PreferredLeader(Primary({1, 2, 3}, 3), g, draining) ==
            PreferredLeader(primary, g, draining));
    }
    // The ring wraps past the highest id; every voter draining leaves no preference.
    CHECK(PreferredLeader(Primary({1, 2, 3}, 3), 1, std::vector<uint64_t>{3}) == 1);
    CHECK(PreferredLeader(Primary({1, 2}, 1), 2, std::vector<uint64_t>{1, 2}) == 0);
    // A server that drains but does not lead group 1 keeps group 1's leader where it is.
    CHECK(PreferredLeader(Primary({1, 2, 3}, 1), 1, std::vector<uint64_t>{3}) == 1);
  }

  TEST_CASE("PreferredLeaders: with replicas, each group is led by one of its members, spread") {
    const std::vector<uint64_t> servers{1, 2, 3, 4, 5, 6};
    const ClusterStatus primary = Primary(servers, 4);
    const std::vector<uint64_t> leaders = PreferredLeaders(primary, 24, {}, 3);
    REQUIRE(leaders.size() == 24);
    const std::vector<std::vector<uint64_t>> placed = PlaceReplicas(24, servers, 3);
    CHECK(leaders[0] == 4);  // group 1: every server's, the ring's first
    std::map<uint64_t, int> led;
    for (GroupId g = 1; g <= 24; ++g) {
      const uint64_t preferred = leaders[g - 1];
      ++led[preferred];
      if (g == 1) continue;
      const std::vector<uint64_t>& members = placed[g - 1];
      CHECK(std::find(members.begin(), members.end(), preferred) != members.end());
    }
    // No member of a group leads two fewer groups than its leader.
    for (GroupId g = 2; g <= 24; ++g) {
      for (const uint64_t other : placed[g - 1]) {
        CHECK(led[other] + 1 >= led[leaders[g - 1]]);
      }
    }
    // 24 groups over 6 servers: 4 each here.
    for (const uint64_t id : servers) CHECK(led[id] == 4);
    // A draining member leads nothing; a group whose members all drain has no preference.
    for (GroupId g = 2; g <= 24; ++g) {
      const std::vector<uint64_t>& members = placed[g - 1];
      const std::vector<uint64_t> draining{members[0]};
      const uint64_t preferred = PreferredLeaders(primary, 24, draining, 3)[g - 1];
      CHECK(preferred != members[0]);
      CHECK(std::find(members.begin(), members.end(), preferred) != members.end());
      CHECK(PreferredLeaders(primary, 24, members, 3)[g - 1] == 0);
    }
    // replicas 0, or as many as the voters: the ring, as without.
    for (const size_t replicas : {size_t{0}, size_t{6}}) {
      const std::vector<uint64_t> ring = PreferredLeaders(primary, 8, {}, replicas);
      for (GroupId g = 1; g <= 8; ++g) CHECK(ring[g - 1] == PreferredLeader(primary, g));
    }
    CHECK(PreferredLeaders(Primary(servers, 0), 4, {}, 3) == std::vector<uint64_t>(4, 0));
  }
}

}  // namespace kvatlas::server
