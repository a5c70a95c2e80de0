// EngineEventMapper: turns a decoded engine batch (engine_event.h) from one publisher stream
// into the commands the state machine applies, giving the events the identity of the stream
// (its registration): which holder they update and which context their blocks belong to.
//
// Keys (docs/engine-events.md §Keys): stores with tokens are indexed under the standard
// hashes of their tokens (KeyMode::kLocal) with the engine hashes as aliases, whatever hash
// function the engine uses; stores without tokens (offloads) and removals name blocks by
// engine hash, resolved through the alias (KeyMode::kAlias / RemoveCommand).
//
// Thread-compatible: the mapper is immutable; each stream's StreamMapState belongs to the
// one thread that handles that stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/block_hasher.h"
#include "kvatlas/common/types.h"
#include "server/ingest/engine_event.h"
#include "server/model/command.h"

namespace kvatlas::server {

// Who a stream's events are about.
struct StreamIdentity {
  // tenant, model, default LoRA, block_size and additional salt of the registration.
  ContextKey context;
  HolderKey holder;
  // What the stream's stores mean (docs/engine-events.md §Report modes).
  EngineType engine = EngineType::kVllm;
  ReportMode report_mode = ReportMode::kIncremental;
};

// What the mapper remembers of one stream between batches. Engine events name a block's
// LoRA on every store but its cache salt only on the block at token 0, and never name
// either on removals or offloads; this state lets later events find their context.
struct StreamMapState {
  // Contexts this stream stored into, in first-use order (bounded by kMaxContexts).
  std::vector<ContextKey> contexts;
  // Engine hash → index in `contexts`, for blocks of salted contexts only (unsalted blocks
  // of the registration's context need no memory). Bounded: cleared when full.
  std::unordered_map<uint64_t, uint32_t> salted_blocks;

  static constexpr size_t kMaxContexts = 64;
  static constexpr size_t kMaxSaltedBlocks = 1 << 18;
};

struct MappedBatch {
  CommandBatch batch;
  uint64_t stored = 0;  // events mapped, by kind
  uint64_t removed = 0;
  uint64_t cleared = 0;
  uint64_t blocks = 0;  // blocks named by mapped stored and removed events
  // Events not mapped, by reason (each is counted, logged by the caller, never fatal).
  uint64_t skipped_not_whole_blocks = 0;  // token_ids do not match block_hashes × block_size
  uint64_t skipped_sliding_or_mamba = 0;  // a KV-cache group that is not full attention
  uint64_t skipped_too_large = 0;         // more blocks than max_blocks_per_event
  uint64_t skipped_empty = 0;             // no block hashes
};

struct MapperOptions {
  size_t max_blocks_per_event = 16'384;
};

class EngineEventMapper {
 public:
  // `hasher` must be the state machine's (StateMachine::hasher()) and outlive the mapper.
  explicit EngineEventMapper(const BlockHasher* hasher, MapperOptions options = {})
      : hasher_(hasher), options_(options) {}

  // Maps every event of `batch` in order. Updates `state`. Never fails: events that cannot
  // be mapped are counted in the result and left out.
  [[nodiscard]] MappedBatch Map(const EngineBatch& batch, const StreamIdentity& identity,
                                StreamMapState* state) const;

 private:
  void MapStored(const EngineEvent& event, const StreamIdentity& identity, StreamMapState* state,
                 MappedBatch* out) const;

  const BlockHasher* hasher_;
  MapperOptions options_;
};

}  // namespace kvatlas::server
