// Reads of the map: prefix lookups (every dialect: /v1/lookup, the Conductor /query and
// /query_by_hash, the binary kLookup), read consistency, block location, and the holder and
// context listings. Each read runs under StateMachine::Read and returns the revision it saw;
// callers encode after the lock is released. Safe from any thread.
#pragma once

#include <optional>
#include <vector>

#include "kvatlas/common/lookup.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/index/index.h"
#include "server/service/services.h"

namespace kvatlas::server {

// Hashes the request's tokens (outside any lock, at most options.max_lookup_blocks
// blocks), runs Index::Lookup under the read lock and shapes the result
// (common/internal/prefix_match.h). kInvalidArgument for a block_size of 0, whatever
// decoder let it through (hashing divides by it).
[[nodiscard]] Result<LookupAnswer> LookupPrefix(const Services& services,
                                                const LookupRequest& request);
// As LookupPrefix, and sets `*keys` to the block keys it looked up (the request's, or its
// tokens' hashed; complete blocks, capped): what routes predict and predictions match.
[[nodiscard]] Result<LookupAnswer> LookupPrefix(const Services& services,
                                                const LookupRequest& request,
                                                std::vector<BlockKey>* keys);

// Waits until the request's read consistency holds here, in the group of its context
// (ServicesFor): min_revision applied, or, for a linearizable read, an empty entry committed
// through the group's leader and applied (kNotLeader on followers). When that group turns
// out to have given the context away (placement_service.h GaveAway: a placement this server
// has not applied yet), it waits for the directory to place it and starts again in the group
// it names, so that the read's ServicesFor is that group. kDeadlineExceeded past
// options.apply_timeout. `services`: the server's (every group's), or one group's.
[[nodiscard]] Status AwaitReadConsistency(const Services& services, const LookupRequest& request);
// The kDeadlineExceeded of a read whose revision `wanted` was not applied here in time.
[[nodiscard]] Status RevisionNotApplied(const Services& services, Revision wanted);

// The listings below read every group this server holds a replica of (HostsGroup), or with
// `only` that one group (which it must hold); their revision is group 1's, or `only`'s. A
// server that does not hold every group (replicas on some servers: docs/scaling.md) lists
// the others' parts by asking their members (the REST adapter, query_routes.cc).
//
// The groups this server holds no replica of, ascending (none with every group on every
// server).
[[nodiscard]] std::vector<GroupId> UnhostedGroups(const Services& services);

// Every copy of `key`, in `context` (its group, which this server must hold) or (when null)
// in every context, and the revision.
struct BlockCopies {
  std::vector<BlockLocation> copies;
  Revision revision = 0;
};
[[nodiscard]] BlockCopies LocateBlock(const Services& services, BlockKey key,
                                      const ContextKey* context,
                                      std::optional<GroupId> only = std::nullopt);

// Every holder with its entry counts; with holder leases on, the leader adds each holder's
// seconds since its last activity (idle_seconds[i] for holders[i]).
struct HolderListing {
  std::vector<HolderInfo> holders;
  std::optional<std::vector<double>> idle_seconds;
  Revision revision = 0;
};
[[nodiscard]] HolderListing ListHolders(const Services& services,
                                        std::optional<GroupId> only = std::nullopt);

struct ContextListing {
  std::vector<ContextInfo> contexts;
  Revision revision = 0;
};
[[nodiscard]] ContextListing ListContexts(const Services& services,
                                          std::optional<GroupId> only = std::nullopt);

}  // namespace kvatlas::server
