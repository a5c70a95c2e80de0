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
}

}  // namespace kvatlas::server
