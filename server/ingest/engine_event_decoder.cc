// DecodeEngineBatch (engine_event_decoder.h): the shape pre-pass, then the batch envelope
// and each event in its engine's encoding (vLLM / SGLang arrays and maps, Mooncake maps),
// as docs/engine-events.md §Decoding specifies. The scalar field readers they share are
// in msgpack_reader.h.
#include "server/ingest/engine_event_decoder.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <exception>
#include <msgpack.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/ingest/msgpack_reader.h"
#include "server/ingest/salt_reader.h"

namespace kvatlas::server {
namespace {

using msgpack_reader::EqualsIgnoreCase;
using msgpack_reader::IsNil;
using msgpack_reader::IsStr;
using msgpack_reader::Items;
using msgpack_reader::Obj;
using msgpack_reader::Pairs;
using msgpack_reader::ReadHashes;
using msgpack_reader::ReadOptHash;
using msgpack_reader::ReadOptInt64;
using msgpack_reader::ReadOptString;
using msgpack_reader::ReadOptU32;
using msgpack_reader::ReadTokens;
using msgpack_reader::Str;
using msgpack_reader::TypeName;
using salt_reader::EventNotes;
using salt_reader::IsTypedSaltItem;
using salt_reader::ReadMetadata;
using salt_reader::ReadSalt;
using salt_reader::ReadTypedSaltItem;
using salt_reader::UnknownField;
namespace mt = msgpack::type;

// Bytes of repeated Mooncake locations (one string sent for several blocks) a batch may
// expand to: 16 per payload byte plus 1 MiB, far above real use (one block per event).
constexpr size_t kLocationBudgetPerByte = 16;
constexpr size_t kLocationBudgetBase = size_t{1} << 20;

// ---- Pre-pass ------------------------------------------------------------------------------

// Walks the payload without building anything, to prove that it is exactly one complete
// msgpack value no deeper than kMaxEngineBatchDepth. msgpack::unpack allocates a container's
// element storage when it reads the header, before the elements; once the walk has seen every
// declared element, the object tree is bounded by the payload size (each element costs at
// least one payload byte and 16 bytes of msgpack::object).
class ShapeCheck : public msgpack::null_visitor {
 public:
  enum class Error : uint8_t { kNone, kTooDeep, kInvalid, kTruncated };

  bool start_array(uint32_t /*num_elements*/) { return Enter(); }
  bool end_array() { return Leave(); }
  bool start_map(uint32_t /*num_kv_pairs*/) { return Enter(); }
  bool end_map() { return Leave(); }
  void parse_error(size_t /*parsed_offset*/, size_t error_offset) {
    error_ = Error::kInvalid;
    offset_ = error_offset;
  }
  void insufficient_bytes(size_t /*parsed_offset*/, size_t error_offset) {
    error_ = Error::kTruncated;
    offset_ = error_offset;
  }

  Error error() const { return error_; }
  size_t offset() const { return offset_; }

 private:
  bool Enter() {
    if (++depth_ > kMaxEngineBatchDepth) {
      error_ = Error::kTooDeep;
      return false;
    }
    return true;
  }
  bool Leave() {
    --depth_;
    return true;
  }

  uint32_t depth_ = 0;
  Error error_ = Error::kNone;
  size_t offset_ = 0;
};

// Strings and byte strings in the object tree point into the payload instead of being
// copied: the tree never outlives DecodeEngineBatch.
bool ReferenceAll(mt::object_type /*type*/, size_t /*size*/, void* /*user_data*/) { return true; }

// ---- vLLM / SGLang events ------------------------------------------------------------------

// Field slots in the BlockStored positional order (docs/engine-events.md §Decoding); a
// tagged map or a BlockRemoved array is first rearranged into these slots, so one reader
// serves every encoding.
enum Slot : uint8_t {
  kTag = 0,
  kBlockHashes,
  kParentBlockHash,
  kTokenIds,
  kBlockSize,
  kLoraId,
  kMedium,
  kLoraName,
  kExtraKeys,
  kGroupIdx,
  kSpecKind,
  kSlidingWindow,
  kLocality,
  kOwnership,
  kSessionId,
  kPositionalCount,  // the slots above have a position; the ones below only a map key
  kCacheSalt = kPositionalCount,
  kMetadata,
  kOrigin,                     // vLLM: "NEW" / "REUSED"
  kComponentType,              // SGLang: the KV-cache component ("full", "swa", ...)
  kNamespacedBlockHashes,      // SGLang's opt-in second hash chain: read, not used
  kNamespacedParentBlockHash,  // (the tokens give kvatlas its keys)
  kSlotCount,
};
using Slots = std::array<const Obj*, kSlotCount>;

// clang-format off
constexpr std::array<std::string_view, kSlotCount> kSlotNames = {
    "type",      "block_hashes",       "parent_block_hash",
    "token_ids", "block_size",         "lora_id",
    "medium",    "lora_name",          "extra_keys",
    "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
    "locality",  "ownership",          "session_id",
    "cache_salt", "metadata",          "origin",
    "component_type", "namespaced_block_hashes", "namespaced_parent_block_hash"};
// clang-format on

// BlockRemoved's positional fields after the tag.
constexpr std::array<Slot, 5> kRemovedSlots = {kBlockHashes, kMedium, kGroupIdx, kLocality,
                                               kOwnership};
// BlockRemoved's map-only fields.
constexpr std::array<Slot, 2> kRemovedMapSlots = {kNamespacedBlockHashes, kComponentType};

std::optional<EngineEventKind> VllmKind(std::string_view tag) {
  if (tag == "BlockStored") return EngineEventKind::kStored;
  if (tag == "BlockRemoved") return EngineEventKind::kRemoved;
  if (tag == "AllBlocksCleared") return EngineEventKind::kCleared;
  return std::nullopt;
}

std::optional<EngineEventKind> MooncakeKind(std::string_view type) {
  if (EqualsIgnoreCase(type, "stored")) return EngineEventKind::kStored;
  if (EqualsIgnoreCase(type, "removed")) return EngineEventKind::kRemoved;
  if (EqualsIgnoreCase(type, "cleared")) return EngineEventKind::kCleared;
  return std::nullopt;
}

bool SlotAllowed(EngineEventKind kind, size_t slot) {
  switch (kind) {
    case EngineEventKind::kStored:
      return slot != kTag;
    case EngineEventKind::kRemoved:
      return std::find(kRemovedSlots.begin(), kRemovedSlots.end(), slot) != kRemovedSlots.end() ||
             std::find(kRemovedMapSlots.begin(), kRemovedMapSlots.end(), slot) !=
                 kRemovedMapSlots.end();
    case EngineEventKind::kCleared:
      return false;
  }
  return false;
}

// True when `o` is a bare string item equal to `s`, or a [identifier, offset] tuple whose
// identifier is `s`.
bool NamesItem(const Obj& o, std::string_view s) {
  if (IsStr(o)) return Str(o) == s;
  return o.type == mt::ARRAY && o.via.array.size == 2 && IsStr(o.via.array.ptr[0]) &&
         Str(o.via.array.ptr[0]) == s;
}

// Reads vLLM's extra_keys: derives cache_salt (when not already set) and
// has_multimodal_extra_keys. The heuristic and its limits: docs/engine-events.md §Extra keys.
bool ReadExtraKeys(const Obj* o, EngineEvent* e, EventNotes* notes) {
  if (IsNil(o)) return true;
  if (o->type != mt::ARRAY) return false;
  const std::span<const Obj> entries = Items(*o);
  for (const Obj& entry : entries) {
    if (entry.type != mt::NIL && entry.type != mt::ARRAY) return false;
  }
  const auto is_lora_key = [&](std::span<const Obj> items, size_t j) {
    return j == 0 && e->lora_name && IsStr(items[0]) && Str(items[0]) == *e->lora_name;
  };
  // Typed salt items name the salt explicitly, on any block.
  for (const Obj& entry : entries) {
    if (entry.type != mt::ARRAY) continue;
    for (const Obj& item : Items(entry)) {
      if (IsTypedSaltItem(item)) ReadTypedSaltItem(item, e, notes);
    }
  }
  // The salt: the last bare string of block 0 (after its LoRA key) when the run starts at
  // token 0, unless block 1 names it too (then it is a multimodal item spanning blocks).
  const Obj* salt = nullptr;
  if (!e->parent_hash && !e->cache_salt && !entries.empty() && entries[0].type == mt::ARRAY) {
    const std::span<const Obj> items = Items(entries[0]);
    for (size_t j = items.size(); j-- > 0;) {
      if (is_lora_key(items, j)) break;
      if (!IsStr(items[j])) continue;
      salt = &items[j];
      if (entries.size() > 1 && entries[1].type == mt::ARRAY) {
        for (const Obj& next : Items(entries[1])) {
          if (NamesItem(next, Str(*salt))) {
            salt = nullptr;
            break;
          }
        }
      }
      break;
    }
    if (salt != nullptr) e->cache_salt.emplace(Str(*salt));
  }
  for (const Obj& entry : entries) {
    if (entry.type != mt::ARRAY) continue;
    const std::span<const Obj> items = Items(entry);
    for (size_t j = 0; j < items.size(); ++j) {
      if (is_lora_key(items, j) || &items[j] == salt) continue;
      if (IsTypedSaltItem(items[j])) continue;
      e->has_multimodal_extra_keys = true;  // multimodal id, tuple, prompt-embeds hash, other
      return true;
    }
  }
  return true;
}

// Fills `e` (kind already set) from vLLM/SGLang field slots; false when malformed.
bool ReadVllmSlots(const Slots& s, EngineEvent* e, EventNotes* notes) {
  if (e->kind == EngineEventKind::kCleared) return true;
  if (s[kBlockHashes] == nullptr || !ReadHashes(*s[kBlockHashes], &e->block_hashes)) {
    return false;
  }
  if (!ReadOptString(s[kMedium], &e->medium) || !ReadOptInt64(s[kGroupIdx], &e->group_idx)) {
    return false;
  }
  // `locality`, `ownership` and `session_id` (vLLM 0.28+) are ignored when they have the
  // expected type; they do not change where a block is cached.
  for (const Slot ignored : {kLocality, kOwnership, kSessionId}) {
    if (const Obj* o = s[ignored]; !IsNil(o) && !IsStr(*o)) ++notes->unknown;
  }
  // SGLang's namespaced hashes are a second name for the same blocks; kvatlas keys blocks
  // by their tokens and removals by block_hashes, so they are only checked.
  std::vector<uint64_t> namespaced;
  std::optional<uint64_t> namespaced_parent;
  if ((!IsNil(s[kNamespacedBlockHashes]) && !ReadHashes(*s[kNamespacedBlockHashes], &namespaced)) ||
      !ReadOptHash(s[kNamespacedParentBlockHash], &namespaced_parent)) {
    ++notes->unknown;
  }
  std::optional<std::string> component;
  if (!ReadOptString(s[kComponentType], &component)) return false;
  if (e->kind == EngineEventKind::kRemoved) return true;
  if (const Obj* o = s[kOrigin]; !IsNil(o)) {
    e->origin = IsStr(*o) ? ParseBlockOrigin(Str(*o)) : std::nullopt;
    // A value this decoder does not know is never read as one it does.
    if (!e->origin) ++notes->unknown;
  }
  std::optional<uint32_t> block_size;
  if (!ReadOptHash(s[kParentBlockHash], &e->parent_hash) ||
      !ReadTokens(s[kTokenIds], &e->token_ids) || !ReadOptU32(s[kBlockSize], &block_size) ||
      !ReadOptInt64(s[kLoraId], &e->lora_id) ||
      !ReadOptString(s[kSpecKind], &e->kv_cache_spec_kind) ||
      !ReadOptInt64(s[kSlidingWindow], &e->kv_cache_spec_sliding_window)) {
    return false;
  }
  e->block_size = block_size.value_or(0);
  // SGLang's component of a hybrid model: only its full-attention pages hold the prefix.
  if (component && *component != "full" && *component != "full_attention" &&
      !e->kv_cache_spec_kind) {
    e->kv_cache_spec_kind = std::move(component);
  }
  // The salt, named in any of the forms engines use: a field, SGLang's metadata map (in
  // place of lora_name at index 7, or as a "metadata" field), vLLM's extra keys.
  ReadSalt(s[kCacheSalt], e, notes);
  if (const Obj* lora = s[kLoraName]; lora != nullptr && lora->type == mt::MAP) {
    ReadMetadata(lora, e, notes);
  } else if (!ReadOptString(lora, &e->lora_name)) {
    return false;
  }
  ReadMetadata(s[kMetadata], e, notes);
  return ReadExtraKeys(s[kExtraKeys], e, notes);
}

// [tag, fields...]: false when the event is malformed or its tag unknown.
bool ReadVllmArray(const Obj& event, EngineEvent* e, EventNotes* notes) {
  const std::span<const Obj> f = Items(event);
  if (f.empty() || !IsStr(f[0])) return false;
  const std::optional<EngineEventKind> kind = VllmKind(Str(f[0]));
  if (!kind) return false;
  e->kind = *kind;
  Slots slots{};
  size_t known = 1;
  if (*kind == EngineEventKind::kStored) {
    known = std::min<size_t>(f.size(), kPositionalCount);
    for (size_t i = 1; i < known; ++i) slots[i] = &f[i];
  } else if (*kind == EngineEventKind::kRemoved) {
    known = std::min<size_t>(f.size(), kRemovedSlots.size() + 1);
    for (size_t i = 1; i < known; ++i) slots[kRemovedSlots[i - 1]] = &f[i];
  }
  notes->unknown += static_cast<uint32_t>(f.size() - known);
  return ReadVllmSlots(slots, e, notes);
}

// {type: tag, field: value, ...} with `kind` read from "type" by the caller.
bool ReadVllmMap(const Obj& event, EngineEventKind kind, EngineEvent* e, EventNotes* notes) {
  e->kind = kind;
  Slots slots{};
  for (const msgpack::object_kv& kv : Pairs(event)) {
    if (!IsStr(kv.key)) {
      UnknownField(kv.key, kv.val, notes);
      continue;
    }
    const std::string_view key = Str(kv.key);
    if (key == kSlotNames[kTag]) continue;
    const auto it = std::find(kSlotNames.begin() + 1, kSlotNames.end(), key);
    const size_t slot = static_cast<size_t>(it - kSlotNames.begin());
    if (it == kSlotNames.end() || !SlotAllowed(kind, slot)) {
      UnknownField(kv.key, kv.val, notes);
      continue;
    }
    slots[slot] = &kv.val;
  }
  return ReadVllmSlots(slots, e, notes);
}

// ---- Mooncake RFC #1527 events -------------------------------------------------------------

// object_key / location: a string (repeated for each block) or an array (one per block).
// `budget` bounds the bytes that repeating one string may create across the batch: the
// only place where the output could grow faster than the payload.
bool ReadLocations(const Obj* o, EngineEvent* e, size_t* budget) {
  if (IsNil(o)) return true;
  if (IsStr(*o)) {
    const size_t copies = std::max<size_t>(e->block_hashes.size(), 1);
    const size_t cost = copies * (sizeof(std::string) + o->via.str.size);
    if (copies > 1 && cost > *budget) return false;
    if (copies > 1) *budget -= cost;
    e->locations.assign(copies, std::string(Str(*o)));
    return true;
  }
  if (o->type != mt::ARRAY) return false;
  if (!e->block_hashes.empty() && o->via.array.size != e->block_hashes.size()) return false;
  e->locations.reserve(o->via.array.size);
  for (const Obj& item : Items(*o)) {
    if (!IsStr(item)) return false;
    e->locations.emplace_back(Str(item));
  }
  return true;
}

// Mooncake keys read into slots; kMooncakeIgnored ones are known but unused.
enum MooncakeSlot : uint8_t {
  kEventType = 0,
  kType,
  kSeqHashes,
  kBlockHashesAlias,
  kBaseBlockIdx,
  kParentHash,
  kMcTokenIds,
  kMcMedium,
  kMcBlockSize,
  kModelName,
  kTenantId,
  kMcLoraName,
  kObjectKey,
  kLocation,
  kAdditionalSalt,
  kMooncakeSlotCount,
};
constexpr std::array<std::string_view, kMooncakeSlotCount> kMooncakeNames = {
    "event_type",  "type",      "seq_hashes", "block_hashes", "base_block_idx",
    "parent_hash", "token_ids", "medium",     "block_size",   "model_name",
    "tenant_id",   "lora_name", "object_key", "location",     "additional_salt"};
constexpr std::array<std::string_view, 4> kMooncakeIgnored = {"dp_rank", "event_id", "timestamp",
                                                              "backend_id"};

// A map with "event_type" (or a "type" of stored|removed|cleared); false when malformed or
// the type is unknown.
bool ReadMooncakeMap(const Obj& event, EngineEvent* e, EventNotes* notes, size_t* budget) {
  std::array<const Obj*, kMooncakeSlotCount> f{};
  for (const msgpack::object_kv& kv : Pairs(event)) {
    const std::string_view key = IsStr(kv.key) ? Str(kv.key) : std::string_view();
    const auto it = std::find(kMooncakeNames.begin(), kMooncakeNames.end(), key);
    if (it != kMooncakeNames.end()) {
      f[static_cast<size_t>(it - kMooncakeNames.begin())] = &kv.val;
    } else if (std::find(kMooncakeIgnored.begin(), kMooncakeIgnored.end(), key) ==
               kMooncakeIgnored.end()) {
      UnknownField(kv.key, kv.val, notes);
    }
  }
  const Obj* tag = f[kEventType] != nullptr ? f[kEventType] : f[kType];
  if (tag == nullptr || !IsStr(*tag)) return false;
  const std::optional<EngineEventKind> kind = MooncakeKind(Str(*tag));
  if (!kind) return false;
  e->kind = *kind;
  e->standard_hashes = true;
  std::optional<uint32_t> block_size;
  if (!ReadOptString(f[kMcMedium], &e->medium) || !ReadOptU32(f[kMcBlockSize], &block_size) ||
      !ReadOptString(f[kModelName], &e->model_name) ||
      !ReadOptString(f[kTenantId], &e->tenant_id) ||
      !ReadOptString(f[kMcLoraName], &e->lora_name)) {
    return false;
  }
  e->block_size = block_size.value_or(0);
  if (*kind != EngineEventKind::kCleared) {  // cleared: envelope only
    const Obj* hashes = f[kSeqHashes] != nullptr ? f[kSeqHashes] : f[kBlockHashesAlias];
    if (hashes != nullptr && !ReadHashes(*hashes, &e->block_hashes)) return false;
    if (!ReadOptU32(f[kBaseBlockIdx], &e->base_block_idx) ||
        !ReadOptHash(f[kParentHash], &e->parent_hash) ||
        !ReadTokens(f[kMcTokenIds], &e->token_ids) ||
        !ReadLocations(f[kObjectKey] != nullptr ? f[kObjectKey] : f[kLocation], e, budget)) {
      return false;
    }
    // Removed needs its hashes; stored needs hashes or tokens to say what was stored.
    if (e->block_hashes.empty() && (*kind == EngineEventKind::kRemoved || e->token_ids.empty())) {
      return false;
    }
  }
  if (*kind == EngineEventKind::kStored) ReadSalt(f[kAdditionalSalt], e, notes);
  return true;
}

// ---- Dispatch ------------------------------------------------------------------------------

// Decodes one element of the events array into `e`; false when it is to be skipped.
bool ReadEvent(const Obj& event, EngineEvent* e, EventNotes* notes, size_t* budget) {
  if (event.type == mt::ARRAY) return ReadVllmArray(event, e, notes);
  if (event.type != mt::MAP) return false;
  const Obj* type = nullptr;
  for (const msgpack::object_kv& kv : Pairs(event)) {
    if (!IsStr(kv.key)) continue;
    if (Str(kv.key) == "event_type") return ReadMooncakeMap(event, e, notes, budget);
    if (Str(kv.key) == "type") type = &kv.val;
  }
  if (type == nullptr || !IsStr(*type)) return false;
  if (const std::optional<EngineEventKind> kind = VllmKind(Str(*type))) {
    return ReadVllmMap(event, *kind, e, notes);
  }
  return ReadMooncakeMap(event, e, notes, budget);  // "type": "stored" etc. without event_type
}

Status BatchError(std::string_view path, std::string_view expected, const Obj& got) {
  return Status::InvalidArgument(std::string(path) + ": expected " + std::string(expected) +
                                 ", got " + TypeName(got));
}

Result<EngineBatch> DecodeBatch(const Obj& root, size_t payload_size) {
  EngineBatch batch;
  const Obj* ts = nullptr;
  const Obj* events = nullptr;
  const Obj* dp_rank = nullptr;
  bool positional = true;
  if (root.type == mt::ARRAY) {
    const std::span<const Obj> f = Items(root);
    if (f.size() != 2 && f.size() != 3) {
      return Status::InvalidArgument("batch: expected an array of 2 or 3 elements, got " +
                                     std::to_string(f.size()));
    }
    ts = &f[0];
    events = &f[1];
    if (f.size() == 3) dp_rank = &f[2];
  } else if (root.type == mt::MAP) {
    positional = false;
    for (const msgpack::object_kv& kv : Pairs(root)) {
      const std::string_view key = IsStr(kv.key) ? Str(kv.key) : std::string_view();
      if (key == "ts") {
        ts = &kv.val;
      } else if (key == "events") {
        events = &kv.val;
      } else if (key == "data_parallel_rank" || key == "attn_dp_rank") {
        dp_rank = &kv.val;
      } else {
        ++batch.unknown_fields;
      }
    }
    if (events == nullptr) return Status::InvalidArgument("batch: map without \"events\"");
  } else {
    return BatchError("batch", "an array [ts, events, dp_rank] or a map", root);
  }

  if (ts != nullptr) {
    if (ts->type == mt::FLOAT32 || ts->type == mt::FLOAT64) {
      batch.timestamp = ts->via.f64;
    } else if (ts->type == mt::POSITIVE_INTEGER) {
      batch.timestamp = static_cast<double>(ts->via.u64);
    } else if (ts->type == mt::NEGATIVE_INTEGER) {
      batch.timestamp = static_cast<double>(ts->via.i64);
    } else {
      return BatchError(positional ? "batch[0]" : "batch.ts", "a number (timestamp)", *ts);
    }
  }
  if (events->type != mt::ARRAY) {
    return BatchError(positional ? "batch[1]" : "batch.events", "an array of events", *events);
  }
  if (!ReadOptInt64(dp_rank, &batch.dp_rank)) {
    return BatchError(positional ? "batch[2]" : "batch.data_parallel_rank",
                      "an int64 or nil (dp rank)", *dp_rank);
  }

  // The smallest decodable event, ["AllBlocksCleared"], takes 18 bytes: reserving more would
  // let a hostile array of empty events allocate ~sizeof(EngineEvent) per payload byte.
  batch.events.reserve(std::min<size_t>(events->via.array.size, payload_size / 16));
  size_t location_budget = kLocationBudgetPerByte * payload_size + kLocationBudgetBase;
  for (const Obj& event : Items(*events)) {
    EngineEvent& e = batch.events.emplace_back();
    EventNotes notes;
    if (!ReadEvent(event, &e, &notes, &location_budget)) {
      batch.events.pop_back();
      ++batch.skipped_events;
    } else if (notes.unclear_namespace && e.kind == EngineEventKind::kStored) {
      // Only a store places blocks in a namespace: never index it in one it may not belong
      // to. Removals and clears name no namespace (the mapper finds it), whatever they carry.
      batch.events.pop_back();
      ++batch.skipped_namespace_events;
    } else {
      batch.unknown_fields += notes.unknown;
    }
  }
  return batch;
}

}  // namespace

Result<EngineBatch> DecodeEngineBatch(std::span<const uint8_t> payload) {
  if (payload.empty()) return Status::InvalidArgument("engine batch: empty payload");
  const char* data = reinterpret_cast<const char*>(payload.data());
  const size_t len = payload.size();
  try {
    ShapeCheck check;
    size_t end = 0;
    const bool complete = msgpack::parse(data, len, end, check);
    switch (check.error()) {
      case ShapeCheck::Error::kTooDeep:
        return Status::InvalidArgument("engine batch: msgpack nested deeper than " +
                                       std::to_string(kMaxEngineBatchDepth) + " levels");
      case ShapeCheck::Error::kInvalid:
        return Status::InvalidArgument("engine batch: invalid msgpack at byte " +
                                       std::to_string(check.offset()));
      case ShapeCheck::Error::kTruncated:
        return Status::InvalidArgument("engine batch: truncated msgpack (" + std::to_string(len) +
                                       " bytes, value incomplete at byte " +
                                       std::to_string(check.offset()) + ")");
      case ShapeCheck::Error::kNone:
        break;
    }
    if (!complete) return Status::InvalidArgument("engine batch: invalid msgpack");
    if (end != len) {
      return Status::InvalidArgument("engine batch: " + std::to_string(len - end) +
                                     " trailing bytes after the value at byte " +
                                     std::to_string(end));
    }
    // The pre-pass proved the value complete: every container's element count is backed by
    // payload bytes, so the limits below only restate what the payload bounds.
    const msgpack::unpack_limit limit(len, len / 2, len, len, len, kMaxEngineBatchDepth + 1);
    size_t off = 0;
    const msgpack::object_handle handle =
        msgpack::unpack(data, len, off, &ReferenceAll, nullptr, limit);
    return DecodeBatch(handle.get(), len);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("engine batch: undecodable msgpack: ") + e.what());
  } catch (...) {
    return Status::InvalidArgument("engine batch: undecodable msgpack");
  }
}

}  // namespace kvatlas::server
