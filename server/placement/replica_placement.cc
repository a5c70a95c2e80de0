#include "server/placement/replica_placement.h"

#include <xxhash.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "common/internal/bytes.h"
#include "kvatlas/common/placement.h"

namespace kvatlas::server {
namespace {

// ChooseMembers' rendezvous score of `server` for `group`: XXH3-64 of (u32 group, u64 id),
// little-endian.
uint64_t Score(GroupId group, uint64_t server) {
  std::string bytes;
  PutFixed32(&bytes, group);
  PutFixed64(&bytes, server);
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace

std::vector<std::vector<uint64_t>> PlaceReplicas(size_t groups, std::span<const uint64_t> servers,
                                                 size_t replicas) {
  std::vector<uint64_t> all(servers.begin(), servers.end());
  std::sort(all.begin(), all.end());
  std::vector<std::vector<uint64_t>> members(groups, all);
  if (replicas == 0 || replicas >= all.size()) return members;
  std::map<uint64_t, size_t> held;
  for (size_t g = 2; g <= groups; ++g) {
    members[g - 1] = ChooseMembers(static_cast<GroupId>(g), all, replicas);
    for (const uint64_t id : members[g - 1]) ++held[id];
  }
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t g = 2; g <= groups; ++g) {
      const auto group = static_cast<GroupId>(g);
      std::vector<uint64_t>& in = members[g - 1];
      // The member to give a replica up: most held, least preferred, highest id.
      const auto give = std::max_element(in.begin(), in.end(), [&](uint64_t a, uint64_t b) {
        return std::make_tuple(held[a], ~Score(group, a), a) <
               std::make_tuple(held[b], ~Score(group, b), b);
      });
      // The server to take it: fewest held, most preferred, lowest id.
      uint64_t take = 0;
      for (const uint64_t id : all) {
        if (std::binary_search(in.begin(), in.end(), id)) continue;
        if (take == 0 || std::make_tuple(held[id], ~Score(group, id), id) <
                             std::make_tuple(held[take], ~Score(group, take), take)) {
          take = id;
        }
      }
      if (take == 0 || held[*give] < held[take] + 2) continue;
      --held[*give];
      ++held[take];
      *give = take;
      std::sort(in.begin(), in.end());
      moved = true;
    }
  }
  return members;
}

}  // namespace kvatlas::server
