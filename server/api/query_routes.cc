// Read routes: POST /v1/lookup, GET /v1/blocks/{key}, /v1/holders, /v1/contexts,
// /v1/stats (docs/api.md §Queries). Each answers the revision its read saw
// (lookup_service.h); JSON is built after the state's lock is released.

#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/limits.h"
#include "server/api/forwarding.h"
#include "server/api/member_listing.h"
#include "server/api/routes.h"
#include "server/service/lookup_service.h"
#include "server/service/replica_audit_service.h"
#include "server/service/stats_service.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

json TierCounts(const uint64_t (&by_tier)[kNumTiers]) {
  json out = json::object();
  for (int t = 0; t < kNumTiers; ++t) out[std::string(TierName(static_cast<Tier>(t)))] = by_tier[t];
  return out;
}

Result<HttpReply> HandleLookup(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(LookupRequest lookup, DecodeLookupRequest(request.http.body));
  if (std::optional<HttpReply> elsewhere =
          AnswerFromMember(services, request, ServicesFor(services, lookup.context))) {
    return std::move(*elsewhere);
  }
  KVATLAS_RETURN_IF_ERROR(AwaitReadConsistency(services, lookup));
  KVATLAS_ASSIGN_OR_RETURN(LookupAnswer answer,
                           LookupPrefix(ServicesFor(services, lookup.context), lookup));
  return JsonReply(EncodeLookupAnswer(answer));
}

// The optional context narrowing of GET /v1/blocks/{key}: none of its parameters = every
// context; any of them = exactly one context, which then needs model_name and block_size.
Result<std::optional<ContextKey>> ContextFromParams(const HttpRequest& http) {
  constexpr const char* kNames[] = {"tenant_id", "model_name", "lora_name", "block_size",
                                    "additional_salt"};
  bool any = false;
  for (const char* name : kNames) any = any || http.HasParam(name);
  if (!any) return std::optional<ContextKey>();
  ContextKey context;
  if (http.HasParam("tenant_id") && !http.Param("tenant_id").empty()) {
    context.tenant = http.Param("tenant_id");
  }
  context.model = http.Param("model_name");
  context.lora_name = http.Param("lora_name");
  context.salt = http.Param("additional_salt");
  if (context.model.empty()) {
    return Status::InvalidArgument("model_name: is required when narrowing to a context");
  }
  KVATLAS_RETURN_IF_ERROR(CheckContextLimits(context, ""));
  const std::string size = http.Param("block_size");
  const char* const end = size.data() + size.size();
  const auto [ptr, ec] = std::from_chars(size.data(), end, context.block_size);
  if (size.empty() || ec != std::errc() || ptr != end || context.block_size == 0) {
    return Status::InvalidArgument("block_size: must be a positive integer, got \"" + size + "\"");
  }
  return std::optional<ContextKey>(std::move(context));
}

json LocationJson(const BlockLocation& copy) {
  return json{{"context", ContextKeyToJson(copy.context)},
              {"holder_id", copy.holder.id},
              {"dp_rank", copy.holder.dp_rank},
              {"tier", TierName(copy.tier)},
              {"depth", copy.depth},
              {"refcount", copy.refcount},
              {"engine_hash", copy.engine_hash},
              {"location", copy.location}};
}

// With `?group=G` (one group's part, asked for by a server that holds no replica of G) or
// a context, the handlers below answer for that one group from this server's replica, or —
// not holding it — as AnswerFromMember does (PrepareListing).
Result<HttpReply> HandleBlock(const Services& services, const RouteRequest& request) {
  const Result<uint64_t> key = ParseHashText(request.path_param);
  if (!key.has_value()) return key.error().WithContext("key");
  KVATLAS_ASSIGN_OR_RETURN(std::optional<ContextKey> context, ContextFromParams(request.http));
  KVATLAS_ASSIGN_OR_RETURN(
      ListingScope scope,
      PrepareListing(services, request, context ? &ServicesFor(services, *context) : nullptr));
  if (scope.elsewhere) return std::move(*scope.elsewhere);
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  const BlockCopies found = LocateBlock(services, *key, context ? &*context : nullptr, scope.only);
  json out = json::array();
  for (const BlockLocation& copy : found.copies) out.push_back(LocationJson(copy));
  AppendListingParts(scope.parts, "copies", &out);
  return JsonReply(
      DumpJson({{"revision", found.revision}, {"key", *key}, {"copies", std::move(out)}}));
}

Result<HttpReply> HandleHolders(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(ListingScope scope, PrepareListing(services, request, nullptr));
  if (scope.elsewhere) return std::move(*scope.elsewhere);
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  const HolderListing listing = ListHolders(services, scope.only);
  const std::vector<HolderInfo>& holders = listing.holders;
  const std::optional<std::vector<double>>& idle = listing.idle_seconds;
  json out = json::array();
  for (size_t i = 0; i < holders.size(); ++i) {
    const HolderInfo& h = holders[i];
    out.push_back({{"id", h.id},
                   {"holder_id", h.holder.id},
                   {"dp_rank", h.holder.dp_rank},
                   {"entries", h.entries},
                   {"entries_by_tier", TierCounts(h.entries_by_tier)}});
    if (idle) out.back()["idle_seconds"] = (*idle)[i];
  }
  MergeHolderParts(scope.parts, &out);
  return JsonReply(DumpJson({{"revision", listing.revision}, {"holders", std::move(out)}}));
}

Result<HttpReply> HandleContexts(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(ListingScope scope, PrepareListing(services, request, nullptr));
  if (scope.elsewhere) return std::move(*scope.elsewhere);
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  const ContextListing listing = ListContexts(services, scope.only);
  json out = json::array();
  for (const ContextInfo& c : listing.contexts) {
    json item = ContextKeyToJson(c.context);
    item["id"] = c.id;
    item["blocks"] = c.blocks;
    item["entries"] = c.entries;
    item["evicted_blocks"] = c.evicted_blocks;
    out.push_back(std::move(item));
  }
  AppendListingParts(scope.parts, "contexts", &out);
  return JsonReply(DumpJson({{"revision", listing.revision}, {"contexts", std::move(out)}}));
}

Result<HttpReply> HandleStats(const Services& services) {
  return JsonReply(StatsDocument(services));
}

}  // namespace

void AddQueryRoutes(const Services* services, Router* router) {
  router->Add({"POST", "/v1/lookup", RouteAccess::kRead, [services](const RouteRequest& request) {
                 return HandleLookup(*services, request);
               }});
  router->Add(
      {"GET", "/v1/blocks/{key}", RouteAccess::kRead,
       [services](const RouteRequest& request) { return HandleBlock(*services, request); }});
  router->Add({"GET", "/v1/holders", RouteAccess::kRead, [services](const RouteRequest& request) {
                 return HandleHolders(*services, request);
               }});
  router->Add({"GET", "/v1/contexts", RouteAccess::kRead, [services](const RouteRequest& request) {
                 return HandleContexts(*services, request);
               }});
  router->Add({"GET", "/v1/stats", RouteAccess::kRead,
               [services](const RouteRequest&) { return HandleStats(*services); }});
}

}  // namespace kvatlas::server
