// Read routes: POST /v1/lookup, GET /v1/blocks/{key}, /v1/holders, /v1/contexts,
// /v1/stats (docs/api.md §Queries). Every read runs under StateMachine::Read and answers
// the revision it saw; JSON is built after the lock is released.
#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/internal/prefix_match.h"
#include "kvatlas/common/json_codec.h"
#include "server/api/routes.h"
#include "server/api/stats_json.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

json TierCounts(const uint64_t (&by_tier)[kNumTiers]) {
  json out = json::object();
  for (int t = 0; t < kNumTiers; ++t) out[std::string(TierName(static_cast<Tier>(t)))] = by_tier[t];
  return out;
}

Result<HttpReply> HandleLookup(const ApiServices& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(LookupRequest lookup, DecodeLookupRequest(request.http.body));
  KVATLAS_RETURN_IF_ERROR(AwaitReadConsistency(api, lookup));
  return JsonReply(EncodeLookupAnswer(RunLookup(api, lookup)));
}

// The optional context narrowing of GET /v1/blocks/{key}: none of its parameters = every
// context; any of them = exactly one context, which then needs model_name and block_size.
Result<std::optional<ContextKey>> ContextFromParams(const httplib::Request& http) {
  constexpr const char* kNames[] = {"tenant_id", "model_name", "lora_name", "block_size",
                                    "additional_salt"};
  bool any = false;
  for (const char* name : kNames) any = any || http.has_param(name);
  if (!any) return std::optional<ContextKey>();
  ContextKey context;
  if (http.has_param("tenant_id") && !http.get_param_value("tenant_id").empty()) {
    context.tenant = http.get_param_value("tenant_id");
  }
  context.model = http.get_param_value("model_name");
  context.lora_name = http.get_param_value("lora_name");
  context.salt = http.get_param_value("additional_salt");
  if (context.model.empty()) {
    return Status::InvalidArgument("model_name: is required when narrowing to a context");
  }
  const std::string size = http.get_param_value("block_size");
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

Result<HttpReply> HandleBlock(const ApiServices& api, const RouteRequest& request) {
  const Result<uint64_t> key = ParseHashText(request.path_param);
  if (!key.has_value()) return key.error().WithContext("key");
  KVATLAS_ASSIGN_OR_RETURN(std::optional<ContextKey> context, ContextFromParams(request.http));
  auto [copies, revision] = api.machine->Read([&](const Index& index, Revision rev) {
    return std::make_pair(index.Locate(*key, context ? &*context : nullptr), rev);
  });
  json out = json::array();
  for (const BlockLocation& copy : copies) out.push_back(LocationJson(copy));
  return JsonReply(DumpJson({{"revision", revision}, {"key", *key}, {"copies", std::move(out)}}));
}

Result<HttpReply> HandleHolders(const ApiServices& api) {
  auto [holders, revision] = api.machine->Read(
      [](const Index& index, Revision rev) { return std::make_pair(index.Holders(), rev); });
  // With holder leases on, the leader adds each holder's seconds since activity.
  std::optional<std::vector<double>> idle;
  if (api.leases != nullptr) {
    std::vector<HolderKey> keys;
    for (const HolderInfo& h : holders) keys.push_back(h.holder);
    idle = api.leases->IdleSeconds(keys, std::chrono::steady_clock::now());
  }
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
  return JsonReply(DumpJson({{"revision", revision}, {"holders", std::move(out)}}));
}

Result<HttpReply> HandleContexts(const ApiServices& api) {
  auto [contexts, revision] = api.machine->Read(
      [](const Index& index, Revision rev) { return std::make_pair(index.Contexts(), rev); });
  json out = json::array();
  for (const ContextInfo& c : contexts) {
    json item = ContextKeyToJson(c.context);
    item["id"] = c.id;
    item["blocks"] = c.blocks;
    item["entries"] = c.entries;
    item["evicted_blocks"] = c.evicted_blocks;
    out.push_back(std::move(item));
  }
  return JsonReply(DumpJson({{"revision", revision}, {"contexts", std::move(out)}}));
}

Result<HttpReply> HandleStats(const ApiServices& api) { return JsonReply(StatsJson(api)); }

}  // namespace

Status AwaitReadConsistency(const ApiServices& api, const LookupRequest& request) {
  std::optional<uint64_t> wanted = request.min_revision;
  if (request.linearizable) {
    // A linearizable read costs one log entry (libraft 0.15 has no ReadIndex): an empty
    // batch committed through the leader orders the read after every write acknowledged
    // before it. Followers answer not_leader.
    KVATLAS_ASSIGN_OR_RETURN(Revision barrier, SubmitAndWait(api, CommandBatch{}));
    wanted = std::max<uint64_t>(wanted.value_or(0), barrier);
  }
  if (!wanted || api.machine->applied_revision() >= *wanted) return Status::Ok();
  const auto deadline = std::chrono::steady_clock::now() + api.options.apply_timeout;
  while (api.machine->applied_revision() < *wanted) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status(StatusCode::kDeadlineExceeded,
                    "min_revision " + std::to_string(*wanted) + " not applied here within " +
                        std::to_string(api.options.apply_timeout.count()) +
                        " ms (applied: " + std::to_string(api.machine->applied_revision()) + ")");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return Status::Ok();
}

LookupAnswer RunLookup(const ApiServices& api, const LookupRequest& request) {
  const size_t max_blocks = api.options.max_lookup_blocks;
  std::vector<BlockKey> hashed;
  std::span<const BlockKey> keys = request.seq_hashes;
  if (!request.by_hash) {
    std::span<const uint32_t> tokens = request.token_ids;
    tokens = tokens.first(std::min(tokens.size(), max_blocks * request.context.block_size));
    hashed = api.machine->hasher().SequenceHashes(tokens, request.context.block_size);
    keys = hashed;
  }
  keys = keys.first(std::min(keys.size(), max_blocks));
  LookupOptions options;
  options.include_locations = request.include_locations;
  auto [result, revision] = api.machine->Read([&](const Index& index, Revision rev) {
    return std::make_pair(index.Lookup(request.context, keys, options), rev);
  });
  return BuildLookupAnswer(result, request.context, request.instance_id, revision);
}

void AddQueryRoutes(const ApiServices* api, Router* router) {
  router->Add({"POST", "/v1/lookup", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleLookup(*api, request); }});
  router->Add({"GET", "/v1/blocks/{key}", false,
               [api](const RouteRequest& request) { return HandleBlock(*api, request); }});
  router->Add(
      {"GET", "/v1/holders", false, [api](const RouteRequest&) { return HandleHolders(*api); }});
  router->Add(
      {"GET", "/v1/contexts", false, [api](const RouteRequest&) { return HandleContexts(*api); }});
  router->Add(
      {"GET", "/v1/stats", false, [api](const RouteRequest&) { return HandleStats(*api); }});
}

}  // namespace kvatlas::server
