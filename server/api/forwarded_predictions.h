// The body of POST /v1/cluster/predict (docs/api.md §Forwarded predictions): a follower's
// round of approximate-mode predictions (PredictCommands, docs/routing.md §Approximate
// mode) sent to the leader, which submits them through its log. Pure functions; safe from
// any thread.
//
//   {"predictions": [{"tenant_id", "model_name", "lora_name", "block_size",
//                     "additional_salt", "instance_id", "dp_rank", "keys": [u64]}]}
//
// No TTL or time is sent: the leader records them with its own predicted_ttl_ms and clock.
#pragma once

#include <string>
#include <string_view>

#include "kvatlas/common/result.h"
#include "server/model/command.h"

namespace kvatlas::server {

// `batch` holds PredictCommands only.
[[nodiscard]] std::string EncodeForwardedPredictions(const CommandBatch& batch);

// The PredictCommands of a body, ttl_ms and accepted_at_ms 0. kInvalidArgument naming the
// field ("body.predictions[2].block_size: ..."), kPayloadTooLarge past kMaxForwardedPredictions
// predictions or kMaxForwardedPredictionKeys keys in all (prediction_recorder.h).
[[nodiscard]] Result<CommandBatch> DecodeForwardedPredictions(std::string_view body);

}  // namespace kvatlas::server
