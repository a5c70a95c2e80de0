// Operations routes: GET /healthz (the process answers), GET /readyz (a write sent here
// now would be taken: server/service/readiness.h decides), GET /metrics (Prometheus text).
#include <nlohmann/json.hpp>

#include "kvatlas/common/json_codec.h"
#include "server/api/forwarding.h"
#include "server/api/routes.h"
#include "server/service/readiness.h"
#include "server/service/stats_service.h"

namespace kvatlas::server {
namespace {

// HTTP starts only after recovery (server/runtime/server.h), so recovered is a given here.
Result<HttpReply> HandleReady(const Services& api) {
  KVATLAS_RETURN_IF_ERROR(Readiness(api));
  return JsonReply(DumpJson({{"status", "ready"},
                             {"revision", api.machine->applied_revision()},
                             {"warnings", ReadinessWarnings(api)}}));
}

}  // namespace

void AddOpsRoutes(const Services* api, Router* router) {
  router->Add({"GET", "/healthz", RouteAccess::kOpen, [](const RouteRequest&) -> Result<HttpReply> {
                 return JsonReply(R"({"status":"ok"})");
               }});
  router->Add({"GET", "/readyz", RouteAccess::kOpen,
               [api](const RouteRequest&) { return HandleReady(*api); }});
  router->Add(
      {"GET", "/metrics", RouteAccess::kRead, [api](const RouteRequest&) -> Result<HttpReply> {
         HttpReply reply;
         reply.body = MetricsText(*api);
         reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
         return reply;
       }});
}

void AddAllRoutes(const Services* api, Router* router) {
  AddIngestRoutes(api, router);
  AddQueryRoutes(api, router);
  AddConductorRoutes(api, router);
  AddOpsRoutes(api, router);
  AddRegistrationRoutes(api, router);
  AddClusterRoutes(api, router);
  // Every route that needs the leader fails with kNotLeader on a follower: proxy it.
  router->SetNotLeaderHandler([api](const RouteRequest& request, const Status& not_leader,
                                    const Router::RunAgain& run_again) {
    return AnswerNotLeader(*api, request, not_leader, run_again);
  });
  // Internal calls between the servers (announcements, forwarded requests).
  if (api->peers != nullptr) {
    router->SetPeerCalls(
        {[api](const httplib::Request& request) { return VerifyPeerCall(*api, request); },
         [api](const PeerCall& call, HttpReply* reply) { SignPeerReply(*api, call, reply); }});
  }
  AddRoutingRoutes(api, router);
  AddWatchRoutes(api, router);
  AddLeaseRoutes(api, router);
  AddDashboardRoutes(router);
  AddAdminRoutes(api, router);
}

}  // namespace kvatlas::server
