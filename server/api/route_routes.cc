// POST /v1/route (docs/api.md §Routing, docs/routing.md): a prefix lookup over every
// instance, then the request's candidates scored with the common cost (routing.h).
#include <httplib.h>

#include <utility>

#include "kvatlas/common/routing.h"
#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleRoute(const ApiServices& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(RoutingRequest route, DecodeRouteRequest(request.http.body));
  KVATLAS_RETURN_IF_ERROR(AwaitReadConsistency(api, route.lookup));
  KVATLAS_ASSIGN_OR_RETURN(RoutingAnswer answer, RunRoute(api, route));
  return JsonReply(EncodeRouteAnswer(answer));
}

}  // namespace

Result<RoutingAnswer> RunRoute(const ApiServices& api, const RoutingRequest& request) {
  LookupRequest lookup = request.lookup;
  lookup.instance_id.clear();  // every instance: candidates are matched by id below
  lookup.include_locations = false;
  return RouteFromLookup(request, RunLookup(api, lookup));
}

void AddRouteRoutes(const ApiServices* api, Router* router) {
  router->Add({"POST", "/v1/route", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleRoute(*api, request); }});
}

}  // namespace kvatlas::server
