#include "server/service/load_service.h"

#include <chrono>
#include <utility>

#include "server/service/ingest_service.h"

namespace kvatlas::server {

Result<LoadReportResult> ReportLoad(const Services& services, LoadReport report) {
  KVATLAS_RETURN_IF_ERROR(ValidateLoadReport(report));
  const FleetLoadTable::Clock::time_point now = FleetLoadTable::Clock::now();
  if (!report.loads.empty() && !services.machine->fleet_load().HasRoom(report.router_id, now)) {
    return Status::ResourceExhausted("router_id: " + std::to_string(kMaxLoadRouters) +
                                     " routers report load already; \"" + report.router_id +
                                     "\" would be one more (an idle router's report ends "
                                     "with its lease)");
  }
  LoadReportCommand command;
  command.report = std::move(report);
  command.accepted_at_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
  CommandBatch batch;
  batch.commands.emplace_back(std::move(command));
  LoadReportResult result;
  result.accepted_at_ms =
      std::get<LoadReportCommand>(batch.commands.front()).accepted_at_ms;
  KVATLAS_ASSIGN_OR_RETURN(result.revision, SubmitAndWait(services, std::move(batch)));
  return result;
}

void FillSharedLoad(const Services& services, RoutingRequest* request) {
  (void)services.machine->fleet_load().FillCandidates(
      request->candidates, request->lookup.context.block_size, FleetLoadTable::Clock::now());
}

}  // namespace kvatlas::server
