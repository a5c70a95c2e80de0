#include "server/api/forwarded_predictions.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/limits.h"
#include "server/state/prediction_recorder.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

// Field `field` of `object`, or null when absent or JSON null (not given).
const json* Field(const json& object, std::string_view field) {
  const auto it = object.find(field);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Status Invalid(const std::string& path, std::string_view field, const std::string& problem) {
  return Status::InvalidArgument(path + "." + std::string(field) + ": " + problem);
}

Result<PredictCommand> DecodePrediction(const json& value, const std::string& path) {
  PredictCommand c;
  KVATLAS_ASSIGN_OR_RETURN(c.context, ContextKeyFromJson(value, path));
  KVATLAS_RETURN_IF_ERROR(CheckContextLimits(c.context, path + "."));
  const json* instance = Field(value, "instance_id");
  if (instance == nullptr) return Invalid(path, "instance_id", "is required (a non-empty string)");
  if (!instance->is_string() || instance->get_ref<const std::string&>().empty()) {
    return Invalid(path, "instance_id",
                   "must be a non-empty string, got " + PreviewJson(*instance));
  }
  c.holder.id = instance->get<std::string>();
  KVATLAS_RETURN_IF_ERROR(CheckLength(path + ".", "instance_id", c.holder.id, kMaxNameBytes));
  if (const json* rank = Field(value, "dp_rank"); rank != nullptr) {
    if (!rank->is_number_unsigned() ||
        rank->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return Invalid(path, "dp_rank",
                     "must be an integer from 0 to 4294967295, got " + PreviewJson(*rank));
    }
    c.holder.dp_rank = static_cast<uint32_t>(rank->get<uint64_t>());
  }
  const json* keys = Field(value, "keys");
  if (keys == nullptr || !keys->is_array() || keys->empty()) {
    return Invalid(path, "keys", "must be a non-empty array of block keys (unsigned integers)");
  }
  c.hashes.reserve(keys->size());
  for (size_t i = 0; i < keys->size(); ++i) {
    const json& key = (*keys)[i];
    if (!key.is_number_unsigned()) {
      return Invalid(path, "keys[" + std::to_string(i) + "]",
                     "must be an unsigned integer, got " + PreviewJson(key));
    }
    c.hashes.push_back(key.get<uint64_t>());
  }
  return c;
}

}  // namespace

std::string EncodeForwardedPredictions(const CommandBatch& batch) {
  json predictions = json::array();
  for (const Command& command : batch.commands) {
    const PredictCommand& c = std::get<PredictCommand>(command);
    json prediction = ContextKeyToJson(c.context);
    prediction["instance_id"] = c.holder.id;
    prediction["dp_rank"] = c.holder.dp_rank;
    prediction["keys"] = c.hashes;
    predictions.push_back(std::move(prediction));
  }
  return json{{"predictions", std::move(predictions)}}.dump();
}

Result<CommandBatch> DecodeForwardedPredictions(std::string_view body) {
  json doc;
  KVATLAS_RETURN_IF_ERROR(ParseJsonBody(body, &doc));
  if (!doc.is_object()) return Status::InvalidArgument("body: must be a JSON object");
  const auto predictions = doc.find("predictions");
  if (predictions == doc.end() || !predictions->is_array() || predictions->empty()) {
    return Status::InvalidArgument(
        "body.predictions: must be a non-empty array of {\"model_name\", \"block_size\", "
        "\"instance_id\", \"keys\", ...}");
  }
  if (predictions->size() > kMaxForwardedPredictions) {
    return Status::PayloadTooLarge("body.predictions: " + std::to_string(predictions->size()) +
                                   " predictions; one call carries at most " +
                                   std::to_string(kMaxForwardedPredictions));
  }
  CommandBatch batch;
  size_t keys = 0;
  for (size_t i = 0; i < predictions->size(); ++i) {
    const std::string path = "body.predictions[" + std::to_string(i) + "]";
    KVATLAS_ASSIGN_OR_RETURN(PredictCommand c, DecodePrediction((*predictions)[i], path));
    keys += c.hashes.size();
    if (keys > kMaxForwardedPredictionKeys) {
      return Status::PayloadTooLarge("body.predictions: more than " +
                                     std::to_string(kMaxForwardedPredictionKeys) +
                                     " keys in all (at " + path + "); one call carries at most " +
                                     std::to_string(kMaxForwardedPredictionKeys));
    }
    batch.commands.emplace_back(std::move(c));
  }
  return batch;
}

}  // namespace kvatlas::server
