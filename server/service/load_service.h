// Shared in-flight load of a router fleet (docs/routing.md §Shared load): a router's load
// report goes through the log as a LoadReportCommand (a write: kNotLeader on a follower,
// which REST forwards), and every server sums the live reports (StateMachine::fleet_load)
// for the route candidates that give no load of their own. Answers POST and GET /v1/load
// (and binary kLoadReport, kLoadView).
// Safe from any thread.
#pragma once

#include <cstdint>

#include "kvatlas/common/fleet_load.h"
#include "kvatlas/common/protocol.h"
#include "kvatlas/common/result.h"
#include "server/service/services.h"

namespace kvatlas::server {

struct LoadReportResult {
  Revision revision = 0;
  uint64_t accepted_at_ms = 0;  // the lease runs from here (Unix ms, the leader's clock)
};

// A report made into the batch to commit: validated (ValidateLoadReport), a new router
// refused when kMaxLoadRouters live routers are kept (kResourceExhausted), stamped with this
// server's clock. The binary protocol submits it asynchronously (rpc_handler.h).
struct PreparedLoadReport {
  CommandBatch batch;
  uint64_t accepted_at_ms = 0;
  uint64_t expires_at_ms = 0;
};
[[nodiscard]] Result<PreparedLoadReport> PrepareLoadReport(const Services& services,
                                                           LoadReport report);

// PrepareLoadReport, then commits the batch and waits for it (SubmitAndWait).
[[nodiscard]] Result<LoadReportResult> ReportLoad(const Services& services, LoadReport report);

// The live reports of this server's table, at its applied revision (GET /v1/load's
// routers, binary kLoadView).
[[nodiscard]] protocol::LoadViewAnswer ViewLoads(const Services& services);

// Fills the candidates of `request` that give no load with the fleet's (FillCandidates).
void FillSharedLoad(const Services& services, RoutingRequest* request);

}  // namespace kvatlas::server
