// The JSON shapes of POST /v1/route (docs/api.md §Routing). The lookup part of the request
// is the /v1/lookup decoder's (it ignores the route's own fields); the rest is read here.
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/limits.h"
#include "kvatlas/common/routing.h"

namespace kvatlas {
namespace {

using nlohmann::json;

constexpr size_t kMaxCandidates = 65536;

Status Invalid(const std::string& path, std::string_view problem, const json* value = nullptr) {
  std::string message = path + ": " + std::string(problem);
  if (value != nullptr) message += ", got " + PreviewJson(*value);
  return Status::InvalidArgument(std::move(message));
}

const json* Field(const json& object, std::string_view key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::optional<uint64_t>> OptionalU64(const json& object, std::string_view key,
                                            const std::string& path) {
  const json* v = Field(object, key);
  if (v == nullptr) return std::optional<uint64_t>();
  if (!v->is_number_unsigned()) return Invalid(path, "must be an unsigned integer", v);
  return std::optional<uint64_t>(v->get<uint64_t>());
}

Status ReadNumber(const json& object, std::string_view key, const std::string& path, double* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Invalid(path, "must be a number", v);
  *out = v->get<double>();
  return Status::Ok();
}

Result<RouteCandidate> DecodeCandidate(const json& value, const std::string& path) {
  if (!value.is_object()) return Invalid(path, "must be a JSON object", &value);
  RouteCandidate candidate;
  const json* id = Field(value, "instance_id");
  if (id == nullptr) return Invalid(path + ".instance_id", "is required (a non-empty string)");
  if (!id->is_string() || id->get_ref<const std::string&>().empty()) {
    return Invalid(path + ".instance_id", "must be a non-empty string", id);
  }
  candidate.instance_id = id->get<std::string>();
  KVATLAS_RETURN_IF_ERROR(
      CheckLength(path + ".", "instance_id", candidate.instance_id, kMaxNameBytes));
  KVATLAS_ASSIGN_OR_RETURN(std::optional<uint64_t> rank,
                           OptionalU64(value, "dp_rank", path + ".dp_rank"));
  if (rank) {
    if (*rank > std::numeric_limits<uint32_t>::max()) {
      return Invalid(path + ".dp_rank", "must be an integer from 0 to 4294967295");
    }
    candidate.dp_rank = static_cast<uint32_t>(*rank);
  }
  KVATLAS_ASSIGN_OR_RETURN(
      std::optional<uint64_t> queued,
      OptionalU64(value, "queued_prefill_tokens", path + ".queued_prefill_tokens"));
  candidate.queued_prefill_tokens = queued.value_or(0);
  KVATLAS_ASSIGN_OR_RETURN(
      std::optional<uint64_t> decode,
      OptionalU64(value, "active_decode_blocks", path + ".active_decode_blocks"));
  candidate.active_decode_blocks = decode.value_or(0);
  if (const json* predict = Field(value, "predict"); predict != nullptr) {
    if (!predict->is_boolean()) return Invalid(path + ".predict", "must be true or false", predict);
    candidate.predict = predict->get<bool>();
  }
  return candidate;
}

Status DecodeWeights(const json& doc, TierWeights* weights) {
  const json* v = Field(doc, "weights");
  if (v == nullptr) return Status::Ok();
  if (!v->is_object()) return Invalid("weights", "must be an object of tier weights", v);
  for (const auto& [key, value] : v->items()) {
    // The key is the client's: named by its start, as PreviewJson cuts values.
    const std::string path = "weights." + (key.size() > 48 ? key.substr(0, 45) + "..." : key);
    std::string upper = key;
    for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const bool predicted = upper == "PREDICTED";
    const std::optional<Tier> tier = ParseTierName(key);
    if (!tier && !predicted) {
      return Invalid(path, "is not a tier (GPU, CPU, DISK, SHARED or PREDICTED)");
    }
    if (!value.is_number()) return Invalid(path, "must be a number", &value);
    const double w = value.get<double>();
    if (predicted) {
      weights->predicted = w;
      continue;
    }
    switch (*tier) {
      case Tier::kGpu:
        weights->gpu = w;
        break;
      case Tier::kCpu:
        weights->cpu = w;
        break;
      case Tier::kDisk:
        weights->disk = w;
        break;
      case Tier::kShared:
        weights->shared = w;
        break;
    }
  }
  return Status::Ok();
}

Result<RoutingRequest> DecodeRoute(std::string_view body) {
  RoutingRequest request;
  KVATLAS_ASSIGN_OR_RETURN(request.lookup, DecodeLookupRequest(body));
  request.lookup.instance_id.clear();
  request.lookup.include_locations = false;
  json doc;
  KVATLAS_RETURN_IF_ERROR(ParseJsonBody(body, &doc));  // refused by DecodeLookupRequest if bad
  const json* candidates = Field(doc, "candidates");
  if (candidates == nullptr) {
    return Invalid("candidates", "is required (an array of {instance_id, ...})");
  }
  if (!candidates->is_array() || candidates->empty()) {
    return Invalid("candidates", "must be a non-empty array of candidates", candidates);
  }
  if (candidates->size() > kMaxCandidates) {
    return Invalid("candidates", "at most " + std::to_string(kMaxCandidates) + " candidates");
  }
  for (size_t i = 0; i < candidates->size(); ++i) {
    KVATLAS_ASSIGN_OR_RETURN(
        RouteCandidate candidate,
        DecodeCandidate((*candidates)[i], "candidates[" + std::to_string(i) + "]"));
    request.candidates.push_back(std::move(candidate));
  }
  RoutingOptions& options = request.options;
  KVATLAS_RETURN_IF_ERROR(DecodeWeights(doc, &options.weights));
  KVATLAS_RETURN_IF_ERROR(
      ReadNumber(doc, "prefill_scale", "prefill_scale", &options.prefill_scale));
  KVATLAS_RETURN_IF_ERROR(ReadNumber(doc, "queue_scale", "queue_scale", &options.queue_scale));
  KVATLAS_RETURN_IF_ERROR(ReadNumber(doc, "decode_scale", "decode_scale", &options.decode_scale));
  KVATLAS_RETURN_IF_ERROR(
      ReadNumber(doc, "replica_credit", "replica_credit", &options.replica_credit));
  KVATLAS_RETURN_IF_ERROR(
      ReadNumber(doc, "excess_queue_scale", "excess_queue_scale", &options.excess_queue_scale));
  KVATLAS_RETURN_IF_ERROR(ReadNumber(doc, "excess_queue_epsilon", "excess_queue_epsilon",
                                     &options.excess_queue_epsilon));
  KVATLAS_RETURN_IF_ERROR(ReadNumber(doc, "temperature", "temperature", &options.temperature));
  KVATLAS_ASSIGN_OR_RETURN(options.seed, OptionalU64(doc, "seed", "seed"));
  KVATLAS_RETURN_IF_ERROR(ValidateRoutingOptions(options));
  return request;
}

json TierJson(uint32_t gpu, uint32_t cpu, uint32_t disk, uint32_t shared) {
  return json{{"GPU", gpu}, {"CPU", cpu}, {"DISK", disk}, {"SHARED", shared}};
}

}  // namespace

Result<RoutingRequest> DecodeRouteRequest(std::string_view body) {
  try {
    return DecodeRoute(body);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("body: ") + e.what());
  }
}

std::string EncodeRouteAnswer(const RoutingAnswer& answer) {
  json ranked = json::array();
  for (size_t i = 0; i < answer.ranked.size(); ++i) {
    const ScoredCandidate& s = answer.ranked[i];
    json item = {
        {"rank", i},
        {"index", s.index},
        {"instance_id", s.candidate.instance_id},
        {"cost", s.cost},
        {"probability", s.probability},
        {"matched", TierJson(s.matched.gpu, s.matched.cpu, s.matched.disk, s.matched.shared)},
        {"blocks_from", TierJson(s.gpu_blocks, s.cpu_blocks, s.disk_blocks, s.shared_blocks)},
        {"predicted_blocks", s.predicted_blocks},
        {"credit", s.credit},
        {"new_prefill_blocks", s.new_prefill_blocks},
        {"queued_prefill_blocks", s.queued_prefill_blocks},
        {"prefill_cost", s.prefill_cost},
        {"decode_cost", s.decode_cost},
        {"queued_prefill_tokens", s.candidate.queued_prefill_tokens},
        {"active_decode_blocks", s.candidate.active_decode_blocks}};
    if (s.candidate.dp_rank) item["dp_rank"] = *s.candidate.dp_rank;
    if (s.matched.predicted > 0) item["matched"]["PREDICTED"] = s.matched.predicted;
    ranked.push_back(std::move(item));
  }
  json out = {{"revision", answer.revision},
              {"prompt_blocks", answer.prompt_blocks},
              {"blocks_found", answer.blocks_found},
              {"candidates", std::move(ranked)}};
  if (!answer.ranked.empty()) {
    out["instance_id"] = answer.ranked.front().candidate.instance_id;
    if (answer.ranked.front().candidate.dp_rank) {
      out["dp_rank"] = *answer.ranked.front().candidate.dp_rank;
    }
  }
  return DumpJson(out);
}

}  // namespace kvatlas
