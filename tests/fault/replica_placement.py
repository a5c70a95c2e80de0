"""PlaceReplicas (server/placement/replica_placement.h) as the servers compute it: which
servers hold each group's replicas with `replicas` set (docs/scaling.md §Replicas on some
servers). For the tests and benchmarks that check or use the placement."""

import struct


def score(group, server):
    """The rendezvous score (ChooseMembers, placement.h): XXH3-64 of (u32 group, u64 id),
    little-endian."""
    import xxhash  # python3-xxhash
    return xxhash.xxh3_64_intdigest(struct.pack("<IQ", group, server))


def place_replicas(groups, servers, replicas):
    """PlaceReplicas (server/placement/replica_placement.h): {group: members ascending}."""
    ids = sorted(servers)
    if replicas == 0 or replicas >= len(ids):
        return {gid: ids for gid in range(1, groups + 1)}
    members = {1: ids}
    held = {i: 0 for i in ids}
    for gid in range(2, groups + 1):
        members[gid] = sorted(sorted(ids, key=lambda i: (-score(gid, i), i))[:replicas])
        for i in members[gid]:
            held[i] += 1
    top = (1 << 64) - 1
    moved = True
    while moved:
        moved = False
        for gid in range(2, groups + 1):
            inside = members[gid]
            give = max(inside, key=lambda i: (held[i], top - score(gid, i), i))
            outside = [i for i in ids if i not in inside]
            take = min(outside, key=lambda i: (held[i], top - score(gid, i), i))
            if held[give] < held[take] + 2:
                continue
            held[give] -= 1
            held[take] += 1
            members[gid] = sorted([i for i in inside if i != give] + [take])
            moved = True
    return members
