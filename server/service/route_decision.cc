#include "server/service/route_decision.h"

#include <utility>

#include "server/service/load_service.h"
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
  // Candidates without a load of their own take the fleet's (docs/routing.md §Shared load).
  RoutingRequest shared{std::move(lookup), request.candidates, request.options};
  FillSharedLoad(services, &shared);
  return RouteFromLookup(shared, answer);
}

}  // namespace kvatlas::server
