#include "server/api/backup_parts.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "common/internal/log.h"
#include "server/api/forwarding.h"
#include "server/api/routes.h"
#include "server/service/backup_service.h"
#include "server/service/cluster_service.h"

namespace kvatlas::server {
namespace fs = std::filesystem;
namespace {

// How long a member may take to write its part (a pinned image streamed to its disk), and
// to answer one page of it.
constexpr PeerHttpTimeouts kOfferTimeouts{std::chrono::seconds(2), std::chrono::minutes(30)};
constexpr PeerHttpTimeouts kPageTimeouts{std::chrono::seconds(2), std::chrono::minutes(2)};

Status RequireMemberCall(const Services& services, const RouteRequest& request,
                         std::string_view what) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  const std::optional<uint64_t> sender =
      request.peer ? std::optional<uint64_t>(request.peer->sender) : std::nullopt;
  return RequireInternalCall(services, sender, request.http.remote_addr, what);
}

fs::path PartsRoot(const Services& services) {
  return fs::path(services.data_dir) / kBackupPartsDir;
}

// The part ?part= names: 32 lowercase hex digits (OfferedPartId), under the parts root.
Result<fs::path> NamedPart(const Services& services, const RouteRequest& request) {
  const std::string id = request.http.Param("part");
  const bool hex = id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex) return Status::InvalidArgument("query.part: must be 32 lowercase hex digits");
  const fs::path dir = PartsRoot(services) / id;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound("backup part " + id + ": none (released, expired, or never offered)");
  }
  return dir;
}

std::string OfferedPartId() {
  std::random_device random;
  std::string id;
  constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) id.push_back(kHex[random() % 16]);
  return id;
}

// Deletes the parts idle past kBackupPartIdle; returns how many remain.
size_t SweepParts(const fs::path& root) {
  std::error_code ec;
  size_t kept = 0;
  const auto now = fs::file_time_type::clock::now();
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    std::error_code time_error;
    const auto touched = fs::last_write_time(entry.path(), time_error);
    if (!time_error && now - touched < kBackupPartIdle) {
      ++kept;
      continue;
    }
    std::error_code removed;
    fs::remove_all(entry.path(), removed);
    LogInfo("backup part " + entry.path().filename().string() + " deleted (idle past " +
            std::to_string(kBackupPartIdle.count()) + " min)");
  }
  return kept;
}

Result<HttpReply> HandleOffer(const Services& services, const RouteRequest& request) {
  KVATLAS_RETURN_IF_ERROR(RequireMemberCall(services, request, "POST /v1/cluster/backup-part"));
  KVATLAS_ASSIGN_OR_RETURN(const Services* named, GroupOfQuery(services, request));
  const Services& group = *named;
  KVATLAS_RETURN_IF_ERROR(CheckHostsGroup(group));
  if (group.storage == nullptr || services.data_dir.empty()) {
    return Status::FailedPrecondition("this server keeps no storage to back up");
  }
  const fs::path root = PartsRoot(services);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::IOError("cannot create " + root.string() + ": " + ec.message());
  if (SweepParts(root) >= kMaxBackupParts) {
    return Status::ResourceExhausted("this server keeps " + std::to_string(kMaxBackupParts) +
                                     " backup parts already; retry later");
  }
  const std::string part = OfferedPartId();
  const fs::path dir = root / part;
  KVATLAS_RETURN_IF_ERROR(PrepareEmptyDirectory(dir.string(), "backup part"));
  KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Storage::Capture> image, group.storage->CaptureAll());
  Result<BackupManifest> written =
      WriteBackup(*image, dir.string(),
                  {services.cluster_id, services.server_id, /*online=*/true, group.group,
                   static_cast<uint32_t>(services.groups == nullptr ? 1 : services.groups->size()),
                   BackupReplicas(services)});
  if (!written.has_value()) {
    fs::remove_all(dir, ec);
    return written.status();
  }
  return JsonReply(nlohmann::json({{"part", part}, {"manifest", ManifestToJson(*written)}}).dump());
}

Result<HttpReply> HandleRead(const Services& services, const RouteRequest& request) {
  KVATLAS_RETURN_IF_ERROR(
      RequireMemberCall(services, request, "POST /v1/cluster/backup-part/read"));
  KVATLAS_ASSIGN_OR_RETURN(fs::path dir, NamedPart(services, request));
  const std::optional<uint64_t> offset = ParseDecimal(request.http.Param("offset"));
  if (!offset) return Status::InvalidArgument("query.offset: must be a byte offset");
  std::error_code ec;
  fs::last_write_time(dir, fs::file_time_type::clock::now(), ec);  // in use: not idle
  const fs::path state = dir / kBackupStateFile;
  const uint64_t size = fs::file_size(state, ec);
  if (ec) return Status::IOError("cannot read " + state.string() + ": " + ec.message());
  if (*offset > size) {
    return Status::InvalidArgument("query.offset: past the state file's " + std::to_string(size) +
                                   " bytes");
  }
  HttpReply reply;
  reply.content_type = "application/octet-stream";
  reply.body.resize(static_cast<size_t>(std::min<uint64_t>(kBackupPartPage, size - *offset)));
  std::ifstream in(state, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(*offset));
  if (!in.read(reply.body.data(), static_cast<std::streamsize>(reply.body.size()))) {
    return Status::IOError("cannot read " + state.string());
  }
  return reply;
}

Result<HttpReply> HandleRelease(const Services& services, const RouteRequest& request) {
  KVATLAS_RETURN_IF_ERROR(
      RequireMemberCall(services, request, "POST /v1/cluster/backup-part/release"));
  KVATLAS_ASSIGN_OR_RETURN(fs::path dir, NamedPart(services, request));
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Status::IOError("cannot delete " + dir.string() + ": " + ec.message());
  return JsonReply(R"({"status": "ok"})");
}

// One member's part, written into `part_dir`.
Result<BackupManifest> FetchFrom(const Services& services, const LeaderAddresses& from,
                                 GroupId group, const std::string& part_dir,
                                 const BackupSource& source) {
  const uint64_t member = from.id;
  const auto call = [&](const std::string& path, PeerHttpTimeouts timeouts) {
    return PostInternalCall(services.peer_http, services.peers, member, *from.http_address, path,
                            "{}", timeouts);
  };
  KVATLAS_ASSIGN_OR_RETURN(
      std::string offered,
      call("/v1/cluster/backup-part?group=" + std::to_string(group), kOfferTimeouts));
  const nlohmann::json answer = nlohmann::json::parse(offered, nullptr, false);
  if (!answer.is_object() || !answer.contains("part") || !answer["part"].is_string() ||
      !answer.contains("manifest") || !answer["manifest"].is_string()) {
    return Status::Unavailable("server " + std::to_string(member) +
                               " offered a backup part without \"part\" and \"manifest\"");
  }
  const std::string part = answer["part"].get<std::string>();
  Result<BackupManifest> written = [&]() -> Result<BackupManifest> {
    KVATLAS_ASSIGN_OR_RETURN(BackupManifest manifest,
                             ParseManifest(answer["manifest"].get<std::string>()));
    if (manifest.source.group != group || manifest.source.groups != source.groups) {
      return Status::Corruption("server " + std::to_string(member) + " offered group " +
                                std::to_string(manifest.source.group) + " of " +
                                std::to_string(manifest.source.groups) + " for group " +
                                std::to_string(group) + " of " + std::to_string(source.groups));
    }
    return WriteReceivedPart(part_dir, manifest, [&](uint64_t offset) {
      return call("/v1/cluster/backup-part/read?part=" + part + "&offset=" + std::to_string(offset),
                  kPageTimeouts);
    });
  }();
  // The member deletes it in any case (or, missing this, once it idles out).
  if (Result<std::string> released =
          call("/v1/cluster/backup-part/release?part=" + part, kPageTimeouts);
      !released.has_value()) {
    LogWarning("backup part of group " + std::to_string(group) + " on server " +
               std::to_string(member) + " not released: " + released.error().ToString());
  }
  return written;
}

}  // namespace

void AddBackupPartRoutes(const Services* services, Router* router) {
  router->Add(
      {"POST", "/v1/cluster/backup-part", RouteAccess::kInternal,
       [services](const RouteRequest& request) { return HandleOffer(*services, request); }});
  router->Add({"POST", "/v1/cluster/backup-part/read", RouteAccess::kInternal,
               [services](const RouteRequest& request) { return HandleRead(*services, request); }});
  router->Add(
      {"POST", "/v1/cluster/backup-part/release", RouteAccess::kInternal,
       [services](const RouteRequest& request) { return HandleRelease(*services, request); }});
}

Result<BackupManifest> FetchBackupPart(const Services& services, GroupId group,
                                       const std::string& part_dir, const BackupSource& source) {
  std::string why;
  const std::vector<LeaderAddresses> members = AnnouncedMembers(services, group, &why);
  Status last = Status::Unavailable(why);
  for (const LeaderAddresses& member : members) {
    Result<BackupManifest> part = FetchFrom(services, member, group, part_dir, source);
    if (part.has_value()) return part;
    last = Status(part.error().code(),
                  "from server " + std::to_string(member.id) + ": " + part.error().message());
    LogWarning("backup part of group " + std::to_string(group) + ": " + last.ToString());
    // What a failed member left is removed before the next is asked.
    std::error_code ec;
    for (const fs::directory_entry& entry : fs::directory_iterator(part_dir, ec)) {
      fs::remove_all(entry.path(), ec);
    }
  }
  return last;
}

void RemoveBackupParts(const std::string& data_dir) {
  if (data_dir.empty()) return;
  std::error_code ec;
  fs::remove_all(fs::path(data_dir) / kBackupPartsDir, ec);
}

}  // namespace kvatlas::server
