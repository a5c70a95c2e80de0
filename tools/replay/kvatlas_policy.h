// The KV-aware routing policies of the replay: both score with kvatlas's cost
// (common/routing.h) through kvatlas::Scorer / the server's route.
//
// - kvatlas:       asks a real kvatlas server (Client::Route) over its live index, which
//                  the simulated instances keep current by publishing every store and
//                  eviction (Client::Ingest, standard block keys of the trace's tokens).
//                  With router replicas (SimOptions::routers) each one routes with the
//                  load of its own requests; with shared_load each replica reports its
//                  in-flight table through a real kvatlas::LoadReporter and routes giving
//                  no load, so that the server scores with the fleet's sum (below).
// - kvatlas-local: kvatlas::Scorer over the simulator's own caches (exact matches, no
//                  server): what a scheduler with an in-process index would do.
//
// Not thread-safe: driven by the simulator's thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kvatlas/client/client.h"
#include "kvatlas/common/fleet_load.h"
#include "kvatlas/common/routing.h"
#include "tools/replay/simulator.h"
#include "tools/replay/trace.h"

namespace kvatlas::replay {

struct KvatlasPolicyOptions {
  RoutingOptions routing;
  uint32_t block_tokens = 512;
  // The context the instances publish in and the router queries (one per policy run, so
  // that runs against one server do not see each other's blocks).
  ContextKey context;
  // Query with the prompt's tokens (the server hashes them) or with its block keys.
  bool by_hash = false;
  // Holder id of the shared storage backend's copies.
  std::string shared_backend = "shared-store";

  // Shared load (docs/routing.md §Shared load) of `routers` replicas, one LoadReporter each
  // (router ids "<context model>-r<i>"). The simulated clock and the reporters' real one
  // are decoupled: a replica reports when its table changed and at least
  // `load_interval_ms` of *simulated* time has passed since its last report (Flush, at the
  // simulated time of the next request, before its route), so the staleness the routes
  // see is the one a real fleet with that report interval would see, however fast the
  // replay runs. The leases are real time: `load_ttl_ms` (the maximum by default) so that
  // no report runs out during a replay; each reporter's own background keep-alive comes
  // every ttl / 3 and only resends the same summary.
  bool shared_load = false;
  size_t routers = 1;
  double load_interval_ms = 50;
  uint32_t load_ttl_ms = kMaxLoadTtlMs;
  // Approximate mode (docs/routing.md §Approximate mode): the instances publish no events
  // (the shared backend still does) and every candidate is flagged predict.
  bool approximate = false;
};

// `client` and `blocks` must outlive the policy. Fails only for bad shared-load options.
Result<std::unique_ptr<Policy>> MakeKvatlasPolicy(Client* client, const BlockTable* blocks,
                                                  KvatlasPolicyOptions options);
// Fails only for invalid routing options.
Result<std::unique_ptr<Policy>> MakeLocalScorerPolicy(const RoutingOptions& routing,
                                                      uint32_t block_tokens);

}  // namespace kvatlas::replay
