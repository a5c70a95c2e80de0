#include "server/state/replica_audit.h"

#include <string>

#include "server/model/replica_digest.h"

namespace kvatlas::server {

std::string_view AuditVerdictName(AuditVerdict verdict) {
  switch (verdict) {
    case AuditVerdict::kPending:
      return "pending";
    case AuditVerdict::kOk:
      return "ok";
    case AuditVerdict::kDiverged:
      return "diverged";
    case AuditVerdict::kUnchecked:
      return "unchecked";
  }
  return "pending";
}

std::optional<uint64_t> AuditTrail::DigestAt(Revision index) const {
  for (auto it = points_.rbegin(); it != points_.rend(); ++it) {
    if (it->index == index) return it->digest;
    if (it->index < index) break;
  }
  return std::nullopt;
}

bool AuditTrail::Apply(const AuditCommand& audit, Revision index, uint64_t digest,
                       std::chrono::system_clock::time_point now) {
  bool turned_diverged = false;
  status_.leader_digest_scheme = audit.digest_scheme;
  if (audit.digest_scheme != status_.digest_scheme) {
    // Equal states give other digests under other elements: a comparison would call every
    // replica of the other build diverged (during a rolling upgrade, say).
    if (status_.verdict != AuditVerdict::kDiverged) status_.verdict = AuditVerdict::kUnchecked;
    if (audit.checked_index != 0) ++status_.unchecked;
  } else if (audit.checked_index != 0) {
    if (const std::optional<uint64_t> mine = DigestAt(audit.checked_index)) {
      const bool equal = *mine == audit.checked_digest;
      turned_diverged = !equal && status_.verdict != AuditVerdict::kDiverged;
      status_.verdict = equal ? AuditVerdict::kOk : AuditVerdict::kDiverged;
      status_.index = audit.checked_index;
      status_.digest = *mine;
      status_.leader_digest = audit.checked_digest;
      status_.checked_by = index;
      status_.checked_at = now;
      ++status_.checks;
      if (!equal) ++status_.mismatches;
    } else {
      ++status_.unchecked;
    }
  }
  // Several audits in one entry: the last one's digest is the entry's point.
  if (!points_.empty() && points_.back().index == index) {
    points_.back().digest = digest;
  } else if (points_.empty() || points_.back().index < index) {
    points_.push_back(AuditPoint{index, digest});
    if (points_.size() > kKeptPoints) points_.pop_front();
  }
  status_.latest = points_.back();
  return turned_diverged;
}

std::string DivergedMessage(const AuditStatus& status) {
  return "this replica's state diverged from the leader's at log index " +
         std::to_string(status.index) + " (replica digest " + ReplicaDigestHex(status.digest) +
         ", leader's " + ReplicaDigestHex(status.leader_digest) +
         "); it serves no reads. Replace it with a fresh member or restore it from a backup: "
         "docs/operations.md §Diverged replicas";
}

std::string SchemeMismatchMessage(const AuditStatus& status) {
  return "the leader uses replica digest scheme " + std::to_string(status.leader_digest_scheme) +
         " and this build " + std::to_string(status.digest_scheme) +
         ": this replica's audits compare nothing (unchecked) until every server runs the same "
         "build (docs/operations.md §Upgrading)";
}

}  // namespace kvatlas::server
