// The binary encoding of CommandBatch: what a raft log entry carries
// (docs/storage.md §Command batches). Pure functions; safe to call from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/model/command.h"

namespace kvatlas::server {

// The first byte of every encoded batch. A decoder accepts only the versions it knows;
// a new version is added, never an old one changed (docs/storage.md §Versions).
inline constexpr uint8_t kCommandBatchVersion = 14;
// Versions 1 (no registry commands, no stream position), 2 (no server addresses), 3 (no
// holder expiry), 4 (no report stores, no report modes), 5 (no audit points), 6 (audit
// points of digest scheme 1 only), 7 (no load reports), 8 (no predictions), 9 (no drains),
// 10 (no placement commands: PlaceContext, SetGroupAccepting, DisownContext), 11 (no group
// members: SetGroupMembers), 12 (no fan-out ids of holder-wide commands) and 13 (no move
// commands: ReplaceCopies, FenceContext, ImportContext, DropContext) are still decoded, and
// written for batches that need nothing newer (docs/storage.md §Command batches).
inline constexpr uint8_t kOldestCommandBatchVersion = 1;

// Encodes `batch`. Deterministic: equal batches give equal bytes, and DecodeCommandBatch
// of the result returns an equal batch.
[[nodiscard]] std::string EncodeCommandBatch(const CommandBatch& batch);

// Decodes bytes produced by EncodeCommandBatch. Returns kCorruption, naming the command
// that failed, for an unknown version or tag, a truncated or out-of-range field, a count
// larger than the remaining bytes can hold, or trailing bytes. Never reads out of bounds;
// memory allocated is proportional to the input size.
[[nodiscard]] Result<CommandBatch> DecodeCommandBatch(std::string_view bytes);

// A replicated-log entry: a group of batches committed and applied together at one index
// (group commit). u8 version (= 1), varint n, then n × (varint length, encoded batch),
// then up to 7 zero bytes of padding (raft_uv needs 8-byte aligned entries).
inline constexpr uint8_t kLogEntryVersion = 1;
[[nodiscard]] std::string EncodeLogEntry(std::span<const CommandBatch* const> batches);
// kCorruption for anything EncodeLogEntry cannot produce.
[[nodiscard]] Result<std::vector<CommandBatch>> DecodeLogEntry(std::string_view bytes);

}  // namespace kvatlas::server
