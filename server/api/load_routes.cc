// Shared in-flight load over REST (docs/api.md §Shared load, docs/routing.md §Shared load):
// POST /v1/load (a router's absolute report; a write, forwarded by a follower) and GET
// /v1/load (the live reports and their sums, as this server sees them).

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kvatlas/common/fleet_load.h"
#include "server/api/routes.h"
#include "server/service/load_service.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

json LoadJson(const InstanceLoad& load) {
  return {{"instance_id", load.instance_id},
          {"dp_rank", load.dp_rank},
          {"prefill_blocks", load.prefill_blocks},
          {"decode_blocks", load.decode_blocks}};
}

Result<HttpReply> HandleReport(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(LoadReport report, DecodeLoadReport(request.http.body));
  const uint32_t ttl_ms = report.ttl_ms;
  const size_t entries = report.loads.size();
  KVATLAS_ASSIGN_OR_RETURN(LoadReportResult result, ReportLoad(services, std::move(report)));
  return JsonReply(json{{"revision", result.revision},
                        {"entries", entries},
                        {"ttl_ms", ttl_ms},
                        {"expires_at_ms", result.accepted_at_ms + ttl_ms}}
                       .dump());
}

Result<HttpReply> HandleView(const Services& services) {
  const protocol::LoadViewAnswer view = ViewLoads(services);
  json out_routers = json::array();
  // (instance, rank) → sums, in order.
  std::map<std::pair<std::string, uint32_t>, LoadSum> sums;
  for (const protocol::LoadViewRouter& router : view.routers) {
    json loads = json::array();
    for (const InstanceLoad& load : router.loads) {
      loads.push_back(LoadJson(load));
      LoadSum& sum = sums[{load.instance_id, load.dp_rank}];
      sum.prefill_blocks += load.prefill_blocks;
      sum.decode_blocks += load.decode_blocks;
      ++sum.routers;
    }
    out_routers.push_back({{"router_id", router.router_id},
                           {"expires_in_ms", router.expires_in_ms},
                           {"loads", std::move(loads)}});
  }
  json instances = json::array();
  for (const auto& [key, sum] : sums) {
    instances.push_back({{"instance_id", key.first},
                         {"dp_rank", key.second},
                         {"prefill_blocks", sum.prefill_blocks},
                         {"decode_blocks", sum.decode_blocks},
                         {"routers", sum.routers}});
  }
  return JsonReply(json{{"revision", view.revision},
                        {"routers", std::move(out_routers)},
                        {"instances", std::move(instances)}}
                       .dump());
}

}  // namespace

void AddLoadRoutes(const Services* services, Router* router) {
  router->Add({"POST", "/v1/load", RouteAccess::kWrite, [services](const RouteRequest& request) {
                 return HandleReport(*services, request);
               }});
  router->Add({"GET", "/v1/load", RouteAccess::kRead,
               [services](const RouteRequest&) { return HandleView(*services); }});
}

}  // namespace kvatlas::server
