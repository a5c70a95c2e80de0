// Readiness: whether this server can take a write now, the decision behind GET /readyz. A
// server that says ready answers a write (POST /v1/events, ...) itself or, on a follower, by
// forwarding it to a leader whose address it knows; it does not say ready while every write
// would be refused. Reads may still be served while it is not ready. Safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "kvatlas/common/status.h"
#include "server/service/services.h"

namespace kvatlas::server {

// OK when ready; otherwise kUnavailable with a message naming the reason, checked in this
// order: a storage write failed (the server must be restarted); the last replica audit found
// this server's state diverged from the leader's (replica_audit_service.h); writes are refused
// (Applier::SetWritesRefused: the disk-space watermark); with replication, no leader is
// known; the leader is another server whose HTTP address is not in the replicated state yet
// (AnnounceCommand), so a write could not be forwarded to it; group 1's leader refused this
// server's announcement, running another group count or replication factor
// (Services::shape_mismatch); an engine stream cannot be followed (registration_service.h
// CheckStreamsFollowed).
[[nodiscard]] Status Readiness(const Services& services);

// What a ready server still reports (GET /readyz "warnings"): problems that do not stop it
// from taking writes, today the engine streams stuck connecting
// (registration_service.h StreamsStuckConnecting).
[[nodiscard]] std::vector<std::string> ReadinessWarnings(const Services& services);

// The replication part of Readiness: a leader is known, and is this server or has announced
// its HTTP address. Requires services.log.
[[nodiscard]] Status LeaderReachable(const Services& services);

}  // namespace kvatlas::server
