// Backups over REST (docs/api.md §Backups): POST /v1/admin/backup writes a backup of this
// server's state into a new directory under its backup_dir, GET /v1/admin/digest answers
// the state digest a backup records. Both admin; neither is forwarded (a backup is of the
// server asked, so ask the leader for every acknowledged write).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api/backup_parts.h"
#include "server/api/routes.h"
#include "server/service/backup_service.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleBackup(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  for (const auto& [key, value] : body.items()) {
    if (key != "to") return Status::InvalidArgument("body." + key + ": unknown field");
  }
  const auto to = body.find("to");
  if (to == body.end() || !to->is_string()) {
    return Status::InvalidArgument("body.to: must be a string naming a directory");
  }
  // A group this server does not hold (replicas on some servers) comes from a member.
  const BackupPartWriter fetch = [&services](GroupId group, const std::string& part_dir,
                                             const BackupSource& source) {
    return FetchBackupPart(services, group, part_dir, source);
  };
  KVATLAS_ASSIGN_OR_RETURN(BackupTaken taken, TakeBackup(services, to->get<std::string>(), fetch));
  // applied_index and state_digest are group 1's; records and bytes the whole backup's;
  // `groups` every group's part (one on a single-group server).
  const BackupManifest& m = taken.manifest;
  const auto bytes_of = [](const BackupManifest& part) -> uint64_t {
    return part.files.empty() ? 0 : part.files[0].bytes;
  };
  nlohmann::json groups = nlohmann::json::array();
  uint64_t records = 0;
  uint64_t bytes = 0;
  for (const BackupManifest& part : taken.groups) {
    records += part.records;
    bytes += bytes_of(part);
    groups.push_back({{"group", part.source.group},
                      {"applied_index", part.applied_index},
                      {"records", part.records},
                      {"bytes", bytes_of(part)},
                      {"state_digest", part.state_digest}});
  }
  const nlohmann::json out = {{"status", "ok"},
                              {"path", taken.path},
                              {"server_id", m.source.server_id},
                              {"applied_index", m.applied_index},
                              {"records", records},
                              {"bytes", bytes},
                              {"state_digest", m.state_digest},
                              {"capture_micros", taken.capture_micros},
                              {"total_micros", taken.total_micros},
                              {"groups", std::move(groups)}};
  return JsonReply(out.dump());
}

Result<HttpReply> HandleDigest(const Services& services) {
  KVATLAS_ASSIGN_OR_RETURN(std::vector<StateDigest> digests, DigestState(services));
  // The top-level figures are group 1's; `groups` every group's copy on this server, and
  // whether it holds a replica of it (with replicas on some servers, a copy it does not hold
  // is empty or left behind: not comparable with the members').
  nlohmann::json groups = nlohmann::json::array();
  for (size_t i = 0; i < digests.size(); ++i) {
    groups.push_back(
        {{"group", i + 1},
         {"applied_index", digests[i].applied_index},
         {"records", digests[i].records},
         {"state_digest", digests[i].digest},
         {"hosted_here", services.groups == nullptr || HostsGroup((*services.groups)[i])}});
  }
  const StateDigest& digest = digests.front();
  const nlohmann::json out = {{"server_id", services.server_id},
                              {"applied_index", digest.applied_index},
                              {"records", digest.records},
                              {"state_digest", digest.digest},
                              {"groups", std::move(groups)}};
  return JsonReply(out.dump());
}

}  // namespace

void AddAdminRoutes(const Services* services, Router* router) {
  AddBackupPartRoutes(services, router);
  router->Add(
      {"POST", "/v1/admin/backup", RouteAccess::kAdmin,
       [services](const RouteRequest& request) { return HandleBackup(*services, request); }});
  router->Add({"GET", "/v1/admin/digest", RouteAccess::kAdmin,
               [services](const RouteRequest&) { return HandleDigest(*services); }});
}

}  // namespace kvatlas::server
