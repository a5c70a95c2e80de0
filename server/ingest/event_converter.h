// EventConverter: turns a batch of normalized BlockEvents (events.h) into the CommandBatch
// that the state machine applies (command.h), enforcing the ingest limits. It computes the
// standard local block hashes of token_ids here, in the caller's (network) thread, so the
// applier thread only chains them. Immutable after construction: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvatlas/common/block_hasher.h"
#include "kvatlas/common/events.h"
#include "kvatlas/common/result.h"
#include "server/model/command.h"

namespace kvatlas::server {

struct ConverterOptions {
  // Events in one batch. Bounds the work and the log entry one request can create; a
  // publisher with more splits its batch.
  size_t max_events_per_batch = 10'000;
  // Blocks named by one event (stored or removed). 16k blocks of 16 tokens = 256k tokens,
  // above any context length served today.
  size_t max_blocks_per_event = 16'384;
};

// What a batch converts to, with the counts the REST answer reports.
struct ConvertedBatch {
  CommandBatch batch;
  uint64_t events = 0;
  uint64_t blocks = 0;  // blocks named by stored and removed events
};

class EventConverter {
 public:
  // `hasher` must use the state machine's seed (StateMachine::hasher()); it must outlive
  // the converter.
  EventConverter(const BlockHasher* hasher, ConverterOptions options = {})
      : hasher_(hasher), options_(options) {}

  const ConverterOptions& options() const { return options_; }

  // One command per event, in order:
  //   stored + token_ids  → StoreCommand kLocal: hashes = standard local hashes of the
  //                         tokens, engine_hashes = seq_hashes (when given), parent =
  //                         parent_hash, base_depth = base_block_idx;
  //   stored, hashes only → StoreCommand kSequence: the hashes are the block keys;
  //   removed             → RemoveCommand in the event's tier;
  //   cleared             → ClearCommand of the stream: the holder's entries in the event's
  //                         context and tier, or in every tier when medium is absent.
  // Returns kPayloadTooLarge past a limit and kInvalidArgument for an event that breaks
  // ValidateBlockEvent (messages name "events[i]"). All or nothing: on error no batch.
  [[nodiscard]] Result<ConvertedBatch> Convert(std::span<const BlockEvent> events) const;

 private:
  const BlockHasher* hasher_;
  ConverterOptions options_;
};

}  // namespace kvatlas::server
