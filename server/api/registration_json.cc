#include "server/api/registration_json.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "kvatlas/common/limits.h"
#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {
namespace {

// Reads the fields of one JSON object with uniform error messages.
class Fields {
 public:
  Fields(const nlohmann::json& json, std::string_view path) : json_(json), path_(path) {}

  Status Check() const {
    if (!json_.is_object())
      return Status::InvalidArgument(std::string(path_) + ": expected an object");
    return Status::Ok();
  }

  Status Invalid(std::string_view field, std::string_view problem) const {
    return Status::InvalidArgument(std::string(path_) + "." + std::string(field) + ": " +
                                   std::string(problem));
  }

  // A string field of at most `max_bytes`; left as is when absent or null. Required fields
  // must be non-empty.
  Status String(std::string_view field, bool required, size_t max_bytes, std::string* out) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) {
      return required ? Invalid(field, "is required") : Status::Ok();
    }
    if (!it->is_string()) return Invalid(field, "must be a string");
    const std::string& value = it->get_ref<const std::string&>();
    if (value.size() > max_bytes) {
      return TooLong(std::string(path_) + ".", field, value.size(), max_bytes);
    }
    *out = value;
    if (required && out->empty()) return Invalid(field, "must be a non-empty string");
    return Status::Ok();
  }

  // A boolean field; left as is when absent or null.
  Status Bool(std::string_view field, bool* out) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return Status::Ok();
    if (!it->is_boolean()) return Invalid(field, "must be true or false");
    *out = it->get<bool>();
    return Status::Ok();
  }

  Status Uint32(std::string_view field, bool required, bool positive, uint32_t* out) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) {
      return required ? Invalid(field, "is required") : Status::Ok();
    }
    const std::string_view what =
        positive ? "must be a positive integer" : "must be an integer >= 0";
    if (!it->is_number_integer()) return Invalid(field, what);
    if (it->is_number_unsigned()) {
      const uint64_t v = it->get<uint64_t>();
      if (v > std::numeric_limits<uint32_t>::max()) return Invalid(field, "is too large");
      *out = static_cast<uint32_t>(v);
    } else {
      const int64_t v = it->get<int64_t>();
      if (v < 0 || v > std::numeric_limits<uint32_t>::max()) return Invalid(field, what);
      *out = static_cast<uint32_t>(v);
    }
    if (positive && *out == 0) return Invalid(field, what);
    return Status::Ok();
  }

 private:
  const nlohmann::json& json_;
  std::string_view path_;
};

}  // namespace

// A publisher's report_mode (docs/engine-events.md §Report modes).
Result<ReportMode> ReportModeFromText(const Fields& f, EngineType type, std::string_view text) {
  const std::optional<ReportMode> mode = ParseReportMode(text);
  if (!mode) return f.Invalid("report_mode", "must be \"incremental\" or \"full\"");
  if (std::string problem = ReportModeProblem(type, *mode); !problem.empty()) {
    return f.Invalid("report_mode", problem);
  }
  return *mode;
}

Result<Registration> RegistrationFromJson(const nlohmann::json& json, std::string_view path) {
  const Fields f(json, path);
  KVATLAS_RETURN_IF_ERROR(f.Check());
  Registration r;
  // An instance that publishes no KV events (docs/routing.md §Approximate mode) has no
  // endpoint to follow: kvatlas predicts what it caches from the routes sent to it.
  bool publishes_events = true;
  KVATLAS_RETURN_IF_ERROR(f.Bool("publishes_events", &publishes_events));
  KVATLAS_RETURN_IF_ERROR(f.String("endpoint", publishes_events, kMaxEndpointBytes, &r.endpoint));
  if (!publishes_events) {
    if (!r.endpoint.empty()) {
      return f.Invalid("endpoint", "must be absent when publishes_events is false");
    }
    std::string replay;
    KVATLAS_RETURN_IF_ERROR(f.String("replay_endpoint", false, kMaxEndpointBytes, &replay));
    if (!replay.empty()) {
      return f.Invalid("replay_endpoint", "must be absent when publishes_events is false");
    }
  } else if (Status s = ZmqIngest::ValidateEndpoint(r.endpoint, /*for_bind=*/false); !s.ok()) {
    return f.Invalid("endpoint", s.message());
  }
  KVATLAS_RETURN_IF_ERROR(
      f.String("replay_endpoint", false, kMaxEndpointBytes, &r.replay_endpoint));
  if (!r.replay_endpoint.empty()) {
    if (Status s = ZmqIngest::ValidateEndpoint(r.replay_endpoint, false); !s.ok()) {
      return f.Invalid("replay_endpoint", s.message());
    }
  }
  std::string type;
  KVATLAS_RETURN_IF_ERROR(f.String("type", true, kMaxNameBytes, &type));
  const std::optional<EngineType> parsed = ParseEngineType(type);
  if (!parsed) return f.Invalid("type", "must be \"vLLM\", \"SGLang\" or \"Mooncake\"");
  r.type = *parsed;
  KVATLAS_RETURN_IF_ERROR(f.String("modelname", true, kMaxNameBytes, &r.model));
  KVATLAS_RETURN_IF_ERROR(f.String("lora_name", false, kMaxNameBytes, &r.lora_name));
  KVATLAS_RETURN_IF_ERROR(f.String("tenant_id", false, kMaxNameBytes, &r.tenant_id));
  if (r.tenant_id.empty()) r.tenant_id = "default";
  KVATLAS_RETURN_IF_ERROR(f.String("instance_id", true, kMaxNameBytes, &r.instance_id));
  if (r.instance_id.find('|') != std::string::npos) {
    return f.Invalid("instance_id", "must not contain '|' (it separates the registration key)");
  }
  KVATLAS_RETURN_IF_ERROR(f.Uint32("block_size", true, /*positive=*/true, &r.block_size));
  KVATLAS_RETURN_IF_ERROR(f.Uint32("dp_rank", false, /*positive=*/false, &r.dp_rank));
  KVATLAS_RETURN_IF_ERROR(f.String("additionalsalt", false, kMaxSaltBytes, &r.additional_salt));
  KVATLAS_RETURN_IF_ERROR(f.String("topic", false, kMaxTopicBytes, &r.topic));
  std::string report_mode;
  KVATLAS_RETURN_IF_ERROR(f.String("report_mode", false, kMaxNameBytes, &report_mode));
  if (!report_mode.empty()) {
    KVATLAS_ASSIGN_OR_RETURN(r.report_mode, ReportModeFromText(f, r.type, report_mode));
  }
  return r;
}

nlohmann::json RegistrationToJson(const Registration& r) {
  return {
      {"key", r.Key()},
      {"endpoint", r.PublishesEvents() ? nlohmann::json(r.endpoint) : nlohmann::json(nullptr)},
      {"publishes_events", r.PublishesEvents()},
      {"replay_endpoint",
       r.replay_endpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.replay_endpoint)},
      {"type", std::string(EngineTypeName(r.type))},
      {"modelname", r.model},
      {"lora_name", r.lora_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.lora_name)},
      {"tenant_id", r.tenant_id},
      {"instance_id", r.instance_id},
      {"block_size", r.block_size},
      {"dp_rank", r.dp_rank},
      {"additionalsalt",
       r.additional_salt.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.additional_salt)},
      {"topic", r.topic},
      {"report_mode", std::string(ReportModeName(r.report_mode))}};
}

Result<UnregisterRequest> UnregisterRequestFromJson(const nlohmann::json& json) {
  const Fields f(json, "body");
  KVATLAS_RETURN_IF_ERROR(f.Check());
  UnregisterRequest request;
  KVATLAS_RETURN_IF_ERROR(f.String("instance_id", true, kMaxNameBytes, &request.instance_id));
  KVATLAS_RETURN_IF_ERROR(f.String("tenant_id", false, kMaxNameBytes, &request.tenant_id));
  if (request.tenant_id.empty()) request.tenant_id = "default";
  KVATLAS_RETURN_IF_ERROR(f.Uint32("dp_rank", false, false, &request.dp_rank));
  return request;
}

}  // namespace kvatlas::server
