#include "server/service/readiness.h"

#include <string>

#include "server/service/cluster_service.h"
#include "server/service/registration_service.h"
#include "server/service/replica_audit_service.h"

namespace kvatlas::server {

Status Readiness(const Services& services) {
  if (services.applier->failed()) {
    return Status::Unavailable(
        "a storage write failed; the server takes no writes and must be restarted");
  }
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  if (std::string refused = services.applier->writes_refused(); !refused.empty()) {
    return Status::Unavailable("writes are refused: " + refused);
  }
  if (services.log != nullptr) KVATLAS_RETURN_IF_ERROR(LeaderReachable(services));
  if (std::string mismatch = services.shape_mismatch->Get(); !mismatch.empty()) {
    return Status::Unavailable(mismatch);
  }
  return CheckStreamsFollowed(services);
}

std::vector<std::string> ReadinessWarnings(const Services& services) {
  std::vector<std::string> warnings = StreamsStuckConnecting(services);
  if (services.log != nullptr) {
    const LogMetrics log = services.log->GetMetrics();
    if (log.failed_snapshot_index != 0) {
      warnings.push_back(
          "the last raft snapshot (at log index " + std::to_string(log.failed_snapshot_index) +
          ") was not written, " + std::to_string(log.snapshot_failures) +
          " failed since start: the raft log is not compacted and grows until one succeeds "
          "(see the server log; kvatlas_raft_snapshot_failures_total)");
    }
  }
  if (std::string refusing = services.applier->new_contexts_refused(); !refusing.empty()) {
    warnings.push_back("the group takes no new contexts: " + refusing);
  }
  return warnings;
}

Status LeaderReachable(const Services& services) {
  const LeaderAddresses leader = FindLeader(services);
  if (leader.id == 0) {
    return Status::Unavailable(
        "no leader known yet (the cluster is electing one); a write would be refused");
  }
  if (leader.id != services.server_id && !leader.http_address) {
    return Status::Unavailable("the leader is server " + std::to_string(leader.id) +
                               ", but the leader's address is not announced yet; a write "
                               "could not be forwarded to it");
  }
  return Status::Ok();
}

}  // namespace kvatlas::server
