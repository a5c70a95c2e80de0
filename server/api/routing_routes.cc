// POST /v1/route (docs/api.md §Routing, docs/routing.md): the routing decision of
// route_decision.h over REST.

#include "kvatlas/common/routing.h"
#include "server/api/routes.h"
#include "server/service/lookup_service.h"
#include "server/service/route_decision.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleRoute(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(RoutingRequest route, DecodeRouteRequest(request.http.body));
  KVATLAS_RETURN_IF_ERROR(AwaitReadConsistency(services, route.lookup));
  KVATLAS_ASSIGN_OR_RETURN(RoutingAnswer answer, DecideRoute(services, route));
  return JsonReply(EncodeRouteAnswer(answer));
}

}  // namespace

void AddRoutingRoutes(const Services* services, Router* router) {
  router->Add({"POST", "/v1/route", RouteAccess::kRead, [services](const RouteRequest& request) {
                 return HandleRoute(*services, request);
               }});
}

}  // namespace kvatlas::server
