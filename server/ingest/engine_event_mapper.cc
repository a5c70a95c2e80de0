#include "server/ingest/engine_event_mapper.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kvatlas::server {
namespace {

// KV-cache groups whose blocks hold the whole prefix: a prefix match on them is a real hit.
// Sliding-window, Mamba and local-attention groups keep only part of it (llm-d skips them
// the same way). An absent kind is a dense model.
bool IsFullAttention(const std::optional<std::string>& kind) {
  if (!kind) return true;
  static constexpr std::string_view kFull[] = {"full_attention", "mla_attention",
                                               "sink_full_attention"};
  return std::find(std::begin(kFull), std::end(kFull), *kind) != std::end(kFull);
}

Tier TierOf(const EngineEvent& event) {
  return event.medium ? TierFromMedium(*event.medium) : Tier::kGpu;
}

// Whether a store reports blocks the holder may already hold rather than announcing new
// copies (StoreCommand::report; docs/engine-events.md §Report modes). The event's own
// origin decides when it has one. SGLang's radix cache publishes a page once per tier until
// it removes it, so a repeat can only be a re-report. vLLM caches duplicate physical blocks
// under one hash, each stored and removed on its own: copies, except in full report mode,
// where a store without a parent — the only shape of a re-sent prefix hit — is a report.
// Stores that continue a parent, offload copies (no tokens) and Mooncake objects are copies.
bool IsReport(const EngineEvent& event, const StreamIdentity& identity) {
  if (event.origin) return *event.origin == BlockOrigin::kReused;
  if (event.standard_hashes) return false;
  switch (identity.engine) {
    case EngineType::kSglang:
      return true;
    case EngineType::kMooncake:
      return false;
    case EngineType::kVllm:
      return identity.report_mode == ReportMode::kFull && !event.token_ids.empty() &&
             !event.parent_hash;
  }
  return false;
}

// The index of `context` in the stream's contexts, adding it when there is room; nullopt
// when the stream already has kMaxContexts others (the event still applies, but later
// removals that do not name a context will not look there).
std::optional<uint32_t> Remember(const ContextKey& context, StreamMapState* state) {
  auto it = std::find(state->contexts.begin(), state->contexts.end(), context);
  if (it != state->contexts.end()) return static_cast<uint32_t>(it - state->contexts.begin());
  if (state->contexts.size() >= StreamMapState::kMaxContexts) return std::nullopt;
  state->contexts.push_back(context);
  return static_cast<uint32_t>(state->contexts.size() - 1);
}

// Splits hashes of an event that names no context (removal, offload) by the context they
// may be in: a block of a salted context is where the stream stored it; any other block
// may be in any unsalted context of the stream (unknown hashes are no-ops there).
std::vector<std::pair<ContextKey, std::vector<uint64_t>>> BucketByContext(
    const std::vector<uint64_t>& hashes, const StreamIdentity& identity,
    const StreamMapState& state) {
  std::vector<std::pair<ContextKey, std::vector<uint64_t>>> buckets;
  std::vector<uint64_t> unsalted;
  std::vector<std::pair<uint32_t, uint64_t>> salted;
  for (uint64_t hash : hashes) {
    auto it = state.salted_blocks.find(hash);
    if (it != state.salted_blocks.end() && it->second < state.contexts.size()) {
      salted.emplace_back(it->second, hash);
    } else {
      unsalted.push_back(hash);
    }
  }
  if (!unsalted.empty()) {
    bool any = false;
    for (const ContextKey& context : state.contexts) {
      if (!context.salt.empty()) continue;
      buckets.emplace_back(context, unsalted);
      any = true;
    }
    if (!any) buckets.emplace_back(identity.context, std::move(unsalted));
  }
  std::sort(salted.begin(), salted.end());
  for (size_t i = 0; i < salted.size();) {
    const uint32_t index = salted[i].first;
    std::vector<uint64_t> mine;
    for (; i < salted.size() && salted[i].first == index; ++i) mine.push_back(salted[i].second);
    buckets.emplace_back(state.contexts[index], std::move(mine));
  }
  return buckets;
}

}  // namespace

MappedBatch EngineEventMapper::Map(const EngineBatch& batch, const StreamIdentity& identity,
                                   StreamMapState* state) const {
  MappedBatch out;
  out.batch.commands.reserve(batch.events.size());
  for (const EngineEvent& event : batch.events) {
    switch (event.kind) {
      case EngineEventKind::kStored:
        MapStored(event, identity, state, &out);
        break;
      case EngineEventKind::kRemoved: {
        if (event.block_hashes.empty()) {
          ++out.skipped_empty;
          break;
        }
        if (event.block_hashes.size() > options_.max_blocks_per_event) {
          ++out.skipped_too_large;
          break;
        }
        // A removal names neither LoRA nor salt.
        for (auto& [context, hashes] : BucketByContext(event.block_hashes, identity, *state)) {
          out.batch.commands.emplace_back(
              RemoveCommand{std::move(context), identity.holder, TierOf(event), std::move(hashes)});
        }
        ++out.removed;
        out.blocks += event.block_hashes.size();
        break;
      }
      case EngineEventKind::kCleared: {
        // vLLM's reset_prefix_cache drops everything the engine holds: every context, and
        // every tier unless the event names one (Mooncake RFC streams do).
        std::optional<Tier> tier;
        if (event.medium) tier = TierOf(event);
        out.batch.commands.emplace_back(ClearCommand{identity.holder, std::nullopt, tier});
        if (!tier) state->salted_blocks.clear();
        ++out.cleared;
        break;
      }
    }
  }
  return out;
}

void EngineEventMapper::MapStored(const EngineEvent& event, const StreamIdentity& identity,
                                  StreamMapState* state, MappedBatch* out) const {
  if (event.block_hashes.empty()) {
    ++out->skipped_empty;
    return;
  }
  if (event.block_hashes.size() > options_.max_blocks_per_event) {
    ++out->skipped_too_large;
    return;
  }
  if (!IsFullAttention(event.kv_cache_spec_kind)) {
    ++out->skipped_sliding_or_mamba;
    return;
  }
  const size_t blocks = event.block_hashes.size();
  StoreCommand store;
  store.holder = identity.holder;
  store.tier = TierOf(event);
  store.report = IsReport(event, identity);

  // Offload copies (no tokens): the blocks exist already in some context of this stream.
  if (event.token_ids.empty() && !event.standard_hashes) {
    for (auto& [context, hashes] : BucketByContext(event.block_hashes, identity, *state)) {
      StoreCommand copy = store;
      copy.context = std::move(context);
      copy.mode = KeyMode::kAlias;
      copy.hashes = std::move(hashes);
      out->batch.commands.emplace_back(std::move(copy));
    }
    ++out->stored;
    out->blocks += blocks;
    return;
  }

  ContextKey context = identity.context;
  if (event.tenant_id && !event.tenant_id->empty()) context.tenant = *event.tenant_id;
  if (event.model_name && !event.model_name->empty()) context.model = *event.model_name;
  if (event.lora_name && !event.lora_name->empty()) context.lora_name = *event.lora_name;
  if (event.cache_salt && !event.cache_salt->empty()) {
    context.salt = *event.cache_salt;
  } else if (event.parent_hash) {
    // vLLM puts the salt only in the extra keys of the block at token 0: a run that
    // continues a salted prefix belongs to its parent's context.
    auto it = state->salted_blocks.find(*event.parent_hash);
    if (it != state->salted_blocks.end() && it->second < state->contexts.size()) {
      context.salt = state->contexts[it->second].salt;
    }
  }

  const uint32_t block_size =
      event.block_size != 0 && !event.token_ids.empty() ? event.block_size : context.block_size;
  if (!event.token_ids.empty()) {
    if (block_size == 0 || event.token_ids.size() != blocks * block_size) {
      ++out->skipped_not_whole_blocks;
      return;
    }
    // The context's block size is the registration's; an engine that reports another one
    // is believed (its tokens and hashes agree with it), under its own context.
    context.block_size = block_size;
    store.mode = KeyMode::kLocal;
    store.hashes = hasher_->LocalHashes(event.token_ids, block_size);
    store.engine_hashes = event.block_hashes;
  } else {
    store.mode = KeyMode::kSequence;  // RFC streams: the hashes are the standard keys
    store.hashes = event.block_hashes;
  }
  if (!event.locations.empty() && event.locations.size() == blocks) {
    store.locations = event.locations;
  }
  store.parent = event.parent_hash;
  store.base_depth = event.base_block_idx;

  const std::optional<uint32_t> index = Remember(context, state);
  if (!context.salt.empty() && index) {
    if (state->salted_blocks.size() + blocks > StreamMapState::kMaxSaltedBlocks) {
      state->salted_blocks.clear();  // forget old prefixes rather than grow without bound
    }
    for (uint64_t hash : event.block_hashes) state->salted_blocks[hash] = *index;
  }
  store.context = std::move(context);
  out->batch.commands.emplace_back(std::move(store));
  ++out->stored;
  out->blocks += blocks;
}

}  // namespace kvatlas::server
