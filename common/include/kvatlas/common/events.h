// BlockEvent: one KV-cache event normalized from the RFC #1527 envelope (Mooncake KV Events
// API), whatever transport it came over (REST JSON today, ZMQ msgpack later). Producers
// build BlockEvents; server/ingest turns them into commands. Plain values: thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/limits.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

enum class EventType : uint8_t { kStored = 0, kRemoved = 1, kCleared = 2 };

// The RFC wire names: "stored", "removed", "cleared".
constexpr std::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kStored:
      return "stored";
    case EventType::kRemoved:
      return "removed";
    case EventType::kCleared:
      return "cleared";
  }
  return "stored";
}

// What a stored event says of its blocks, when its publisher says it (vLLM's `origin`):
// kNew — newly cached blocks, each a new copy for the holder (a block stored twice needs
// two removes); kReused — a re-report of blocks the holder already holds (one reference
// if it had none, no change otherwise). Absent: a new copy.
enum class BlockOrigin : uint8_t { kNew = 1, kReused = 2 };

// "new", "reused".
constexpr std::string_view BlockOriginName(BlockOrigin origin) {
  return origin == BlockOrigin::kReused ? "reused" : "new";
}

struct BlockEvent {
  EventType type = EventType::kStored;
  // Consecutive per stream in the RFC; informational until stream tracking lands.
  std::optional<uint64_t> event_id;
  // Publisher's clock (RFC: epoch milliseconds); informational only, never used for order.
  std::optional<double> timestamp;
  // tenant_id, model_name, lora_name, block_size, additional_salt.
  ContextKey context;
  // backend_id (or instance_id when backend_id is absent) and dp_rank.
  HolderKey holder;
  // The publisher's medium string as sent; nullopt when absent. `tier` is
  // TierFromMedium(medium) (GPU when absent); `medium_known` is false for strings outside
  // the documented list, so that metrics can report them.
  std::optional<std::string> medium;
  Tier tier = Tier::kGpu;
  bool medium_known = true;
  // stored: the rolling sequence hashes of consecutive blocks (may be empty when token_ids
  // are given); removed: the hashes to remove (non-empty); cleared: empty.
  std::vector<uint64_t> seq_hashes;
  // stored: the sequence hash of the block before seq_hashes[0]; nullopt at the root.
  std::optional<uint64_t> parent_hash;
  // Depth of the first block of this event.
  std::optional<uint32_t> base_block_idx;
  // stored: the tokens of all blocks of this event (a multiple of block_size).
  std::optional<std::vector<uint32_t>> token_ids;
  // stored: empty, or exactly one location descriptor per block (kvatlas extension for
  // storage tiers; the JSON form may give one string for every block).
  std::vector<std::string> locations;
  // stored: see BlockOrigin; nullopt for the other types.
  std::optional<BlockOrigin> origin;
  // cleared: true drops the holder's copies in every context (JSON `"scope": "holder"`),
  // not only in `context`: what an operator sends when an engine dropped its cache without
  // saying so (docs/engine-events.md §Cache reset, sleep and weight reload).
  bool clear_all_contexts = false;

  // Blocks this event names: seq_hashes.size(), or for a stored event with token_ids only,
  // token_ids->size() / block_size.
  size_t BlockCount() const {
    if (!seq_hashes.empty() || !token_ids || context.block_size == 0) return seq_hashes.size();
    return token_ids->size() / context.block_size;
  }
};

// The length limits of limits.h on an event's names (context, backend_id, medium, each
// location), naming the field as "<path>.<field>". Part of ValidateBlockEvent (with the
// default limits); a server's service layer applies its configured ones.
[[nodiscard]] inline Status LimitsOfBlockEvent(const BlockEvent& event, std::string_view path,
                                               const NameLimits& limits = {}) {
  const auto prefix = [&] { return std::string(path) + "."; };
  const std::string_view name_key = limits.config_keys ? "max_name_bytes" : "";
  const ContextKey& c = event.context;
  if (c.tenant.size() > limits.name_bytes || c.model.size() > limits.name_bytes ||
      c.lora_name.size() > limits.name_bytes || c.salt.size() > limits.salt_bytes) {
    return CheckContextLimits(c, prefix(), {}, limits);
  }
  if (event.holder.id.size() > limits.name_bytes) {
    return TooLong(prefix(), "backend_id", event.holder.id.size(), limits.name_bytes, name_key);
  }
  if (event.medium && event.medium->size() > limits.name_bytes) {
    return TooLong(prefix(), "medium", event.medium->size(), limits.name_bytes, name_key);
  }
  for (const std::string& location : event.locations) {
    if (location.size() > limits.location_bytes) {
      return TooLong(prefix(), "location", location.size(), limits.location_bytes,
                     limits.config_keys ? "max_location_bytes" : "");
    }
  }
  return Status::Ok();
}

// The deepest position a block can have in its chain (base_block_idx + its index in the
// event): the index keeps 24-bit depths (docs/limits.md).
inline constexpr uint32_t kMaxBlockDepth = (1u << 24) - 1;

// Checks the invariants that every producer of BlockEvents must meet, whatever its source:
// block_size > 0, a non-empty holder id and model name; stored has seq_hashes or token_ids,
// token_ids hold exactly BlockCount() complete blocks (and seq_hashes.size() blocks when
// both are given), locations are empty or one per block; removed has seq_hashes; names
// within limits.h's limits (LimitsOfBlockEvent).
// Returns kInvalidArgument naming the field as "<path>.<field>: <problem>".
[[nodiscard]] inline Status ValidateBlockEvent(const BlockEvent& event, std::string_view path) {
  const auto invalid = [&](std::string_view field, const std::string& problem) {
    return Status::InvalidArgument(std::string(path) + "." + std::string(field) + ": " + problem);
  };
  if (event.context.block_size == 0) return invalid("block_size", "must be a positive integer");
  if (event.context.model.empty()) return invalid("model_name", "must be a non-empty string");
  if (event.holder.id.empty()) return invalid("backend_id", "must be a non-empty string");
  KVATLAS_RETURN_IF_ERROR(LimitsOfBlockEvent(event, path));
  if (event.base_block_idx &&
      uint64_t{*event.base_block_idx} + event.BlockCount() > uint64_t{kMaxBlockDepth} + 1) {
    return invalid("base_block_idx", std::to_string(*event.base_block_idx) + " + " +
                                         std::to_string(event.BlockCount()) +
                                         " blocks passes the deepest block position, " +
                                         std::to_string(kMaxBlockDepth));
  }
  switch (event.type) {
    case EventType::kStored:
      break;
    case EventType::kRemoved:
      if (event.seq_hashes.empty()) return invalid("seq_hashes", "a removed event needs hashes");
      return Status::Ok();
    case EventType::kCleared:
      return Status::Ok();
  }
  if (event.seq_hashes.empty() && (!event.token_ids || event.token_ids->empty())) {
    return invalid("seq_hashes", "a stored event needs seq_hashes or token_ids");
  }
  const uint32_t block_size = event.context.block_size;
  if (event.token_ids) {
    const size_t tokens = event.token_ids->size();
    if (!event.seq_hashes.empty() && tokens != event.seq_hashes.size() * block_size) {
      return invalid("token_ids", std::to_string(tokens) + " tokens do not cover exactly the " +
                                      std::to_string(event.seq_hashes.size()) +
                                      " blocks of seq_hashes (expected " +
                                      std::to_string(event.seq_hashes.size() * block_size) +
                                      " = blocks x block_size)");
    }
    if (tokens % block_size != 0) {
      return invalid("token_ids", std::to_string(tokens) + " tokens are not a whole number of " +
                                      std::to_string(block_size) + "-token blocks");
    }
  }
  if (!event.locations.empty() && event.locations.size() != event.BlockCount()) {
    return invalid("location", "has " + std::to_string(event.locations.size()) +
                                   " entries; expected one string, or one per block (" +
                                   std::to_string(event.BlockCount()) + ")");
  }
  return Status::Ok();
}

// What the server answers to an applied event batch (REST and the binary protocol).
struct IngestAnswer {
  Revision revision = 0;  // the revision the batch was applied at
  uint64_t events = 0;
  uint64_t blocks = 0;  // blocks named by the batch's stored and removed events
};

// Exactly-once writes (docs/api.md §Idempotent writes): a writer names itself and numbers
// its batches 1, 2, 3...; the server applies a batch only if its sequence is past the
// last one applied for that writer, so resending a batch whose answer was lost is safe.
// A writer must resend a failed sequence before sending a higher one (one batch in flight
// per writer, or pipelined on one connection without gaps).
struct WriterPosition {
  std::string writer_id;  // 1..kMaxWriterIdBytes bytes of [A-Za-z0-9._:-]
  uint64_t sequence = 0;  // >= 1
  friend bool operator==(const WriterPosition&, const WriterPosition&) = default;
};
inline constexpr size_t kMaxWriterIdBytes = 128;

// kInvalidArgument naming "<path>.writer_id" or "<path>.writer_sequence".
[[nodiscard]] inline Status ValidateWriterPosition(const WriterPosition& writer,
                                                   std::string_view path) {
  const std::string prefix = path.empty() ? std::string() : std::string(path) + ".";
  const std::string_view id = writer.writer_id;
  if (id.empty() || id.size() > kMaxWriterIdBytes) {
    return Status::InvalidArgument(prefix + "writer_id: must be 1 to " +
                                   std::to_string(kMaxWriterIdBytes) + " bytes");
  }
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(prefix +
                                     "writer_id: only letters, digits and . _ : - "
                                     "are allowed");
    }
  }
  if (writer.sequence == 0) {
    return Status::InvalidArgument(prefix + "writer_sequence: must be a positive integer");
  }
  return Status::Ok();
}

}  // namespace kvatlas
