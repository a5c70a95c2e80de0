// The Mooncake Conductor indexer dialect (docs/api.md §Conductor, RFC #1403): POST /query
// and POST /query_by_hash with its exact request and answer shapes, so that a router
// written for the Conductor or Dynamo's standalone indexer works against kvatlas unchanged.
// Predicted blocks (approximate mode) count in longest_matched and are marked PREDICTED.

#include <optional>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "server/api/forwarding.h"
#include "server/api/routes.h"
#include "server/service/lookup_service.h"
#include "server/service/prediction_service.h"

namespace kvatlas::server {
namespace {

using Decoder = Result<LookupRequest> (*)(std::string_view body);

Result<HttpReply> HandleQuery(const Services& services, const RouteRequest& request,
                              Decoder decode) {
  KVATLAS_ASSIGN_OR_RETURN(LookupRequest lookup, decode(request.http.body));
  lookup.include_locations = false;  // the Conductor answer has no place for them
  if (std::optional<HttpReply> elsewhere =
          AnswerFromMember(services, request, ServicesFor(services, lookup.context))) {
    return std::move(*elsewhere);
  }
  KVATLAS_RETURN_IF_ERROR(AwaitReadConsistency(services, lookup));
  std::vector<BlockKey> keys;
  KVATLAS_ASSIGN_OR_RETURN(LookupAnswer answer,
                           LookupPrefix(ServicesFor(services, lookup.context), lookup, &keys));
  // Blocks predicted by routes (docs/routing.md §Approximate mode), marked "PREDICTED";
  // of the one instance asked about, when the query names one.
  std::vector<ConductorPrediction> predicted =
      PredictionsOf(ServicesFor(services, lookup.context), lookup.context, keys);
  if (!lookup.instance_id.empty()) {
    std::erase_if(predicted, [&lookup](const ConductorPrediction& p) {
      return p.instance_id != lookup.instance_id;
    });
  }
  return JsonReply(EncodeConductorAnswer(answer, predicted));
}

}  // namespace

void AddConductorRoutes(const Services* services, Router* router) {
  router->Add({"POST", "/query", RouteAccess::kRead, [services](const RouteRequest& request) {
                 return HandleQuery(*services, request, &DecodeConductorQuery);
               }});
  router->Add(
      {"POST", "/query_by_hash", RouteAccess::kRead, [services](const RouteRequest& request) {
         return HandleQuery(*services, request, &DecodeConductorQueryByHash);
       }});
}

}  // namespace kvatlas::server
