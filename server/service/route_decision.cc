#include "server/service/route_decision.h"

#include "server/service/lookup_service.h"

namespace kvatlas::server {

Result<RoutingAnswer> DecideRoute(const Services& services, const RoutingRequest& request) {
  if (request.lookup.context.block_size == 0) {
    return Status::InvalidArgument("lookup.block_size: must be a positive integer, got 0");
  }
  LookupRequest lookup = request.lookup;
  lookup.instance_id.clear();  // every instance: candidates are matched by id
  lookup.include_locations = false;
  KVATLAS_ASSIGN_OR_RETURN(LookupAnswer answer, LookupPrefix(services, lookup));
  return RouteFromLookup(request, answer);
}

}  // namespace kvatlas::server
