// Operations routes: GET /healthz (the process answers), GET /readyz (it can serve: it has
// recovered and the applier has not failed), GET /metrics (Prometheus text format).
#include <chrono>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "server/api/forwarding.h"
#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

// HTTP starts only after recovery (server/runtime/server.h), so recovered is a given here.
Result<HttpReply> HandleReady(const ApiServices& api) {
  if (api.applier->failed()) {
    return Status::Unavailable(
        "a storage write failed; the server takes no writes and must be "
        "restarted");
  }
  return JsonReply(DumpJson({{"status", "ready"}, {"revision", api.machine->applied_revision()}}));
}

}  // namespace

StateGauges ReadGauges(const ApiServices& api) {
  StateGauges gauges;
  std::tie(gauges.index, gauges.revision) =
      api.machine->Read([](const Index& index, Revision revision) {
        return std::make_pair(index.Stats(), revision);
      });
  gauges.applied = api.machine->counters();
  gauges.storage_bytes = api.storage ? api.storage->ApproximateSizeBytes() : 0;
  gauges.applier_failed = api.applier->failed();
  gauges.uptime_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - api.started).count();
  return gauges;
}

void AddOpsRoutes(const ApiServices* api, Router* router) {
  router->Add({"GET", "/healthz", false, [](const RouteRequest&) -> Result<HttpReply> {
                 return JsonReply(R"({"status":"ok"})");
               }});
  router->Add({"GET", "/readyz", false, [api](const RouteRequest&) { return HandleReady(*api); }});
  router->Add({"GET", "/metrics", false, [api](const RouteRequest&) -> Result<HttpReply> {
                 HttpReply reply;
                 reply.body = api->metrics->Render(ReadGauges(*api));
                 if (api->zmq != nullptr) {
                   const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count();
                   reply.body += RenderStreamMetrics(api->zmq->Streams(), now);
                 }
                 if (api->feed != nullptr) reply.body += RenderFeedMetrics(api->feed->Stats());
                 reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
                 return reply;
               }});
}

void AddAllRoutes(const ApiServices* api, Router* router) {
  AddIngestRoutes(api, router);
  AddQueryRoutes(api, router);
  AddConductorRoutes(api, router);
  AddOpsRoutes(api, router);
  AddRegistrationRoutes(api, router);
  AddClusterRoutes(api, router);
  // Every route that needs the leader fails with kNotLeader on a follower: proxy it.
  router->SetNotLeaderHandler([api](const RouteRequest& request, const Status& not_leader) {
    return AnswerNotLeader(*api, request, not_leader);
  });
  AddRouteRoutes(api, router);
  AddWatchRoutes(api, router);
  AddLeaseRoutes(api, router);
}

}  // namespace kvatlas::server
