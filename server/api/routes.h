// The REST routes of kvatlas (docs/api.md), grouped by concern, each group in its own .cc:
// ingest (POST /v1/events), queries (/v1/lookup, /v1/blocks, holders, contexts, stats),
// the Mooncake Conductor dialect (/query, /query_by_hash), operations (/healthz, /readyz,
// /metrics), registrations, the cluster, routing, the change feed, leases, backups and the
// dashboard (/). A route decodes its request (JSON body, path and query parameters), asks
// the service layer (server/service/) and encodes the answer; nothing is decided here.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string_view>

#include "kvatlas/common/result.h"
#include "server/api/router.h"
#include "server/service/services.h"

namespace kvatlas::server {

// Adds every route to `router`. `services` must outlive the router.
void AddAllRoutes(const Services* services, Router* router);

void AddIngestRoutes(const Services* services, Router* router);
void AddQueryRoutes(const Services* services, Router* router);
void AddConductorRoutes(const Services* services, Router* router);
void AddOpsRoutes(const Services* services, Router* router);
void AddRegistrationRoutes(const Services* services, Router* router);
void AddClusterRoutes(const Services* services, Router* router);
void AddRoutingRoutes(const Services* services, Router* router);  // routing_routes.cc
void AddWatchRoutes(const Services* services, Router* router);    // watch_routes.cc
void AddLeaseRoutes(const Services* services, Router* router);    // lease_routes.cc
void AddLoadRoutes(const Services* services, Router* router);     // load_routes.cc
void AddDashboardRoutes(Router* router);                          // dashboard_routes.cc
void AddAdminRoutes(const Services* services, Router* router);    // admin_routes.cc

// The request body as a JSON object, parsed by ParseJsonBody (json_codec.h: depth limit,
// no duplicate keys); kInvalidArgument ("body: ...") when it is refused there or is not an
// object. For the routes that read their fields directly.
[[nodiscard]] Result<nlohmann::json> ParseJsonObjectBody(const RouteRequest& request);

// `text` as a decimal integer, wholly (no sign, spaces or other characters); nullopt
// otherwise, or past 2^64 - 1.
[[nodiscard]] std::optional<uint64_t> ParseDecimal(std::string_view text);

// The group the query's `group` parameter names, 1 to this server's group count: that
// group's copy of the Services (the server's own on a single-group server). kInvalidArgument
// naming the range and what was sent otherwise.
[[nodiscard]] Result<const Services*> GroupOfQuery(const Services& services,
                                                   const RouteRequest& request);

}  // namespace kvatlas::server
