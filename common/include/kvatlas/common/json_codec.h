// JSON codecs of the kvatlas REST wire types (docs/api.md): the event batch of
// POST /v1/events, the lookup requests of /v1/lookup and of the Mooncake Conductor
// /query and /query_by_hash, and the answers. Shared by the server and, later, clients.
//
// Decoders validate completely and never throw: every problem is kInvalidArgument with a
// message that starts with the field path ("events[3].block_size: must be a positive
// integer, got 0"). Unknown fields are ignored (publishers add their own, e.g. Mooncake's
// object_key). All functions are pure: safe from any thread.
//
// Hashes are accepted as JSON unsigned integers, negative integers (SGLang's signed i64
// hashes, read as their two's complement u64), or strings holding a decimal or 0x-hex
// number. Answers always write them as unsigned integers.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/events.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// A POST /v1/events body: a JSON array of RFC #1527 events, or {"events": [...]}.
// Every event is checked with ValidateBlockEvent; one bad event rejects the batch.
// The object form may name its writer for exactly-once application: "writer_id" and
// "writer_sequence" (both or neither; events.h WriterPosition), stored in `*writer` when
// given (left empty otherwise).
[[nodiscard]] Result<std::vector<BlockEvent>> DecodeEventBatch(
    std::string_view body, std::optional<WriterPosition>* writer = nullptr);

// A prefix lookup, from any of the three request dialects.
struct LookupRequest {
  ContextKey context;
  // Exactly one is the query: token_ids (only complete blocks count) or seq_hashes.
  bool by_hash = false;
  std::vector<uint32_t> token_ids;
  std::vector<uint64_t> seq_hashes;
  // Report only this instance (all its dp ranks); empty = every instance.
  std::string instance_id;
  // Report the per-block locations of shared-backend matches.
  bool include_locations = true;
  // Read consistency (kvatlas extension, every dialect): answer only once this server has
  // applied at least this revision (read-your-writes after a write answered revision R)...
  std::optional<uint64_t> min_revision;
  // ...or linearizably: through the leader, after everything committed before the request
  // ("consistency": "linearizable"; default "any" = this server's applied state).
  bool linearizable = false;
};

// POST /v1/lookup: tenant_id?, model_name, lora_name?, block_size, additional_salt?,
// token_ids | seq_hashes, instance_id?, include_locations?, min_revision?, consistency?.
[[nodiscard]] Result<LookupRequest> DecodeLookupRequest(std::string_view body);
// POST /query: model, lora_name?, lora_id? (deprecated, ignored), token_ids, tenant_id?,
// instance_id?, block_size, cache_salt?.
[[nodiscard]] Result<LookupRequest> DecodeConductorQuery(std::string_view body);
// POST /query_by_hash: as /query with seq_hashes (older drafts: block_hash) for token_ids.
[[nodiscard]] Result<LookupRequest> DecodeConductorQueryByHash(std::string_view body);

// A hash written as text: decimal ("123", or "-5" for a signed i64) or 0x-hex ("0x7b").
// kInvalidArgument otherwise. For path segments and query parameters.
[[nodiscard]] Result<uint64_t> ParseHashText(std::string_view text);

// Block counts of a prefix match, cumulative by tier: gpu ≤ cpu (GPU ∪ CPU) ≤ disk
// (GPU ∪ CPU ∪ DISK, the longest match of an instance).
// Prefix lengths in blocks. gpu ≤ cpu ≤ disk are cumulative (GPU, GPU∪CPU, GPU∪CPU∪DISK);
// cpu_only and disk_only are per medium alone, as the Conductor API reports media.
struct TierBlocks {
  uint32_t gpu = 0;
  uint32_t cpu = 0;
  uint32_t disk = 0;
  uint32_t cpu_only = 0;
  uint32_t disk_only = 0;

  friend bool operator==(const TierBlocks&, const TierBlocks&) = default;
};

struct RankMatch {
  uint32_t dp_rank = 0;
  TierBlocks blocks;

  friend bool operator==(const RankMatch&, const RankMatch&) = default;
};

// An instance (a holder id over its dp ranks). Its values are the max over its ranks.
struct InstanceMatch {
  std::string instance_id;
  TierBlocks blocks;
  std::vector<RankMatch> dp_ranks;  // ascending dp_rank, ranks with a match only

  friend bool operator==(const InstanceMatch&, const InstanceMatch&) = default;
};

// A shared backend (SHARED tier) holding a prefix, with a location per matched block.
struct SharedMatch {
  std::string backend_id;
  uint32_t dp_rank = 0;
  uint32_t blocks = 0;
  std::vector<std::string> locations;  // empty unless requested

  friend bool operator==(const SharedMatch&, const SharedMatch&) = default;
};

struct LookupAnswer {
  Revision revision = 0;
  ContextKey context;
  uint32_t blocks_queried = 0;  // complete blocks of the query (after the lookup cap)
  uint32_t blocks_found = 0;    // leading blocks some holder has, in any tier
  std::vector<InstanceMatch> instances;
  std::vector<SharedMatch> shared;

  friend bool operator==(const LookupAnswer&, const LookupAnswer&) = default;
};

// The /v1/lookup answer (block counts, plus tokens where named so).
[[nodiscard]] std::string EncodeLookupAnswer(const LookupAnswer& answer);
// The Conductor /query answer, in tokens:
// {tenant: {instance: {longest_matched, GPU, CPU, DISK, DP: {rank: n}}}}. Shared
// backends are not instances there and are left out.
[[nodiscard]] std::string EncodeConductorAnswer(const LookupAnswer& answer);

struct IngestAnswer {
  Revision revision = 0;  // the revision the batch was applied at
  uint64_t events = 0;
  uint64_t blocks = 0;  // blocks named by the batch's stored and removed events
};
[[nodiscard]] std::string EncodeIngestAnswer(const IngestAnswer& answer);

// {"code": "<wire name>", "message": "..."}: the body of every REST error.
[[nodiscard]] std::string EncodeErrorBody(const Status& status);

// value.dump(), except that it cannot throw: strings that did not come through the JSON
// parser (URL parameters, names from storage) may hold invalid UTF-8, which is replaced.
[[nodiscard]] std::string DumpJson(const nlohmann::json& value);

// {"tenant_id", "model_name", "lora_name", "block_size", "additional_salt"}.
[[nodiscard]] nlohmann::json ContextKeyToJson(const ContextKey& context);

}  // namespace kvatlas
