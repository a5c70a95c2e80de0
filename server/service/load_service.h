// Shared in-flight load of a router fleet (docs/routing.md §Shared load): a router's load
// report goes through the log as a LoadReportCommand (a write: kNotLeader on a follower,
// which REST forwards), and every server sums the live reports (StateMachine::fleet_load)
// for the route candidates that give no load of their own. Answers POST and GET /v1/load.
// Safe from any thread.
#pragma once

#include <cstdint>

#include "kvatlas/common/fleet_load.h"
#include "kvatlas/common/result.h"
#include "server/service/services.h"

namespace kvatlas::server {

struct LoadReportResult {
  Revision revision = 0;
  uint64_t accepted_at_ms = 0;  // the lease runs from here (Unix ms, the leader's clock)
};

// Validates `report` (ValidateLoadReport), refuses a new router when kMaxLoadRouters live
// routers are kept (kResourceExhausted), stamps it with this server's clock and commits it.
[[nodiscard]] Result<LoadReportResult> ReportLoad(const Services& services, LoadReport report);

// Fills the candidates of `request` that give no load with the fleet's (FillCandidates).
void FillSharedLoad(const Services& services, RoutingRequest* request);

}  // namespace kvatlas::server
