// The REST routes of kvatlas (docs/api.md), grouped by concern, each group in its own .cc:
// ingest (POST /v1/events), queries (/v1/lookup, /v1/blocks, holders, contexts, stats),
// the Mooncake Conductor dialect (/query, /query_by_hash) and operations (/healthz,
// /readyz, /metrics). Handlers only Submit() writes to the Applier and read state under
// StateMachine::Read, so no network thread ever blocks the state machine.
#pragma once

#include <chrono>
#include <span>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/routing.h"
#include "server/api/metrics.h"
#include "server/api/router.h"
#include "server/feed/change_feed.h"
#include "server/ingest/event_converter.h"
#include "server/state/applier.h"
#include "server/state/lease_tracker.h"
#include "server/state/replicated_log.h"
#include "server/state/state_machine.h"
#include "server/storage/storage.h"
#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {

struct ApiOptions {
  ConverterOptions converter;
  // How long POST /v1/events waits for its batch to be applied before answering
  // deadline_exceeded (the batch may still be applied later).
  std::chrono::milliseconds apply_timeout{10'000};
  // The index's IndexOptions::max_lookup_blocks: tokens past that many blocks are not even
  // hashed, so a huge query costs no more than a capped one.
  uint32_t max_lookup_blocks = IndexOptions{}.max_lookup_blocks;
  // GET /v1/watch streams open at once (each holds an HTTP worker thread).
  size_t max_watch_streams = 4;
  // Copies GET /v1/snapshot answers at most (payload_too_large past it).
  size_t max_snapshot_copies = 4'000'000;
};

// What the handlers use. Pointers are not owned and must outlive the HTTP server.
struct ApiServices {
  StateMachine* machine = nullptr;
  Applier* applier = nullptr;
  const Storage* storage = nullptr;  // null for an in-memory server
  Metrics* metrics = nullptr;
  ZmqIngest* zmq = nullptr;        // null when ZMQ ingest is not running (tests)
  ReplicatedLog* log = nullptr;    // null without replication (tests)
  ChangeFeed* feed = nullptr;      // null without a change feed (tests)
  LeaseTracker* leases = nullptr;  // null = holder leases off (tests)
  uint64_t server_id = 1;
  // This server's addresses as it announces them (GET /v1/cluster, AnnounceCommand): the
  // bound ones, with a wildcard host replaced by the raft address's host.
  std::string http_address;
  std::string rpc_address;
  ApiOptions options;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

// Adds every route to `router`. `api` must outlive the router.
void AddAllRoutes(const ApiServices* api, Router* router);

void AddIngestRoutes(const ApiServices* api, Router* router);
void AddQueryRoutes(const ApiServices* api, Router* router);
void AddConductorRoutes(const ApiServices* api, Router* router);
void AddOpsRoutes(const ApiServices* api, Router* router);
void AddRegistrationRoutes(const ApiServices* api, Router* router);
void AddClusterRoutes(const ApiServices* api, Router* router);
void AddRouteRoutes(const ApiServices* api, Router* router);  // route_routes.cc
void AddWatchRoutes(const ApiServices* api, Router* router);  // watch_routes.cc
void AddLeaseRoutes(const ApiServices* api, Router* router);  // lease_routes.cc

// The request body as a JSON object; kInvalidArgument ("body: ...") when it is not valid
// JSON or not an object. For the routes that read their fields directly.
[[nodiscard]] Result<nlohmann::json> ParseJsonObjectBody(const RouteRequest& request);

// Submits `batch` to the applier and waits up to options.apply_timeout for its revision.
// Shared by the write routes.
[[nodiscard]] Result<Revision> SubmitAndWait(const ApiServices& api, CommandBatch batch);

// Index stats and the revision they reflect (read together under the read lock), apply
// counters, storage size, applier health and uptime: /v1/stats and /metrics.
[[nodiscard]] StateGauges ReadGauges(const ApiServices& api);

// Waits until the request's read consistency holds here: min_revision applied, or, for a
// linearizable read, an empty entry committed through the leader and applied (kNotLeader
// on followers). kDeadlineExceeded past options.apply_timeout.
[[nodiscard]] Status AwaitReadConsistency(const ApiServices& api, const LookupRequest& request);

// Hashes the request's tokens (outside any lock), runs Index::Lookup under the read lock
// and shapes the result (lookup_answer.h). Shared by /v1/lookup and the Conductor routes.
[[nodiscard]] LookupAnswer RunLookup(const ApiServices& api, const LookupRequest& request);

// A routing decision (docs/routing.md): RunLookup over every instance, then the candidates
// scored with the common cost (routing.h). Shared by POST /v1/route and the binary kRoute.
[[nodiscard]] Result<RoutingAnswer> RunRoute(const ApiServices& api, const RoutingRequest& request);

// Accepted events whose medium is not a known name were indexed in the nearest tier: counts
// them in the metrics and logs each new medium string once. Shared by REST and RPC ingest.
void NoteUnknownMedia(const ApiServices& api, std::span<const BlockEvent> events);

// kDeadlineExceeded for a write batch not applied within options.apply_timeout (it may
// still be applied later). Shared by REST and RPC ingest.
[[nodiscard]] Status ApplyDeadlineExceeded(const ApiServices& api);

}  // namespace kvatlas::server
