// JSON codecs of the kvatlas REST wire types (docs/api.md): the event batch of
// POST /v1/events, the lookup requests of /v1/lookup and of the Mooncake Conductor
// /query and /query_by_hash, and the answers. Shared by the server and, later, clients.
//
// Decoders validate completely and never throw: every problem is kInvalidArgument with a
// message that starts with the field path ("events[3].block_size: must be a positive
// integer, got 0"). Bodies are parsed by ParseJsonBody (depth limit, no duplicate
// keys); names are bounded by limits.h, as the binary protocol's decoders bound them. Unknown
// fields are ignored (publishers add their own, e.g. Mooncake's object_key). All functions are
// pure: safe from any thread.
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
#include "kvatlas/common/export.h"
#include "kvatlas/common/lookup.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// The lookup types themselves are lookup.h; this header is their JSON.

// A POST /v1/events body: a JSON array of RFC #1527 events, or {"events": [...]}.
// Every event is checked with ValidateBlockEvent; one bad event rejects the batch.
// The object form may name its writer for exactly-once application: "writer_id" and
// "writer_sequence" (both or neither; events.h WriterPosition), stored in `*writer` when
// given (left empty otherwise).
[[nodiscard]] KVATLAS_EXPORT Result<std::vector<BlockEvent>> DecodeEventBatch(
    std::string_view body, std::optional<WriterPosition>* writer = nullptr);

// POST /v1/lookup: tenant_id?, model_name, lora_name?, block_size, additional_salt?,
// token_ids | seq_hashes, instance_id?, include_locations?, min_revision?, consistency?.
[[nodiscard]] KVATLAS_EXPORT Result<LookupRequest> DecodeLookupRequest(std::string_view body);
// POST /query: model, lora_name?, lora_id? (deprecated, ignored), token_ids, tenant_id?,
// instance_id?, block_size, cache_salt?.
[[nodiscard]] KVATLAS_EXPORT Result<LookupRequest> DecodeConductorQuery(std::string_view body);
// POST /query_by_hash: as /query with seq_hashes (older drafts: block_hash) for token_ids.
[[nodiscard]] KVATLAS_EXPORT Result<LookupRequest> DecodeConductorQueryByHash(
    std::string_view body);

// A hash written as text: decimal ("123", or "-5" for a signed i64) or 0x-hex ("0x7b").
// kInvalidArgument otherwise. For path segments and query parameters.
[[nodiscard]] KVATLAS_EXPORT Result<uint64_t> ParseHashText(std::string_view text);

// The /v1/lookup answer (block counts, plus tokens where named so).
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLookupAnswer(const LookupAnswer& answer);
// The Conductor /query answer, in tokens:
// {tenant: {instance: {longest_matched, GPU, CPU, DISK, DP: {rank: n}}}}. Shared
// backends are not instances there and are left out.
[[nodiscard]] KVATLAS_EXPORT std::string EncodeConductorAnswer(const LookupAnswer& answer);

// A prefix predicted on an instance's rank (the server's approximate mode,
// docs/routing.md §Approximate mode), in blocks.
struct ConductorPrediction {
  std::string instance_id;
  uint32_t dp_rank = 0;
  uint32_t blocks = 0;
};
// As above, with predictions: an instance with one gets "PREDICTED" (tokens, its best
// rank's), and its longest_matched and DP ranks count the predicted prefix where it is
// longer than the known one; an instance known only by a prediction is added with GPU, CPU
// and DISK 0.
[[nodiscard]] KVATLAS_EXPORT std::string EncodeConductorAnswer(
    const LookupAnswer& answer, const std::vector<ConductorPrediction>& predicted);

[[nodiscard]] KVATLAS_EXPORT std::string EncodeIngestAnswer(const IngestAnswer& answer);

// {"code": "<wire name>", "message": "..."}: the body of every REST error.
[[nodiscard]] KVATLAS_EXPORT std::string EncodeErrorBody(const Status& status);

// Parses a REST request body, the one way every REST route does. Refused with
// kInvalidArgument before the document is built: containers nested deeper than
// kMaxJsonDepth (limits.h; "body: nested deeper than 64 levels"), a key given twice in one
// object ("body: duplicate key \"model_name\"") and invalid JSON ("body: invalid JSON: ...").
[[nodiscard]] KVATLAS_EXPORT Status ParseJsonBody(std::string_view body, nlohmann::json* out);

// The start of value.dump() for error messages: at most `max_chars` characters, the last
// three "..." when cut. Built with an explicit stack, never rendering more than it shows:
// safe and cheap for values of any depth and size.
[[nodiscard]] KVATLAS_EXPORT std::string PreviewJson(const nlohmann::json& value,
                                                     size_t max_chars = 48);

// value.dump(), except that it cannot throw: strings that did not come through the JSON
// parser (URL parameters, names from storage) may hold invalid UTF-8, which is replaced.
[[nodiscard]] KVATLAS_EXPORT std::string DumpJson(const nlohmann::json& value);

// {"tenant_id", "model_name", "lora_name", "block_size", "additional_salt"}.
[[nodiscard]] KVATLAS_EXPORT nlohmann::json ContextKeyToJson(const ContextKey& context);
// The context fields of JSON object `object` as ContextKeyToJson writes them, read as every
// request body's are (tenant_id absent or empty: "default"; model_name and a positive
// block_size required); errors name `path`.field. Name limits are the caller's to check.
[[nodiscard]] KVATLAS_EXPORT Result<ContextKey> ContextKeyFromJson(const nlohmann::json& object,
                                                                   const std::string& path);

}  // namespace kvatlas
