#include "server/service/load_service.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "server/service/ingest_service.h"

namespace kvatlas::server {

Result<PreparedLoadReport> PrepareLoadReport(const Services& services, LoadReport report) {
  KVATLAS_RETURN_IF_ERROR(ValidateLoadReport(report));
  const FleetLoadTable::Clock::time_point now = FleetLoadTable::Clock::now();
  if (!report.loads.empty() && !services.machine->fleet_load().HasRoom(report.router_id, now)) {
    return Status::ResourceExhausted("router_id: " + std::to_string(kMaxLoadRouters) +
                                     " routers report load already; \"" + report.router_id +
                                     "\" would be one more (an idle router's report ends "
                                     "with its lease)");
  }
  PreparedLoadReport prepared;
  prepared.accepted_at_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
  prepared.expires_at_ms = prepared.accepted_at_ms + report.ttl_ms;
  prepared.batch.commands.emplace_back(
      LoadReportCommand{std::move(report), prepared.accepted_at_ms});
  return prepared;
}

Result<LoadReportResult> ReportLoad(const Services& services, LoadReport report) {
  KVATLAS_ASSIGN_OR_RETURN(PreparedLoadReport prepared,
                           PrepareLoadReport(services, std::move(report)));
  LoadReportResult result;
  result.accepted_at_ms = prepared.accepted_at_ms;
  KVATLAS_ASSIGN_OR_RETURN(result.revision, SubmitAndWait(services, std::move(prepared.batch)));
  return result;
}

protocol::LoadViewAnswer ViewLoads(const Services& services) {
  const auto now = FleetLoadTable::Clock::now();
  protocol::LoadViewAnswer answer;
  answer.revision = services.machine->applied_revision();
  for (FleetLoadTable::RouterEntry& router : services.machine->fleet_load().LiveRouters(now)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(router.expires_at - now).count();
    answer.routers.push_back(protocol::LoadViewRouter{
        std::move(router.router_id), static_cast<uint64_t>(std::max<int64_t>(left, 0)),
        std::move(router.loads)});
  }
  return answer;
}

void FillSharedLoad(const Services& services, RoutingRequest* request) {
  (void)ClusterState(services).fleet_load().FillCandidates(
      request->candidates, request->lookup.context.block_size, FleetLoadTable::Clock::now());
}

}  // namespace kvatlas::server
