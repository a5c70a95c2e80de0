// Holder leases (docs/leases.md): a heartbeat keeps holders alive that may be silent longer
// than the lease TTL. Heartbeats are the leader's (LeaseTracker, not replicated): on a
// follower they fail with kNotLeader. Answers POST /v1/heartbeat and the binary kHeartbeat.
// Safe from any thread.
#pragma once

#include <cstdint>
#include <span>

#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"
#include "server/service/services.h"

namespace kvatlas::server {

struct HeartbeatResult {
  uint64_t holders = 0;      // holders named
  uint64_t ttl_seconds = 0;  // the lease TTL; 0 = leases off (the heartbeat changed nothing)
};

// With leases off there is nothing to keep alive (and nothing to send to the leader for):
// answered here, ttl_seconds 0. kResourceExhausted past the tracker's holder bound.
[[nodiscard]] Result<HeartbeatResult> Heartbeat(const Services& services,
                                                std::span<const HolderKey> holders);

}  // namespace kvatlas::server
