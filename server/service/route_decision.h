// The routing decision (docs/routing.md): which candidate instance should serve a request,
// from a prefix lookup over every instance and the candidates' loads, scored with the cost
// of kvatlas/common/routing.h. A candidate that gives no load (both terms 0) is scored with
// the router fleet's shared load (load_service.h); predicted blocks count toward a candidate's
// prefix, and a pick flagged `predict` records the request's blocks as predicted there
// (prediction_service.h). Answers POST /v1/route and the binary kRoute.
// Safe from any thread.
#pragma once

#include "kvatlas/common/result.h"
#include "kvatlas/common/routing.h"
#include "server/service/services.h"

namespace kvatlas::server {

// kInvalidArgument naming "lookup.block_size" when it is 0. The read consistency of the
// request's lookup is the caller's to await first (lookup_service.h AwaitReadConsistency).
[[nodiscard]] Result<RoutingAnswer> DecideRoute(const Services& services,
                                                const RoutingRequest& request);

}  // namespace kvatlas::server
