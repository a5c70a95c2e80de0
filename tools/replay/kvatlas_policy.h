// The KV-aware routing policies of the replay: both score with kvatlas's cost
// (common/routing.h) through kvatlas::Scorer / the server's route.
//
// - kvatlas:       asks a real kvatlas server (Client::Route) over its live index, which
//                  the simulated instances keep current by publishing every store and
//                  eviction (Client::Ingest, standard block keys of the trace's tokens).
// - kvatlas-local: kvatlas::Scorer over the simulator's own caches (exact matches, no
//                  server): what a scheduler with an in-process index would do.
//
// Not thread-safe: driven by the simulator's thread.
#pragma once

#include <memory>
#include <string>

#include "kvatlas/client/client.h"
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
  // Approximate mode (docs/routing.md §Approximate mode): the instances publish no events
  // (the shared backend still does) and every candidate is flagged predict.
  bool approximate = false;
};

// `client` and `blocks` must outlive the policy.
std::unique_ptr<Policy> MakeKvatlasPolicy(Client* client, const BlockTable* blocks,
                                          KvatlasPolicyOptions options);
// Fails only for invalid routing options.
Result<std::unique_ptr<Policy>> MakeLocalScorerPolicy(const RoutingOptions& routing,
                                                      uint32_t block_tokens);

}  // namespace kvatlas::replay
