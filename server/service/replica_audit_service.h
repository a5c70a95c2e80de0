// What the replica audits (docs/replication.md §Replica audits; server/state/replica_audit.h)
// mean for requests: a diverged replica serves no reads and is not ready, GET /v1/cluster
// shows this server's audit, /metrics its counters. Safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvatlas/common/status.h"
#include "server/service/services.h"
#include "server/state/replica_audit.h"

namespace kvatlas::server {

// OK unless this server holds no replica of the group `services` is a copy of
// (CheckHostsGroup: kWrongGroup), or the last replica audit found this server's state
// different from the leader's: then kUnavailable (503) with DivergedMessage. Every read of
// the map (lookups, routes, block locations, holder and context listings, context
// snapshots, watches) checks it first.
[[nodiscard]] Status ServesReads(const Services& services);

// GET /v1/cluster's "audit" object: {status, index, digest, leader_digest, checked_by,
// checked_at_ms, checks, mismatches, unchecked, digest_scheme, leader_digest_scheme,
// latest_index, latest_digest}; digests as 16 hex digits, absent values null.
[[nodiscard]] nlohmann::json AuditJson(const AuditStatus& status);

// kvatlas_audit_checks_total, kvatlas_audit_mismatches_total, kvatlas_audit_diverged,
// kvatlas_audit_last_index (Prometheus text).
[[nodiscard]] std::string RenderAuditMetrics(const AuditStatus& status);

}  // namespace kvatlas::server
