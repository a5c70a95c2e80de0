// DecodeEngineBatch: decodes the msgpack payload of one engine KV-event message (the third
// ZMQ frame of vLLM, SGLang or the Mooncake store master) into an EngineBatch
// (engine_event.h). The accepted shapes, hash folding, the cache-salt / multimodal
// heuristic and what is skipped or counted are specified in docs/engine-events.md
// §Decoding. A pure function: safe from any thread.
#pragma once

#include <cstdint>
#include <span>

#include "kvatlas/common/result.h"
#include "server/ingest/engine_event.h"

namespace kvatlas::server {

// Nesting levels a payload may use (the deepest legitimate shape, a vLLM multimodal extra
// key `batch[1][i][8][b][k]`, is 6 levels deep). Deeper input is rejected before any
// msgpack object is built, so hostile input cannot exhaust the stack or the heap.
inline constexpr uint32_t kMaxEngineBatchDepth = 16;

// Decodes one payload. Never throws and never crashes, whatever the input.
//   kInvalidArgument — the bytes are not one complete msgpack value (empty, truncated,
//     invalid, trailing bytes, nested deeper than kMaxEngineBatchDepth), or the value is
//     not a batch (an array [ts, events] / [ts, events, dp_rank] or a map with "events");
//     the message names the problem and its byte offset or path, e.g.
//     "batch[1]: expected an array of events, got str".
// Events that have an unknown tag or are malformed do not fail the batch: they are
// skipped and counted in EngineBatch::skipped_events; unknown fields are counted in
// EngineBatch::unknown_fields.
[[nodiscard]] Result<EngineBatch> DecodeEngineBatch(std::span<const uint8_t> payload);

}  // namespace kvatlas::server
