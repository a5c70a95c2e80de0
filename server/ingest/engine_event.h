// EngineEvent: one KV-cache event as an inference engine publishes it over ZMQ (vLLM,
// SGLang, Mooncake store master), decoded from msgpack but not yet interpreted: hashes are
// the engine's own opaque values, identity (model, tenant, instance) is not here — it comes
// from the registration of the stream (server/zmq). See docs/engine-events.md for the wire
// formats. Plain values: thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvatlas/common/events.h"

namespace kvatlas::server {

enum class EngineEventKind : uint8_t { kStored = 0, kRemoved = 1, kCleared = 2 };

struct EngineEvent {
  EngineEventKind kind = EngineEventKind::kStored;

  // Engine hashes in block order, each folded to 64 bits: unsigned ints as is, signed ints
  // (SGLang) as their two's-complement bits, byte strings as their last 8 bytes read
  // big-endian (shorter ones left-padded with zeros). Stored: the new blocks; removed: the
  // evicted ones; cleared: empty.
  std::vector<uint64_t> block_hashes;
  // Stored: the engine hash of the block before block_hashes[0] (folded the same way);
  // nullopt when absent or nil (the run starts at block 0 or is an offload copy).
  std::optional<uint64_t> parent_hash;
  // Stored: the tokens of all the event's blocks (empty for offload copies).
  std::vector<uint32_t> token_ids;
  // Stored: tokens per block as sent; 0 when absent.
  uint32_t block_size = 0;
  std::optional<int64_t> lora_id;
  // The medium string as sent ("GPU", "CPU", "CPU_PINNED", "DISK", ...); nullopt when
  // absent or nil.
  std::optional<std::string> medium;
  std::optional<std::string> lora_name;
  // The request's cache salt: SGLang's metadata.cache_salt, or, for vLLM, taken from the
  // extra keys of the block that starts at token 0 (docs/engine-events.md §Extra keys).
  std::optional<std::string> cache_salt;
  // True when some block's extra keys name a multimodal item (or prompt embeddings): the
  // engine's hash then depends on more than the tokens.
  bool has_multimodal_extra_keys = false;
  std::optional<int64_t> group_idx;
  std::optional<std::string> kv_cache_spec_kind;
  std::optional<int64_t> kv_cache_spec_sliding_window;
  // Stored: the event's `origin` field; nullopt when absent, nil or not a known value
  // (docs/engine-events.md §Report modes).
  std::optional<BlockOrigin> origin;

  // Mooncake RFC #1527 events only (maps with "event_type"): block_hashes then are standard
  // rolling sequence hashes, and these carry the rest of the envelope when present.
  bool standard_hashes = false;
  std::optional<uint32_t> base_block_idx;
  // One per block, or empty (RFC `object_key` / `location`, a string or an array).
  std::vector<std::string> locations;
  std::optional<std::string> model_name;
  std::optional<std::string> tenant_id;
};

// One published batch (`[ts, events, dp_rank?]` or a map with the same fields).
struct EngineBatch {
  double timestamp = 0;  // seconds (vLLM/SGLang) or milliseconds (Mooncake) as sent
  std::optional<int64_t> dp_rank;
  std::vector<EngineEvent> events;
  // Events skipped because their tag is unknown or they are malformed (the rest of the
  // batch is still used), and fields ignored because their name or position is unknown.
  uint32_t skipped_events = 0;
  uint32_t unknown_fields = 0;
  // BlockStored events left out because their namespace (cache salt) cannot be determined
  // exactly: a salt field of a type the decoder cannot read, salts that disagree, or an
  // unknown field named like a salt (docs/engine-events.md §Namespace). Indexing them
  // without their salt would put one tenant's blocks in another's namespace. Not counted in
  // skipped_events.
  uint32_t skipped_namespace_events = 0;
};

}  // namespace kvatlas::server
