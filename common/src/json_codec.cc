#include "kvatlas/common/json_codec.h"

#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/internal/names.h"
#include "kvatlas/common/limits.h"

namespace kvatlas {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

Status Invalid(const std::string& path, std::string_view problem) {
  return Status::InvalidArgument(path + ": " + std::string(problem));
}

Status InvalidValue(const std::string& path, std::string_view problem, const json& value) {
  return Invalid(path, std::string(problem) + ", got " + PreviewJson(value));
}

// Thrown by the parse callback to abandon a body as soon as it is known to be refused; the
// message is the whole error. Caught in ParseJsonBody, never escapes it.
struct RefusedBody {
  std::string message;
};

// A string's JSON text, from at most its first `max_chars` bytes (a longer one is cut
// anyway by the caller, so the rest need not be rendered).
std::string QuotedPrefix(const std::string& text, size_t max_chars) {
  return DumpJson(json(text.size() > max_chars ? text.substr(0, max_chars) : text));
}

Result<uint64_t> HashFrom(const json& value, const std::string& path) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  // SGLang publishes i64 hashes; the bits are the hash.
  if (value.is_number_integer()) return static_cast<uint64_t>(value.get<int64_t>());
  if (value.is_string()) {
    Result<uint64_t> parsed = ParseHashText(value.get_ref<const std::string&>());
    if (parsed.has_value()) return parsed;
  }
  return InvalidValue(path,
                      "must be a 64-bit hash (an unsigned or negative integer, or a decimal or "
                      "0x-hex string)",
                      value);
}

Result<uint32_t> U32From(const json& value, const std::string& path) {
  if (value.is_number_unsigned() && value.get<uint64_t>() <= kMaxU32) {
    return static_cast<uint32_t>(value.get<uint64_t>());
  }
  return InvalidValue(path, "must be an integer from 0 to 4294967295", value);
}

// Reads the fields of one JSON object. `path` names the object in messages ("events[3]";
// empty for a request body, whose fields are then named bare). Absent and JSON null both
// mean "not given", as in the RFC where most envelope fields are "T or null".
class Fields {
 public:
  Fields(const json& object, std::string path) : object_(object), path_(std::move(path)) {}

  std::string PathOf(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const json* Get(std::string_view key) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Result<std::string> String(std::string_view key, std::string fallback) const {
    const json* v = Get(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return InvalidValue(PathOf(key), "must be a string", *v);
    return v->get<std::string>();
  }

  Result<std::string> RequiredString(std::string_view key) const {
    const json* v = Get(key);
    if (v == nullptr) return Invalid(PathOf(key), "is required (a non-empty string)");
    if (!v->is_string() || v->get_ref<const std::string&>().empty()) {
      return InvalidValue(PathOf(key), "must be a non-empty string", *v);
    }
    return v->get<std::string>();
  }

  Result<bool> Bool(std::string_view key, bool fallback) const {
    const json* v = Get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return InvalidValue(PathOf(key), "must be true or false", *v);
    return v->get<bool>();
  }

  Result<std::optional<uint32_t>> OptionalU32(std::string_view key) const {
    const json* v = Get(key);
    if (v == nullptr) return std::optional<uint32_t>();
    KVATLAS_ASSIGN_OR_RETURN(uint32_t value, U32From(*v, PathOf(key)));
    return std::optional<uint32_t>(value);
  }

  Result<uint32_t> PositiveU32(std::string_view key) const {
    const json* v = Get(key);
    if (v == nullptr) return Invalid(PathOf(key), "is required (a positive integer)");
    if (!v->is_number_unsigned() || v->get<uint64_t>() == 0 || v->get<uint64_t>() > kMaxU32) {
      return InvalidValue(PathOf(key), "must be a positive integer", *v);
    }
    return static_cast<uint32_t>(v->get<uint64_t>());
  }

  Result<std::optional<uint64_t>> OptionalU64(std::string_view key) const {
    const json* v = Get(key);
    if (v == nullptr) return std::optional<uint64_t>();
    if (!v->is_number_unsigned())
      return InvalidValue(PathOf(key), "must be an unsigned integer", *v);
    return std::optional<uint64_t>(v->get<uint64_t>());
  }

  Result<std::optional<double>> OptionalNumber(std::string_view key) const {
    const json* v = Get(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return InvalidValue(PathOf(key), "must be a number", *v);
    return std::optional<double>(v->get<double>());
  }

  Result<std::optional<uint64_t>> OptionalHash(std::string_view key) const {
    const json* v = Get(key);
    if (v == nullptr) return std::optional<uint64_t>();
    KVATLAS_ASSIGN_OR_RETURN(uint64_t hash, HashFrom(*v, PathOf(key)));
    return std::optional<uint64_t>(hash);
  }

  Result<std::optional<std::vector<uint64_t>>> Hashes(std::string_view key) const {
    return Array<uint64_t>(key, "an array of hashes", HashFrom);
  }

  Result<std::optional<std::vector<uint32_t>>> Tokens(std::string_view key) const {
    return Array<uint32_t>(key, "an array of token ids", U32From);
  }

 private:
  template <typename T, typename Decode>
  Result<std::optional<std::vector<T>>> Array(std::string_view key, std::string_view what,
                                              Decode decode) const {
    const json* v = Get(key);
    if (v == nullptr) return std::optional<std::vector<T>>();
    const std::string path = PathOf(key);
    if (!v->is_array()) return InvalidValue(path, "must be " + std::string(what), *v);
    std::vector<T> out;
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      KVATLAS_ASSIGN_OR_RETURN(T item, decode((*v)[i], path + "[" + std::to_string(i) + "]"));
      out.push_back(item);
    }
    return std::optional<std::vector<T>>(std::move(out));
  }

  const json& object_;
  std::string path_;
};

// The context fields are named differently by the event/v1 dialect and by the Conductor.
constexpr ContextFieldNames kEventNames{"model_name", "additional_salt"};
constexpr ContextFieldNames kConductorNames{"model", "cache_salt"};

Result<ContextKey> DecodeContext(const Fields& fields, const ContextFieldNames& names) {
  ContextKey context;
  KVATLAS_ASSIGN_OR_RETURN(context.tenant, fields.String("tenant_id", "default"));
  if (context.tenant.empty()) context.tenant = "default";
  KVATLAS_ASSIGN_OR_RETURN(context.model, fields.RequiredString(names.model));
  KVATLAS_ASSIGN_OR_RETURN(context.lora_name, fields.String("lora_name", ""));
  KVATLAS_ASSIGN_OR_RETURN(context.block_size, fields.PositiveU32("block_size"));
  KVATLAS_ASSIGN_OR_RETURN(context.salt, fields.String(names.salt, ""));
  return context;
}

Result<EventType> DecodeEventType(const Fields& fields) {
  KVATLAS_ASSIGN_OR_RETURN(std::string name, fields.RequiredString("event_type"));
  for (EventType type : {EventType::kStored, EventType::kRemoved, EventType::kCleared}) {
    if (name == EventTypeName(type)) return type;
  }
  return Invalid(fields.PathOf("event_type"), "unknown event type " + PreviewJson(json(name)) +
                                                  " (expected stored, removed or cleared)");
}

Result<HolderKey> DecodeHolder(const Fields& fields) {
  HolderKey holder;
  // backend_id is the RFC #1527 name; instance_id is what engine-side publishers send.
  const bool use_instance = fields.Get("backend_id") == nullptr && fields.Get("instance_id");
  KVATLAS_ASSIGN_OR_RETURN(holder.id,
                           fields.RequiredString(use_instance ? "instance_id" : "backend_id"));
  KVATLAS_ASSIGN_OR_RETURN(std::optional<uint32_t> rank, fields.OptionalU32("dp_rank"));
  holder.dp_rank = rank.value_or(0);
  return holder;
}

// `location`: one string for every block, or an array with one string per block.
Result<std::vector<std::string>> DecodeLocations(const Fields& fields, size_t blocks) {
  const json* v = fields.Get("location");
  if (v == nullptr) return std::vector<std::string>();
  const std::string path = fields.PathOf("location");
  if (v->is_string()) return std::vector<std::string>(blocks, v->get<std::string>());
  if (!v->is_array()) return InvalidValue(path, "must be a string or an array of strings", *v);
  std::vector<std::string> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    if (!item.is_string()) {
      return InvalidValue(path + "[" + std::to_string(i) + "]", "must be a string", item);
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

// A stored event's "origin": "new" or "reused" (any case: vLLM sends "NEW" / "REUSED").
Result<std::optional<BlockOrigin>> DecodeOrigin(const Fields& fields) {
  const json* v = fields.Get("origin");
  if (v == nullptr) return std::optional<BlockOrigin>();
  if (v->is_string()) {
    if (std::optional<BlockOrigin> origin = ParseBlockOrigin(v->get_ref<const std::string&>())) {
      return origin;
    }
  }
  return InvalidValue(fields.PathOf("origin"), "must be \"new\" or \"reused\"", *v);
}

Result<BlockEvent> DecodeEvent(const json& value, const std::string& path) {
  if (!value.is_object()) return InvalidValue(path, "must be a JSON object", value);
  const Fields fields(value, path);
  BlockEvent event;
  KVATLAS_ASSIGN_OR_RETURN(event.type, DecodeEventType(fields));
  KVATLAS_ASSIGN_OR_RETURN(event.event_id, fields.OptionalU64("event_id"));
  KVATLAS_ASSIGN_OR_RETURN(event.timestamp, fields.OptionalNumber("timestamp"));
  KVATLAS_ASSIGN_OR_RETURN(event.context, DecodeContext(fields, kEventNames));
  KVATLAS_ASSIGN_OR_RETURN(event.holder, DecodeHolder(fields));
  if (fields.Get("medium") != nullptr) {
    KVATLAS_ASSIGN_OR_RETURN(event.medium, fields.String("medium", ""));
    event.tier = TierFromMedium(*event.medium, &event.medium_known);
  }
  if (event.type != EventType::kCleared) {
    KVATLAS_ASSIGN_OR_RETURN(std::optional<std::vector<uint64_t>> hashes,
                             fields.Hashes("seq_hashes"));
    if (hashes) event.seq_hashes = std::move(*hashes);
    KVATLAS_ASSIGN_OR_RETURN(event.base_block_idx, fields.OptionalU32("base_block_idx"));
  }
  if (event.type == EventType::kStored) {
    KVATLAS_ASSIGN_OR_RETURN(event.parent_hash, fields.OptionalHash("parent_hash"));
    KVATLAS_ASSIGN_OR_RETURN(event.token_ids, fields.Tokens("token_ids"));
    if (event.token_ids && event.token_ids->empty()) event.token_ids.reset();  // [] = not given
    KVATLAS_ASSIGN_OR_RETURN(event.locations, DecodeLocations(fields, event.BlockCount()));
    KVATLAS_ASSIGN_OR_RETURN(event.origin, DecodeOrigin(fields));
  }
  if (event.type == EventType::kCleared) {
    KVATLAS_ASSIGN_OR_RETURN(const std::string scope, fields.String("scope", "context"));
    if (scope != "context" && scope != "holder") {
      return InvalidValue(fields.PathOf("scope"), "must be \"context\" or \"holder\"",
                          *fields.Get("scope"));
    }
    event.clear_all_contexts = scope == "holder";
  }
  KVATLAS_RETURN_IF_ERROR(ValidateBlockEvent(event, path));
  return event;
}

// Which inputs a lookup dialect takes.
enum class QueryInput { kTokensOrHashes, kTokens, kHashes };

Result<LookupRequest> DecodeQuery(std::string_view body, const ContextFieldNames& names,
                                  QueryInput input) {
  json doc;
  KVATLAS_RETURN_IF_ERROR(ParseJsonBody(body, &doc));
  if (!doc.is_object()) return InvalidValue("body", "must be a JSON object", doc);
  const Fields fields(doc, "");
  LookupRequest request;
  KVATLAS_ASSIGN_OR_RETURN(request.context, DecodeContext(fields, names));
  KVATLAS_RETURN_IF_ERROR(CheckContextLimits(request.context, "", names));
  KVATLAS_ASSIGN_OR_RETURN(request.instance_id, fields.String("instance_id", ""));
  KVATLAS_RETURN_IF_ERROR(CheckLength("", "instance_id", request.instance_id, kMaxNameBytes));
  KVATLAS_ASSIGN_OR_RETURN(request.min_revision, fields.OptionalU64("min_revision"));
  KVATLAS_ASSIGN_OR_RETURN(const std::string consistency, fields.String("consistency", "any"));
  if (consistency != "any" && consistency != "linearizable") {
    return Invalid("consistency", "must be \"any\" or \"linearizable\"");
  }
  request.linearizable = consistency == "linearizable";
  // lora_id (Conductor, deprecated) is ignored, as the Conductor documents.
  std::optional<std::vector<uint32_t>> tokens;
  std::optional<std::vector<uint64_t>> hashes;
  if (input != QueryInput::kHashes) {
    KVATLAS_ASSIGN_OR_RETURN(tokens, fields.Tokens("token_ids"));
  }
  if (input != QueryInput::kTokens) {
    KVATLAS_ASSIGN_OR_RETURN(hashes, fields.Hashes("seq_hashes"));
  }
  if (input == QueryInput::kHashes && !hashes) {
    KVATLAS_ASSIGN_OR_RETURN(hashes, fields.Hashes("block_hash"));  // older drafts' name
  }
  if (input == QueryInput::kTokensOrHashes) {
    KVATLAS_ASSIGN_OR_RETURN(request.include_locations, fields.Bool("include_locations", true));
    if (tokens && hashes) return Invalid("token_ids", "give token_ids or seq_hashes, not both");
    if (!tokens && !hashes) return Invalid("token_ids", "is required (or seq_hashes)");
  }
  if (input == QueryInput::kTokens && !tokens) return Invalid("token_ids", "is required");
  if (input == QueryInput::kHashes && !hashes) return Invalid("seq_hashes", "is required");
  request.by_hash = hashes.has_value();
  if (tokens) request.token_ids = std::move(*tokens);
  if (hashes) request.seq_hashes = std::move(*hashes);
  return request;
}

// Every decoder runs behind this: json accessors are checked before use, so an exception
// here is a bug in this file, but it must still not escape into a network thread.
template <typename F>
auto Guarded(F&& decode) -> decltype(decode()) {
  try {
    return decode();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("body: ") + e.what());
  }
}

uint64_t Tokens(uint32_t blocks, uint32_t block_size) {
  return static_cast<uint64_t>(blocks) * block_size;
}

json Amount(uint32_t blocks, uint32_t block_size) {
  return json{{"blocks", blocks}, {"tokens", Tokens(blocks, block_size)}};
}

// {"longest_matched": {blocks, tokens}, "tiers": {GPU, CPU, DISK} (cumulative),
//  "media": {GPU, CPU, DISK} (each medium alone)} of an instance or rank, in blocks.
json MatchJson(const TierBlocks& blocks, uint32_t block_size) {
  return json{
      {"longest_matched", Amount(blocks.disk, block_size)},
      {"tiers", {{"GPU", blocks.gpu}, {"CPU", blocks.cpu}, {"DISK", blocks.disk}}},
      {"media", {{"GPU", blocks.gpu}, {"CPU", blocks.cpu_only}, {"DISK", blocks.disk_only}}}};
}

// "writer_id" + "writer_sequence" of a POST /v1/events object: both or neither.
Result<std::optional<WriterPosition>> DecodeWriter(const json& doc) {
  const auto id = doc.find("writer_id");
  const auto sequence = doc.find("writer_sequence");
  if (id == doc.end() && sequence == doc.end()) return std::optional<WriterPosition>();
  if (id == doc.end()) return Invalid("writer_id", "is required with writer_sequence");
  if (sequence == doc.end()) return Invalid("writer_sequence", "is required with writer_id");
  if (!id->is_string()) return InvalidValue("writer_id", "must be a string", *id);
  if (!sequence->is_number_unsigned()) {
    return InvalidValue("writer_sequence", "must be a positive integer", *sequence);
  }
  WriterPosition writer{id->get<std::string>(), sequence->get<uint64_t>()};
  KVATLAS_RETURN_IF_ERROR(ValidateWriterPosition(writer, ""));
  return std::optional<WriterPosition>(std::move(writer));
}

// "report_mode" of a POST /v1/events object: "incremental" (the default) or "full" (true).
Result<bool> DecodeReportMode(const json& doc) {
  const auto it = doc.find("report_mode");
  if (it == doc.end() || it->is_null()) return false;
  if (it->is_string()) {
    const std::string& mode = it->get_ref<const std::string&>();
    if (EqualsIgnoreCase(mode, "incremental")) return false;
    if (EqualsIgnoreCase(mode, "full")) return true;
  }
  return InvalidValue("report_mode", "must be \"incremental\" or \"full\"", *it);
}

}  // namespace

Result<std::vector<BlockEvent>> DecodeEventBatch(std::string_view body,
                                                 std::optional<WriterPosition>* writer) {
  return Guarded([&]() -> Result<std::vector<BlockEvent>> {
    json doc;
    KVATLAS_RETURN_IF_ERROR(ParseJsonBody(body, &doc));
    const json* events = &doc;
    bool full_report = false;
    if (doc.is_object()) {
      const auto it = doc.find("events");
      if (it == doc.end()) return Invalid("events", "is required (an array of events)");
      events = &*it;
      if (!events->is_array()) return InvalidValue("events", "must be an array of events", *events);
      KVATLAS_ASSIGN_OR_RETURN(std::optional<WriterPosition> position, DecodeWriter(doc));
      if (writer != nullptr) *writer = std::move(position);
      KVATLAS_ASSIGN_OR_RETURN(full_report, DecodeReportMode(doc));
    } else if (!doc.is_array()) {
      return InvalidValue("body", "must be a JSON array of events or {\"events\": [...]}", doc);
    }
    std::vector<BlockEvent> out;
    out.reserve(events->size());
    for (size_t i = 0; i < events->size(); ++i) {
      KVATLAS_ASSIGN_OR_RETURN(BlockEvent event,
                               DecodeEvent((*events)[i], "events[" + std::to_string(i) + "]"));
      // Full report mode (vLLM's): a store without a parent re-reports a prefix hit.
      if (full_report && event.type == EventType::kStored && !event.origin && !event.parent_hash) {
        event.origin = BlockOrigin::kReused;
      }
      out.push_back(std::move(event));
    }
    return out;
  });
}

Result<LookupRequest> DecodeLookupRequest(std::string_view body) {
  return Guarded([&] { return DecodeQuery(body, kEventNames, QueryInput::kTokensOrHashes); });
}

Result<LookupRequest> DecodeConductorQuery(std::string_view body) {
  return Guarded([&] { return DecodeQuery(body, kConductorNames, QueryInput::kTokens); });
}

Result<LookupRequest> DecodeConductorQueryByHash(std::string_view body) {
  return Guarded([&] { return DecodeQuery(body, kConductorNames, QueryInput::kHashes); });
}

Result<uint64_t> ParseHashText(std::string_view text) {
  const Status bad = Status::InvalidArgument("\"" + std::string(text.substr(0, 48)) +
                                             "\" is not a decimal or 0x-hex 64-bit hash");
  std::string_view digits = text;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
    base = 16;
  }
  const char* const end = digits.data() + digits.size();
  if (base == 10 && !digits.empty() && digits[0] == '-') {
    int64_t signed_value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), end, signed_value);
    if (ec != std::errc() || ptr != end) return bad;
    return static_cast<uint64_t>(signed_value);
  }
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value, base);
  if (digits.empty() || ec != std::errc() || ptr != end) return bad;
  return value;
}

Result<ContextKey> ContextKeyFromJson(const json& object, const std::string& path) {
  if (!object.is_object()) return InvalidValue(path, "must be an object", object);
  return DecodeContext(Fields(object, path), kEventNames);
}

json ContextKeyToJson(const ContextKey& context) {
  return json{{"tenant_id", context.tenant},
              {"model_name", context.model},
              {"lora_name", context.lora_name},
              {"block_size", context.block_size},
              {"additional_salt", context.salt}};
}

std::string EncodeLookupAnswer(const LookupAnswer& answer) {
  const uint32_t block_size = answer.context.block_size;
  json instances = json::array();
  for (const InstanceMatch& instance : answer.instances) {
    json ranks = json::array();
    for (const RankMatch& rank : instance.dp_ranks) {
      ranks.push_back(MatchJson(rank.blocks, block_size));
      ranks.back()["dp_rank"] = rank.dp_rank;
    }
    instances.push_back(MatchJson(instance.blocks, block_size));
    instances.back()["instance_id"] = instance.instance_id;
    instances.back()["dp_ranks"] = std::move(ranks);
  }
  json shared = json::array();
  for (const SharedMatch& match : answer.shared) {
    shared.push_back({{"backend_id", match.backend_id},
                      {"dp_rank", match.dp_rank},
                      {"matched", Amount(match.blocks, block_size)},
                      {"locations", match.locations}});
  }
  return DumpJson({{"revision", answer.revision},
                   {"context", ContextKeyToJson(answer.context)},
                   {"blocks_queried", answer.blocks_queried},
                   {"blocks_found", answer.blocks_found},
                   {"instances", std::move(instances)},
                   {"shared", std::move(shared)}});
}

std::string EncodeConductorAnswer(const LookupAnswer& answer) {
  return EncodeConductorAnswer(answer, {});
}

std::string EncodeConductorAnswer(const LookupAnswer& answer,
                                  const std::vector<ConductorPrediction>& predicted) {
  const uint32_t block_size = answer.context.block_size;
  json instances = json::object();
  for (const InstanceMatch& instance : answer.instances) {
    json dp = json::object();
    for (const RankMatch& rank : instance.dp_ranks) {
      dp[std::to_string(rank.dp_rank)] = Tokens(rank.blocks.disk, block_size);
    }
    instances[instance.instance_id] = {
        {"longest_matched", Tokens(instance.blocks.disk, block_size)},
        {"GPU", Tokens(instance.blocks.gpu, block_size)},
        {"CPU", Tokens(instance.blocks.cpu_only, block_size)},
        {"DISK", Tokens(instance.blocks.disk_only, block_size)},
        {"DP", std::move(dp)}};
  }
  for (const ConductorPrediction& p : predicted) {
    json& instance = instances[p.instance_id];
    if (instance.is_null()) {
      instance = {{"longest_matched", 0}, {"GPU", 0},      {"CPU", 0}, {"DISK", 0},
                  {"DP", json::object()}, {"PREDICTED", 0}};
    }
    const uint64_t tokens = Tokens(p.blocks, block_size);
    const auto raise = [tokens](json& value) {
      if (!value.is_number_unsigned() || value.get<uint64_t>() < tokens) value = tokens;
    };
    raise(instance["PREDICTED"]);
    raise(instance["longest_matched"]);
    raise(instance["DP"][std::to_string(p.dp_rank)]);
  }
  json out = json::object();
  out[answer.context.tenant] = std::move(instances);
  return DumpJson(out);
}

std::string EncodeIngestAnswer(const IngestAnswer& answer) {
  return DumpJson(
      {{"revision", answer.revision}, {"events", answer.events}, {"blocks", answer.blocks}});
}

Status ParseJsonBody(std::string_view body, json* out) {
  // One set of keys per open container (arrays' stay empty): duplicates are refused while
  // parsing, as is a container past kMaxJsonDepth, before it is allocated.
  std::vector<std::unordered_set<std::string>> open;
  open.reserve(kMaxJsonDepth);
  const json::parser_callback_t check = [&open](int /*depth*/, json::parse_event_t event,
                                                json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (open.size() >= static_cast<size_t>(kMaxJsonDepth)) {
          throw RefusedBody{"body: nested deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels"};
        }
        open.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.back().insert(parsed.get_ref<const std::string&>()).second) {
          throw RefusedBody{"body: duplicate key " + PreviewJson(parsed)};
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    *out = json::parse(body, check);
    return Status::Ok();
  } catch (const RefusedBody& refused) {
    return Status::InvalidArgument(refused.message);
  } catch (const json::exception& e) {
    // nlohmann prefixes "[json.exception.parse_error.101] "; the rest says where and why.
    std::string_view what = e.what();
    if (const size_t end = what.find("] "); end != std::string_view::npos)
      what.remove_prefix(end + 2);
    // It ends with the token read so far ("last read: '\"..."), which may be the whole body.
    constexpr size_t kMaxDetail = 200;
    if (what.size() > kMaxDetail) {
      return Status::InvalidArgument(
          "body: invalid JSON: " + std::string(what.substr(0, kMaxDetail - 3)) + "...");
    }
    return Status::InvalidArgument("body: invalid JSON: " + std::string(what));
  }
}

std::string PreviewJson(const json& value, size_t max_chars) {
  std::string out;
  // The containers being written, each with its next element: an explicit stack, so that
  // no value, however deep, makes this recurse.
  struct Open {
    const json* container;
    json::const_iterator next;
  };
  std::vector<Open> open;
  const auto begin = [&](const json& v) {
    if (v.is_object() || v.is_array()) {
      out += v.is_object() ? '{' : '[';
      open.push_back({&v, v.cbegin()});
    } else if (v.is_string()) {
      out += QuotedPrefix(v.get_ref<const std::string&>(), max_chars);
    } else {
      out += DumpJson(v);
    }
  };
  begin(value);
  while (!open.empty() && out.size() <= max_chars) {
    Open& top = open.back();
    const bool object = top.container->is_object();
    if (top.next == top.container->cend()) {
      out += object ? '}' : ']';
      open.pop_back();
      continue;
    }
    if (top.next != top.container->cbegin()) out += ',';
    if (object) out += QuotedPrefix(top.next.key(), max_chars) + ":";
    const json& element = *top.next;
    ++top.next;
    begin(element);  // may grow `open`: `top` is not used after this
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return out;
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string EncodeErrorBody(const Status& status) {
  return DumpJson({{"code", WireNameOf(status.code())}, {"message", status.message()}});
}

}  // namespace kvatlas
