#include "server/service/lease_service.h"

#include <chrono>

namespace kvatlas::server {

Result<HeartbeatResult> Heartbeat(const Services& services, std::span<const HolderKey> holders) {
  HeartbeatResult result;
  result.holders = holders.size();
  if (services.leases == nullptr || !services.leases->enabled()) return result;
  // Each group keeps its own leases (a holder's entries may be in any of them).
  if (services.groups == nullptr) {
    KVATLAS_RETURN_IF_ERROR(services.leases->Heartbeat(holders));
  } else {
    for (const Services& group : *services.groups) {
      KVATLAS_RETURN_IF_ERROR(group.leases->Heartbeat(holders));
    }
  }
  result.ttl_seconds = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(services.leases->ttl()).count());
  return result;
}

}  // namespace kvatlas::server
