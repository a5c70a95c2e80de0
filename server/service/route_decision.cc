#include "server/service/route_decision.h"

#include "server/service/lookup_service.h"

namespace kvatlas::server {

Result<RoutingAnswer> DecideRoute(const Services& services, const RoutingRequest& request) {
  LookupRequest lookup = request.lookup;
  lookup.instance_id.clear();  // every instance: candidates are matched by id
  lookup.include_locations = false;
  return RouteFromLookup(request, LookupPrefix(services, lookup));
}

}  // namespace kvatlas::server
