// Listings across groups this server holds no replica of (docs/scaling.md §Replicas on some
// servers): GET /v1/holders, /v1/contexts and /v1/blocks/{key} list every group's part. With
// replicas on some servers a server lists the groups it holds itself and asks a member of
// each other group for that group's part (the same request with `?group=G`, forwarded as
// AnswerFromMember does), then merges them — or fails as a whole with the first part that
// failed, never answering a partial listing.
//
// Runs on HTTP worker threads (it blocks on the members' answers). Stateless.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"
#include "server/api/router.h"
#include "server/api/routes.h"

namespace kvatlas::server {

// What a listing request reads here. `only`: its `?group=G` (one group's part; nullopt:
// every group). `elsewhere`: set when the request is about one group (`?group=G`, or the
// `context_group` the caller names) that this server holds no replica of — the answer of
// one of its members (AnswerFromMember), to return as it is. `parts`: the JSON bodies of the
// other groups' parts of an every-group listing, one per group this server does not hold
// (UnhostedGroups), each its member's answer to the request with `?group=G`.
struct ListingScope {
  std::optional<GroupId> only;
  std::optional<HttpReply> elsewhere;
  std::vector<nlohmann::json> parts;
};
// kInvalidArgument for a `group` that is not 1 to the cluster's group count; a member's
// error answer to a part as a Status of its code and message (never a partial listing);
// ServesReads' refusal.
[[nodiscard]] Result<ListingScope> PrepareListing(const Services& services,
                                                  const RouteRequest& request,
                                                  const Services* context_group);

// Adds `parts`' "holders" to `holders` (a JSON array of GET /v1/holders items): a holder
// (holder_id, dp_rank) listed already gets the part's entries added, per tier too; another
// is appended.
void MergeHolderParts(const std::vector<nlohmann::json>& parts, nlohmann::json* holders);

// Appends each part's array `field` ("contexts", "copies") to `items`.
void AppendListingParts(const std::vector<nlohmann::json>& parts, const char* field,
                        nlohmann::json* items);

}  // namespace kvatlas::server
