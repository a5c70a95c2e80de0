#include "server/ingest/event_converter.h"

#include <string>
#include <utility>

namespace kvatlas::server {
namespace {

StoreCommand ToStore(const BlockEvent& event, const BlockHasher& hasher) {
  StoreCommand store;
  store.context = event.context;
  store.holder = event.holder;
  store.tier = event.tier;
  store.parent = event.parent_hash;
  store.base_depth = event.base_block_idx;
  store.locations = event.locations;
  store.report = event.origin == BlockOrigin::kReused;
  if (event.token_ids && !event.token_ids->empty()) {
    // The publisher's hashes may not be standard (vLLM sha256, SGLang): index by the
    // standard hash of the tokens and keep the publisher's as aliases for removals. Only
    // local hashes can be computed here; the parent's block key is known to the state
    // machine alone, so chaining happens at apply time (KeyMode::kLocal).
    store.mode = KeyMode::kLocal;
    store.hashes = hasher.LocalHashes(*event.token_ids, event.context.block_size);
    store.engine_hashes = event.seq_hashes;
  } else {
    store.mode = KeyMode::kSequence;
    store.hashes = event.seq_hashes;
  }
  return store;
}

Command ToCommand(const BlockEvent& event, const BlockHasher& hasher) {
  switch (event.type) {
    case EventType::kStored:
      return ToStore(event, hasher);
    case EventType::kRemoved:
      return RemoveCommand{event.context, event.holder, event.tier, event.seq_hashes};
    case EventType::kCleared:
      // An RFC stream is (context, backend, medium, dp_rank): cleared drops exactly it.
      return ClearCommand{
          event.holder,
          event.clear_all_contexts ? std::nullopt : std::optional<ContextKey>(event.context),
          event.medium ? std::optional<Tier>(event.tier) : std::nullopt};
  }
  return ClearCommand{event.holder, event.context, std::nullopt};  // unreachable
}

}  // namespace

Result<ConvertedBatch> EventConverter::Convert(std::span<const BlockEvent> events) const {
  if (events.size() > options_.max_events_per_batch) {
    return Status::PayloadTooLarge(
        "events: the batch has " + std::to_string(events.size()) + " events; the limit is " +
        std::to_string(options_.max_events_per_batch) + " (max_events_per_batch): split the batch");
  }
  // Validate everything before converting anything: a batch is rejected whole.
  uint64_t blocks = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const std::string path = "events[" + std::to_string(i) + "]";
    KVATLAS_RETURN_IF_ERROR(ValidateBlockEvent(events[i], path));
    const size_t count = events[i].BlockCount();
    if (count > options_.max_blocks_per_event) {
      return Status::PayloadTooLarge(
          path + ": the event names " + std::to_string(count) + " blocks; the limit is " +
          std::to_string(options_.max_blocks_per_event) + " (max_blocks_per_event)");
    }
    blocks += count;
  }
  ConvertedBatch out;
  out.events = events.size();
  out.blocks = blocks;
  out.batch.commands.reserve(events.size());
  for (const BlockEvent& event : events) out.batch.commands.push_back(ToCommand(event, *hasher_));
  return out;
}

}  // namespace kvatlas::server
