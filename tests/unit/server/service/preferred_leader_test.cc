// Which server should lead each group of a multi-group server (PreferredLeader).
#include <doctest/doctest.h>

#include <map>
#include <vector>

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
}

}  // namespace kvatlas::server
