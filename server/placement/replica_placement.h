// Which servers hold each group's replicas when every group has `replicas` of them (docs/
// scaling.md §Replicas on some servers). Each group first takes the servers rendezvous
// hashing picks for it (ChooseMembers, placement.h); then, while some group has a member
// that holds two replicas more than a server outside the group, that member's replica of
// the group goes to that server. So every server holds the same number of replicas, one
// more for some, and adding or removing a server moves about the replicas it gains or loses
// (with 12 to 64 groups on 5 to 10 servers, 1.0 to 1.5 times as many), none elsewhere
// beyond that. Deterministic: every server computes it alike from group 1's voters.
//
// Plain functions: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvatlas::server {

// The members of groups 1 to `groups` (index g - 1), each ascending, over `servers` (ids,
// any order, no repeats): group 1 on every server; every group on every server when
// `replicas` is 0 or at least the servers' count. Otherwise, after ChooseMembers, groups
// 2, 3, … are visited in turn, again until a visit of all moves nothing: a group's member
// with the most replicas (the lowest rendezvous score among equals, then the highest id)
// hands its replica to the server outside the group with the fewest (the highest score,
// then the lowest id) when it holds at least two more. Each hand-over lowers the sum of the
// squared counts, so this ends.
[[nodiscard]] std::vector<std::vector<uint64_t>> PlaceReplicas(size_t groups,
                                                               std::span<const uint64_t> servers,
                                                               size_t replicas);

}  // namespace kvatlas::server
