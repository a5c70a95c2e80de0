// Holder leases over REST (docs/leases.md, docs/api.md §Holder leases): POST /v1/heartbeat
// (lease_service.h). On a follower it fails with kNotLeader and is forwarded
// (forwarding.h).

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/limits.h"
#include "server/api/routes.h"
#include "server/service/lease_service.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

// Holders one heartbeat may name (larger bodies are refused, 413).
constexpr size_t kMaxHeartbeatHolders = 10'000;

// A field given as null counts as absent (docs/api.md §Conventions).
const json* Field(const json& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// {"instance_id" | "backend_id": "a", "dp_rank": 0}: backend_id wins when both are given,
// as in events (the holder is the event's backend_id, or its instance_id).
Result<HolderKey> HolderFromJson(const json& item, const std::string& path) {
  if (!item.is_object()) {
    return Status::InvalidArgument(path + ": must be an object {\"instance_id\", \"dp_rank\"}");
  }
  const char* name = Field(item, "backend_id") != nullptr ? "backend_id" : "instance_id";
  const json* id = Field(item, name);
  if (id == nullptr) {
    return Status::InvalidArgument(path + ".instance_id: is required (or backend_id)");
  }
  if (!id->is_string() || id->get_ref<const std::string&>().empty()) {
    return Status::InvalidArgument(path + "." + name + ": must be a non-empty string");
  }
  HolderKey holder{id->get<std::string>(), 0};
  KVATLAS_RETURN_IF_ERROR(CheckLength(path + ".", name, holder.id, kMaxNameBytes));
  if (const json* rank = Field(item, "dp_rank")) {
    if (!rank->is_number_unsigned() || rank->get<uint64_t>() > UINT32_MAX) {
      return Status::InvalidArgument(
          path + ".dp_rank: must be an integer from 0 to 4294967295, got " + PreviewJson(*rank));
    }
    holder.dp_rank = static_cast<uint32_t>(rank->get<uint64_t>());
  }
  return holder;
}

Result<std::vector<HolderKey>> HoldersFromBody(const json& body) {
  const json* holders = Field(body, "holders");
  if (holders == nullptr) {
    return Status::InvalidArgument(
        "body.holders: is required (an array of {\"instance_id\", \"dp_rank\"})");
  }
  if (!holders->is_array()) {
    return Status::InvalidArgument(
        "body.holders: must be an array of {\"instance_id\", \"dp_rank\"}");
  }
  if (holders->size() > kMaxHeartbeatHolders) {
    return Status::PayloadTooLarge("body.holders: " + std::to_string(holders->size()) +
                                   " holders; one heartbeat names at most " +
                                   std::to_string(kMaxHeartbeatHolders));
  }
  std::vector<HolderKey> out;
  out.reserve(holders->size());
  for (size_t i = 0; i < holders->size(); ++i) {
    KVATLAS_ASSIGN_OR_RETURN(
        HolderKey holder, HolderFromJson((*holders)[i], "body.holders[" + std::to_string(i) + "]"));
    out.push_back(std::move(holder));
  }
  return out;
}

Result<HttpReply> HandleHeartbeat(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(std::vector<HolderKey> holders, HoldersFromBody(body));
  KVATLAS_ASSIGN_OR_RETURN(HeartbeatResult result, Heartbeat(services, holders));
  return JsonReply(json{{"holders", result.holders}, {"ttl_seconds", result.ttl_seconds}}.dump());
}

}  // namespace

void AddLeaseRoutes(const Services* services, Router* router) {
  router->Add(
      {"POST", "/v1/heartbeat", RouteAccess::kWrite,
       [services](const RouteRequest& request) { return HandleHeartbeat(*services, request); }});
}

}  // namespace kvatlas::server
