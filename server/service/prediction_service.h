// Approximate mode (docs/routing.md §Approximate mode): routes to candidates that publish
// no KV events record the request's blocks as predicted there (PredictionRecorder, then a
// PredictCommand through the log), and routes and Conductor queries read the predictions
// back (StateMachine::predicted). Safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/routing.h"
#include "server/service/services.h"

namespace kvatlas::server {

// Each candidate's predicted prefix of `keys` in `context` (its rank's, or its instance's
// best rank's when it names none), parallel to `candidates`.
[[nodiscard]] std::vector<uint32_t> PredictedPrefixes(const Services& services,
                                                      const ContextKey& context,
                                                      std::span<const BlockKey> keys,
                                                      std::span<const RouteCandidate> candidates);

// Whether a route that picked `picked` records its blocks as predicted there: the
// candidate is flagged `predict`, or its holder ({instance_id, dp_rank or 0}) is registered
// for `context`'s tenant without events, or with events but none applied within
// kPredictionLiveWindow (its stream is down or idle).
[[nodiscard]] bool PredictsFor(const Services& services, const ContextKey& context,
                               const RouteCandidate& picked);

// Queues `keys` as predicted on `picked` when PredictsFor and the server records
// predictions; nothing otherwise. Never blocks.
void RecordPrediction(const Services& services, const ContextKey& context,
                      const RouteCandidate& picked, std::vector<BlockKey> keys);

// A router's own decision (kPredict, POST /v1/predictions, docs/routing.md §Approximate
// mode): queues the first max_lookup_blocks of `keys` as predicted on `holder`, whatever it
// publishes — the caller sent them there. Through the PredictionRecorder like a route's
// prediction: no log entry of its own. Returns the keys queued. kInvalidArgument for names
// past the configured limits, kFailedPrecondition when this server records no predictions
// (predicted_max_entries 0), kResourceExhausted when the recorder's queue is full.
[[nodiscard]] Result<size_t> RecordDecision(const Services& services, const ContextKey& context,
                                            const HolderKey& holder, std::vector<BlockKey> keys);

// Every instance rank with a predicted prefix of `keys` in `context` (Conductor answers).
[[nodiscard]] std::vector<ConductorPrediction> PredictionsOf(const Services& services,
                                                             const ContextKey& context,
                                                             std::span<const BlockKey> keys);

}  // namespace kvatlas::server
