#include "server/service/replica_audit_service.h"

#include <chrono>
#include <cstdio>

#include "server/model/replica_digest.h"

namespace kvatlas::server {

Status ServesReads(const Services& services) {
  KVATLAS_RETURN_IF_ERROR(CheckHostsGroup(services));
  if (!services.machine->diverged()) return Status::Ok();
  return Status::Unavailable(DivergedMessage(services.machine->audit()));
}

nlohmann::json AuditJson(const AuditStatus& s) {
  const bool checked = s.checks > 0;
  const auto when = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  return {
      {"status", AuditVerdictName(s.verdict)},
      {"index", checked ? nlohmann::json(s.index) : nullptr},
      {"digest", checked ? nlohmann::json(ReplicaDigestHex(s.digest)) : nullptr},
      {"leader_digest", checked ? nlohmann::json(ReplicaDigestHex(s.leader_digest)) : nullptr},
      {"checked_by", checked ? nlohmann::json(s.checked_by) : nullptr},
      {"checked_at_ms", checked ? nlohmann::json(when(s.checked_at)) : nullptr},
      {"checks", s.checks},
      {"mismatches", s.mismatches},
      {"unchecked", s.unchecked},
      {"digest_scheme", s.digest_scheme},
      {"leader_digest_scheme",
       s.leader_digest_scheme != 0 ? nlohmann::json(s.leader_digest_scheme) : nullptr},
      {"latest_index", s.latest ? nlohmann::json(s.latest->index) : nullptr},
      {"latest_digest", s.latest ? nlohmann::json(ReplicaDigestHex(s.latest->digest)) : nullptr}};
}

std::string RenderAuditMetrics(const AuditStatus& s) {
  std::string out;
  const auto metric = [&out](const char* name, const char* type, const char* help, uint64_t value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(value) + "\n";
  };
  metric("kvatlas_audit_checks_total", "counter",
         "Replica audits that compared this server's digest with the leader's.", s.checks);
  metric("kvatlas_audit_mismatches_total", "counter",
         "Replica audits that found this server's digest different from the leader's.",
         s.mismatches);
  metric("kvatlas_audit_diverged", "gauge",
         "1 while the last replica audit found this server's state diverged (it serves no "
         "reads).",
         s.verdict == AuditVerdict::kDiverged ? 1 : 0);
  metric("kvatlas_audit_last_index", "gauge",
         "Log index of the audit point last compared (0: none yet).", s.checks > 0 ? s.index : 0);
  return out;
}

}  // namespace kvatlas::server
