#include "server/service/route_decision.h"

#include <utility>

#include "server/service/load_service.h"
#include "server/service/lookup_service.h"
#include "server/service/prediction_service.h"

namespace kvatlas::server {

Result<RoutingAnswer> DecideRoute(const Services& services, const RoutingRequest& request) {
  if (request.lookup.context.block_size == 0) {
    return Status::InvalidArgument("lookup.block_size: must be a positive integer, got 0");
  }
  LookupRequest lookup = request.lookup;
  lookup.instance_id.clear();  // every instance: candidates are matched by id
  lookup.include_locations = false;
  std::vector<BlockKey> keys;
  // The context's group answers the lookup and holds its predictions; the fleet's loads
  // are cluster-wide (ClusterState).
  const Services& group = ServicesFor(services, lookup.context);
  KVATLAS_ASSIGN_OR_RETURN(LookupAnswer answer, LookupPrefix(group, lookup, &keys));
  // Candidates without a load of their own take the fleet's (docs/routing.md §Shared load).
  RoutingRequest shared{std::move(lookup), request.candidates, request.options};
  FillSharedLoad(services, &shared);
  // Approximate mode (docs/routing.md §Approximate mode): what earlier routes predicted
  // counts, and a pick flagged `predict` records this request's blocks in turn.
  const std::vector<uint32_t> predicted =
      PredictedPrefixes(group, shared.lookup.context, keys, shared.candidates);
  KVATLAS_ASSIGN_OR_RETURN(RoutingAnswer routed, RouteFromLookup(shared, answer, predicted));
  RecordPrediction(group, shared.lookup.context, routed.ranked.front().candidate, std::move(keys));
  return routed;
}

}  // namespace kvatlas::server
