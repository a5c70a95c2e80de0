// Replica audits (docs/replication.md §Replica audits): what one replica learnt from the
// AuditCommands (command.h) it applied. Every replica applies the same audits at the same
// log indexes, records its replica digest at each, and compares the one it recorded at the
// previous audit point with the leader's, which the next audit carries. The comparison is
// made on the applying thread, deterministically, at a point of the log; no RPC.
//
// Thread-safety: none inside; the StateMachine keeps its AuditTrail under its state lock
// (written on the applying thread, read by anyone through StateMachine::audit()).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "kvatlas/common/types.h"
#include "server/model/command.h"
#include "server/model/replica_digest.h"

namespace kvatlas::server {

enum class AuditVerdict : uint8_t {
  kPending = 0,   // no audit point compared yet (since this server started)
  kOk = 1,        // the last comparison found the leader's digest
  kDiverged = 2,  // the last comparison found another digest: serves no reads
  // The last audit applied came from a leader of another digest scheme (a build with other
  // digest elements, replica_digest.h): nothing compared. Not entered from kDiverged, which
  // only a comparison clears.
  kUnchecked = 3,
};

// "pending", "ok", "diverged", "unchecked": GET /v1/cluster's audit.status.
[[nodiscard]] std::string_view AuditVerdictName(AuditVerdict verdict);

// One audit point: the replica digest this replica had when it applied an AuditCommand at
// log index `index` (the last one when an entry holds several).
struct AuditPoint {
  Revision index = 0;
  uint64_t digest = 0;
};

struct AuditStatus {
  AuditVerdict verdict = AuditVerdict::kPending;
  // The audit point of the last comparison, this replica's digest there and the leader's.
  Revision index = 0;
  uint64_t digest = 0;
  uint64_t leader_digest = 0;
  // The index of the AuditCommand that made the last comparison, and when (this server's
  // clock, applying it).
  Revision checked_by = 0;
  std::chrono::system_clock::time_point checked_at;
  // Comparisons made and how many found another digest, since this server started.
  uint64_t checks = 0;
  uint64_t mismatches = 0;
  // AuditCommands applied that named an audit point and compared nothing: this replica had
  // no digest of it (it started, or installed a snapshot, after it), or the leader's digest
  // scheme is not this build's.
  uint64_t unchecked = 0;
  // This build's digest scheme, and the one of the last AuditCommand applied (0: none yet).
  uint32_t digest_scheme = kReplicaDigestScheme;
  uint32_t leader_digest_scheme = 0;
  // The latest audit point recorded (what this server would send as leader).
  std::optional<AuditPoint> latest;
};

class AuditTrail {
 public:
  // Audit points kept: an AuditCommand is checked against the point it names, which is
  // the latest its proposer had recorded; a few more cover audits in flight together.
  static constexpr size_t kKeptPoints = 16;

  // Applies `audit`, found at log index `index` with the replica digest `digest` there:
  // compares (only when the audit's digest scheme is this build's), records, and returns
  // true when this comparison turned the verdict into kDiverged (the caller logs it once).
  bool Apply(const AuditCommand& audit, Revision index, uint64_t digest,
             std::chrono::system_clock::time_point now);

  const AuditStatus& status() const { return status_; }
  // The latest audit point, for the next AuditCommand.
  std::optional<AuditPoint> latest() const { return status_.latest; }

 private:
  std::optional<uint64_t> DigestAt(Revision index) const;

  std::deque<AuditPoint> points_;  // ascending index
  AuditStatus status_;
};

// The 503 message of a diverged replica (reads, /readyz), naming the audit point, both
// digests and what to do.
[[nodiscard]] std::string DivergedMessage(const AuditStatus& status);

// Why an audit from a leader of another digest scheme compared nothing, naming both schemes
// (logged when the leader's scheme changes to one that is not this build's).
[[nodiscard]] std::string SchemeMismatchMessage(const AuditStatus& status);

}  // namespace kvatlas::server
