// POST /v1/route (docs/api.md §Routing, docs/routing.md): the routing decision of
// route_decision.h over REST. POST /v1/predictions (docs/api.md §Predictions): a router's
// own decision, recorded as a prediction (approximate mode).

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/protocol.h"
#include "kvatlas/common/routing.h"
#include "server/api/forwarding.h"
#include "server/api/routes.h"
#include "server/service/lookup_service.h"
#include "server/service/prediction_service.h"
#include "server/service/route_decision.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

Result<HttpReply> HandleRoute(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(RoutingRequest route, DecodeRouteRequest(request.http.body));
  if (std::optional<HttpReply> elsewhere =
          AnswerFromMember(services, request, ServicesFor(services, route.lookup.context))) {
    return std::move(*elsewhere);
  }
  KVATLAS_RETURN_IF_ERROR(AwaitReadConsistency(services, route.lookup));
  KVATLAS_ASSIGN_OR_RETURN(RoutingAnswer answer, DecideRoute(services, route));
  return JsonReply(EncodeRouteAnswer(answer));
}

// The fields POST /v1/predictions takes; any other is refused (a misspelt "key" must not
// pass as a prediction of nothing).
constexpr std::string_view kPredictionFields[] = {
    "tenant_id",  "model_name", "lora_name", "block_size", "additional_salt",
    "backend_id", "dp_rank",    "keys",      "token_ids"};

// `field` of `body` as an array of at most `max` unsigned integers of type T.
template <typename T>
Result<std::vector<T>> NumberArray(const json& body, const char* field, size_t max) {
  const json& v = body.at(field);
  if (!v.is_array()) return Status::InvalidArgument(std::string(field) + ": must be an array");
  if (v.size() > max) {
    return Status::PayloadTooLarge(std::string(field) + ": " + std::to_string(v.size()) +
                                   " elements; at most " + std::to_string(max));
  }
  std::vector<T> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    if (!e.is_number_unsigned() || e.get<uint64_t>() > std::numeric_limits<T>::max()) {
      return Status::InvalidArgument(std::string(field) + "[" + std::to_string(i) +
                                     "]: must be an unsigned integer of at most " +
                                     std::to_string(std::numeric_limits<T>::max()) + ", got " +
                                     PreviewJson(e));
    }
    out.push_back(static_cast<T>(e.get<uint64_t>()));
  }
  return out;
}

Result<HttpReply> HandlePrediction(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(json body, ParseJsonObjectBody(request));
  for (const auto& [key, value] : body.items()) {
    if (std::find(std::begin(kPredictionFields), std::end(kPredictionFields), key) ==
        std::end(kPredictionFields)) {
      return Status::InvalidArgument(key + ": unknown field");
    }
  }
  KVATLAS_ASSIGN_OR_RETURN(ContextKey context, ContextKeyFromJson(body, ""));
  const auto id = body.find("backend_id");
  if (id == body.end() || !id->is_string() || id->get_ref<const std::string&>().empty()) {
    return Status::InvalidArgument("backend_id: is required (a non-empty string)");
  }
  HolderKey holder{id->get<std::string>(), 0};
  if (const auto rank = body.find("dp_rank"); rank != body.end() && !rank->is_null()) {
    if (!rank->is_number_unsigned() || rank->get<uint64_t>() > UINT32_MAX) {
      return Status::InvalidArgument("dp_rank: must be an unsigned 32-bit integer, got " +
                                     PreviewJson(*rank));
    }
    holder.dp_rank = static_cast<uint32_t>(rank->get<uint64_t>());
  }
  const bool has_keys = body.contains("keys"), has_tokens = body.contains("token_ids");
  if (has_keys == has_tokens) {
    return Status::InvalidArgument("keys, token_ids: exactly one is needed");
  }
  std::vector<BlockKey> keys;
  if (has_keys) {
    KVATLAS_ASSIGN_OR_RETURN(keys, NumberArray<uint64_t>(body, "keys", protocol::kMaxPredictKeys));
  } else {
    const size_t max_tokens = size_t{services.options.max_lookup_blocks} * context.block_size;
    // Tokens past max_lookup_blocks blocks are not hashed (as a route's), but a body far
    // larger than that is refused rather than read.
    KVATLAS_ASSIGN_OR_RETURN(
        std::vector<uint32_t> tokens,
        NumberArray<uint32_t>(body, "token_ids", protocol::kMaxPredictKeys * context.block_size));
    std::span<const uint32_t> counted(tokens);
    counted = counted.first(std::min(counted.size(), max_tokens));
    keys = services.machine->hasher().SequenceHashes(counted, context.block_size);
  }
  if (keys.empty()) {
    return Status::InvalidArgument(has_keys ? "keys: at least one block key is needed"
                                            : "token_ids: at least one complete block is needed (" +
                                                  std::to_string(context.block_size) + " tokens)");
  }
  KVATLAS_ASSIGN_OR_RETURN(const size_t queued,
                           RecordDecision(services, context, holder, std::move(keys)));
  return JsonReply(json{{"queued", queued}}.dump());
}

}  // namespace

void AddRoutingRoutes(const Services* services, Router* router) {
  router->Add({"POST", "/v1/route", RouteAccess::kRead, [services](const RouteRequest& request) {
                 return HandleRoute(*services, request);
               }});
  router->Add(
      {"POST", "/v1/predictions", RouteAccess::kWrite,
       [services](const RouteRequest& request) { return HandlePrediction(*services, request); }});
}

}  // namespace kvatlas::server
