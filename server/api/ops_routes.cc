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
Result<HttpReply> HandleReady(const Services& services) {
  KVATLAS_RETURN_IF_ERROR(Readiness(services));
  return JsonReply(DumpJson({{"status", "ready"},
                             {"revision", services.machine->applied_revision()},
                             {"warnings", ReadinessWarnings(services)}}));
}

}  // namespace

void AddOpsRoutes(const Services* services, Router* router) {
  router->Add({"GET", "/healthz", RouteAccess::kOpen, [](const RouteRequest&) -> Result<HttpReply> {
                 return JsonReply(R"({"status":"ok"})");
               }});
  router->Add({"GET", "/readyz", RouteAccess::kOpen,
               [services](const RouteRequest&) { return HandleReady(*services); }});
  router->Add(
      {"GET", "/metrics", RouteAccess::kRead, [services](const RouteRequest&) -> Result<HttpReply> {
         HttpReply reply;
         reply.body = MetricsText(*services);
         reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
         return reply;
       }});
}

void AddAllRoutes(const Services* services, Router* router) {
  AddIngestRoutes(services, router);
  AddQueryRoutes(services, router);
  AddConductorRoutes(services, router);
  AddOpsRoutes(services, router);
  AddRegistrationRoutes(services, router);
  AddClusterRoutes(services, router);
  // Every route that needs the leader fails with kNotLeader on a follower: proxy it.
  router->SetNotLeaderHandler([services](const RouteRequest& request, const Status& not_leader,
                                         const Router::RunAgain& run_again) {
    return AnswerNotLeader(*services, request, not_leader, run_again);
  });
  // Internal calls between the servers (announcements, forwarded requests).
  if (services->peers != nullptr) {
    router->SetPeerCalls(
        {[services](const HttpRequest& request) { return VerifyPeerCall(*services, request); },
         [services](const PeerCall& call, HttpReply* reply) {
           SignPeerReply(*services, call, reply);
         }});
  }
  AddRoutingRoutes(services, router);
  AddWatchRoutes(services, router);
  AddLeaseRoutes(services, router);
  AddLoadRoutes(services, router);
  AddDashboardRoutes(router);
  AddAdminRoutes(services, router);
}

}  // namespace kvatlas::server
