// The JSON shape of POST /v1/load (docs/api.md §Shared load).
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kvatlas/common/fleet_load.h"
#include "kvatlas/common/json_codec.h"

namespace kvatlas {
namespace {

using nlohmann::json;

const json* Field(const json& object, std::string_view key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// An optional unsigned integer at most `max`; `*out` is left as is when absent.
template <typename T>
Status ReadUnsigned(const json& object, std::string_view key, const std::string& path, uint64_t max,
                    T* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number_unsigned() || v->get<uint64_t>() > max) {
    return Status::InvalidArgument(path + ": must be an integer from 0 to " + std::to_string(max) +
                                   ", got " + PreviewJson(*v));
  }
  *out = static_cast<T>(v->get<uint64_t>());
  return Status::Ok();
}

Status ReadString(const json& object, std::string_view key, const std::string& path,
                  std::string* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return Status::InvalidArgument(path + ": is required (a non-empty string)");
  if (!v->is_string() || v->get_ref<const std::string&>().empty()) {
    return Status::InvalidArgument(path + ": must be a non-empty string, got " + PreviewJson(*v));
  }
  *out = v->get<std::string>();
  return Status::Ok();
}

Result<InstanceLoad> DecodeEntry(const json& value, const std::string& path) {
  if (!value.is_object()) {
    return Status::InvalidArgument(path + ": must be an object {\"instance_id\", \"dp_rank\", " +
                                   "\"prefill_blocks\", \"decode_blocks\"}, got " +
                                   PreviewJson(value));
  }
  InstanceLoad load;
  KVATLAS_RETURN_IF_ERROR(
      ReadString(value, "instance_id", path + ".instance_id", &load.instance_id));
  KVATLAS_RETURN_IF_ERROR(ReadUnsigned(value, "dp_rank", path + ".dp_rank",
                                       std::numeric_limits<uint32_t>::max(), &load.dp_rank));
  KVATLAS_RETURN_IF_ERROR(ReadUnsigned(value, "prefill_blocks", path + ".prefill_blocks",
                                       kMaxLoadBlocks, &load.prefill_blocks));
  KVATLAS_RETURN_IF_ERROR(ReadUnsigned(value, "decode_blocks", path + ".decode_blocks",
                                       kMaxLoadBlocks, &load.decode_blocks));
  return load;
}

}  // namespace

Result<LoadReport> DecodeLoadReport(std::string_view body) {
  json doc;
  KVATLAS_RETURN_IF_ERROR(ParseJsonBody(body, &doc));
  if (!doc.is_object()) return Status::InvalidArgument("body: must be a JSON object");
  LoadReport report;
  KVATLAS_RETURN_IF_ERROR(ReadString(doc, "router_id", "router_id", &report.router_id));
  KVATLAS_RETURN_IF_ERROR(
      ReadUnsigned(doc, "ttl_ms", "ttl_ms", std::numeric_limits<uint32_t>::max(), &report.ttl_ms));
  const json* loads = Field(doc, "loads");
  if (loads == nullptr || !loads->is_array()) {
    return Status::InvalidArgument(
        "loads: is required (an array of {\"instance_id\", \"dp_rank\", \"prefill_blocks\", "
        "\"decode_blocks\"}; [] = nothing in flight)");
  }
  if (loads->size() > kMaxLoadEntries) {
    return Status::PayloadTooLarge("loads: " + std::to_string(loads->size()) +
                                   " entries; one report holds at most " +
                                   std::to_string(kMaxLoadEntries));
  }
  report.loads.reserve(loads->size());
  for (size_t i = 0; i < loads->size(); ++i) {
    KVATLAS_ASSIGN_OR_RETURN(InstanceLoad load,
                             DecodeEntry((*loads)[i], "loads[" + std::to_string(i) + "]"));
    report.loads.push_back(std::move(load));
  }
  KVATLAS_RETURN_IF_ERROR(ValidateLoadReport(report));
  return report;
}

std::string EncodeLoadReport(const LoadReport& report) {
  json loads = json::array();
  for (const InstanceLoad& load : report.loads) {
    loads.push_back({{"instance_id", load.instance_id},
                     {"dp_rank", load.dp_rank},
                     {"prefill_blocks", load.prefill_blocks},
                     {"decode_blocks", load.decode_blocks}});
  }
  return json{{"router_id", report.router_id}, {"ttl_ms", report.ttl_ms}, {"loads", loads}}.dump();
}

}  // namespace kvatlas
