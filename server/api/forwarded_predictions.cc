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

// The fields of one element of "predictions", read with its path for errors.
class Reader {
 public:
  Reader(const json& object, std::string path) : object_(object), path_(std::move(path)) {}

  Status Invalid(std::string_view field, const std::string& problem) const {
    return Status::InvalidArgument(path_ + "." + std::string(field) + ": " + problem);
  }

  // `required`: present and non-empty. Absent: `*out` is left as is.
  Status String(std::string_view field, bool required, std::string* out) const {
    const auto it = object_.find(field);
    if (it == object_.end() || it->is_null()) {
      return required ? Invalid(field, "is required (a non-empty string)") : Status::Ok();
    }
    if (!it->is_string() || (required && it->get_ref<const std::string&>().empty())) {
      return Invalid(field,
                     std::string(required ? "must be a non-empty string" : "must be a string") +
                         ", got " + PreviewJson(*it));
    }
    *out = it->get<std::string>();
    return Status::Ok();
  }

  // An integer from `min` to `max`; absent: `*out` is left as is unless `required`.
  Status Uint32(std::string_view field, bool required, uint32_t min, uint32_t* out) const {
    constexpr uint32_t max = std::numeric_limits<uint32_t>::max();
    const auto it = object_.find(field);
    if (it == object_.end() || it->is_null()) {
      return required ? Invalid(field, "is required") : Status::Ok();
    }
    if (!it->is_number_unsigned() || it->get<uint64_t>() < min || it->get<uint64_t>() > max) {
      return Invalid(field, "must be an integer from " + std::to_string(min) + " to " +
                                std::to_string(max) + ", got " + PreviewJson(*it));
    }
    *out = static_cast<uint32_t>(it->get<uint64_t>());
    return Status::Ok();
  }

 private:
  const json& object_;
  const std::string path_;
};

Result<PredictCommand> DecodePrediction(const json& value, const std::string& path) {
  if (!value.is_object()) {
    return Status::InvalidArgument(path + ": must be an object, got " + PreviewJson(value));
  }
  const Reader r(value, path);
  PredictCommand c;
  KVATLAS_RETURN_IF_ERROR(r.String("tenant_id", false, &c.context.tenant));
  KVATLAS_RETURN_IF_ERROR(r.String("model_name", true, &c.context.model));
  KVATLAS_RETURN_IF_ERROR(r.String("lora_name", false, &c.context.lora_name));
  KVATLAS_RETURN_IF_ERROR(r.Uint32("block_size", true, 1, &c.context.block_size));
  KVATLAS_RETURN_IF_ERROR(r.String("additional_salt", false, &c.context.salt));
  KVATLAS_RETURN_IF_ERROR(CheckContextLimits(c.context, path + "."));
  KVATLAS_RETURN_IF_ERROR(r.String("instance_id", true, &c.holder.id));
  KVATLAS_RETURN_IF_ERROR(CheckLength(path + ".", "instance_id", c.holder.id, kMaxNameBytes));
  KVATLAS_RETURN_IF_ERROR(r.Uint32("dp_rank", false, 0, &c.holder.dp_rank));
  const auto keys = value.find("keys");
  if (keys == value.end() || !keys->is_array() || keys->empty()) {
    return r.Invalid("keys", "must be a non-empty array of block keys (unsigned integers)");
  }
  c.hashes.reserve(keys->size());
  for (size_t i = 0; i < keys->size(); ++i) {
    const json& key = (*keys)[i];
    if (!key.is_number_unsigned()) {
      return r.Invalid("keys[" + std::to_string(i) + "]",
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
    predictions.push_back({{"tenant_id", c.context.tenant},
                           {"model_name", c.context.model},
                           {"lora_name", c.context.lora_name},
                           {"block_size", c.context.block_size},
                           {"additional_salt", c.context.salt},
                           {"instance_id", c.holder.id},
                           {"dp_rank", c.holder.dp_rank},
                           {"keys", c.hashes}});
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
