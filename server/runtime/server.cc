#include "server/runtime/server.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "common/internal/log.h"
#include "server/api/backup_parts.h"
#include "server/api/http_access.h"
#include "server/replication/tcp_transport.h"
#include "server/runtime/access_config.h"
#include "server/runtime/concurrent_tasks.h"
#include "server/runtime/options_from_config.h"
#include "server/runtime/prediction_forwarder.h"
#include "server/service/ingest_service.h"
#include "server/storage/backup.h"

namespace kvatlas::server {
namespace {

namespace fs = std::filesystem;

// Write-then-rename, so that a reader polling for the file never sees a partial address.
Status WriteFileAtomically(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    out.flush();
    if (!out) return Status::IOError("cannot write " + tmp.string() + ": " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::Ok();
}

// The address other servers and clients reach `bound` at: a wildcard host (0.0.0.0, ::)
// is replaced by the host of this server's raft address, which its peers already reach.
std::string Advertised(const std::string& bound, const std::string& raft_address) {
  Result<HostPort> b = ParseHostPort(bound);
  Result<HostPort> r = ParseHostPort(raft_address);
  if (!b.has_value() || !r.has_value()) return bound;
  if (b->host != "0.0.0.0" && b->host != "::") return bound;
  return HostPort{r->host, b->port}.ToString();
}

// Points `services` at `group`'s own parts: the fields of Services a group owns.
void UseGroupParts(const Group& group, Services* services) {
  services->group = group.id();
  services->machine = group.machine();
  services->applier = group.applier();
  services->storage = group.storage();
  services->log = group.raft();
  services->feed = group.feed();
  services->leases = group.leases();
  services->predictions = group.predictions();
}

// How often a starting server logs its recovery's progress (RecoveryProgress).
constexpr std::chrono::seconds kProgressLogInterval{2};

// How many of a server's groups open (and start raft) at once. As many as the machine has
// cores: a group's open is mostly CPU (decoding RocksDB entries into the index; libraft
// decoding its snapshot), so more threads than cores gain nothing and only add to the
// memory held at once. At least 2, so that one group's disk reads overlap another's
// decoding even on one core. Memory: a group loading its raft snapshot holds it whole
// (libraft reads it, and the state machine restores from it when it is newer), so at most
// `threads` of the G snapshots are held at once: with groups of similar size, about
// threads/G of the whole state, no more than the one snapshot a single-group server of the
// same entries holds. The indexes themselves are the same size either way.
size_t StartThreads(size_t groups) {
  const size_t cores = std::thread::hardware_concurrency();  // 0 when unknown
  return std::min(groups, std::max<size_t>(2, cores));
}

}  // namespace

Server::Server(Config config, RecoveryProgress* progress) : config_(std::move(config)) {
  if (progress == nullptr) {
    own_progress_ = std::make_unique<RecoveryProgress>();
    progress = own_progress_.get();
  }
  progress_ = progress;
}

Result<std::unique_ptr<Server>> Server::Start(const Config& config, RecoveryProgress* progress) {
  std::unique_ptr<Server> server(new Server(config, progress));
  Status started;
  {
    ProgressLogger logger(server->progress_, kProgressLogInterval);
    started = server->Init();
  }
  if (started.ok()) return server;
  // Everything is closed before a data directory this start created is removed.
  const fs::path created = server->created_data_dir_;
  server.reset();
  if (!created.empty()) {
    std::error_code ec;
    fs::remove_all(created, ec);
    if (ec) LogWarning("cannot remove " + created.string() + " again: " + ec.message());
  }
  return started;
}

void Server::ReloadTls() {
  if (!tls_) {
    LogInfo("SIGHUP: TLS is off (no tls_cert); nothing to reload");
    return;
  }
  Result<std::string> reloaded = tls_->Reload();
  if (reloaded.has_value()) {
    LogInfo("TLS certificate reloaded: " + *reloaded + " (new connections use it)");
  } else {
    LogError("TLS certificate reload failed, keeping the current certificate (" + tls_->Summary() +
             "): " + reloaded.error().message());
  }
}

Status Server::Init() {
  progress_->BeginPhase("checking the configuration, files and listen addresses");
  KVATLAS_ASSIGN_OR_RETURN(Preflight preflight, RunPreflight(config_));
  KVATLAS_ASSIGN_OR_RETURN(const HostPort listen, ParseHostPort(config_.http_listen));
  KVATLAS_ASSIGN_OR_RETURN(const HostPort rpc_listen, ParseHostPort(config_.rpc_listen));
  const TlsListeners tls_on = TlsListenersOf(config_);
  tls_ = std::move(preflight.tls);
  if (tls_) {
    const std::string where = std::string(tls_on.http ? "REST" : "") +
                              (tls_on.http && tls_on.rpc ? " and " : "") +
                              (tls_on.rpc ? "the binary protocol" : "");
    const std::string clients = config_.tls_client_ca.empty()
                                    ? ""
                                    : "; clients need a certificate from " + config_.tls_client_ca;
    LogInfo("TLS on " + where + ": " + tls_->Summary() + clients);
  }
  KVATLAS_RETURN_IF_ERROR(progress_->CheckStop("starting"));
  KVATLAS_RETURN_IF_ERROR(OpenState(preflight));
  KVATLAS_RETURN_IF_ERROR(StartRaft(preflight));
  progress_->BeginPhase("starting the listeners");

  KVATLAS_RETURN_IF_ERROR(StartZmqIngest());
  KVATLAS_RETURN_IF_ERROR(StartAccessControl(std::move(preflight.tokens)));

  SetServicesFrom(config_, &services_);
  UseGroupParts(*group_, &services_);
  services_.metrics = &metrics_;
  services_.zmq = zmq_.get();
  services_.auth = auth_.get();
  services_.audit = audit_.get();
  services_.peers = peer_auth_.get();
  if (groups_.size() > 1) {
    group_forwarder_ = std::make_unique<HttpGroupForwarder>();
    services_.group_forwarder = group_forwarder_.get();
    rerouter_ = std::make_unique<WorkerPool>(1, kMaxRerouteQueued, "reroute");
    services_.rerouter = rerouter_.get();
    auto groups = std::make_shared<std::vector<Services>>();
    for (const auto& group : groups_) {
      Services parts = services_;
      UseGroupParts(*group, &parts);
      parts.cluster = group_->machine();
      groups->push_back(std::move(parts));
    }
    services_.groups = std::move(groups);
    group_services_.store(services_.groups.get(), std::memory_order_release);
  }

  RpcServerOptions rpc_options = RpcServerOptionsFrom(config_, rpc_listen);
  rpc_options.listen_fd = preflight.rpc.fd();
  if (tls_on.rpc) rpc_options.tls = tls_.get();
  rpc_ = std::make_unique<RpcServer>(rpc_options, &services_);
  KVATLAS_RETURN_IF_ERROR(rpc_->Start());
  rpc_listen_address_ = HostPort{rpc_listen.host, rpc_->port()}.ToString();
  services_.rpc_address = Advertised(rpc_listen_address_, group_->raft_address());
  KVATLAS_RETURN_IF_ERROR(
      WriteFileAtomically(fs::path(config_.data_dir) / "rpc.addr", rpc_listen_address_ + "\n"));
  wrote_rpc_address_ = true;

  Router router;
  AddAllRoutes(&services_, &router);
  // Only the host of the advertised address matters here: the port may still be 0.
  router.SetAccess(std::make_shared<HttpAccess>(
      &services_, HostAllowList(AllowedHostNames(
                      config_, Advertised(config_.http_listen, group_->raft_address())))));

  HttpServerOptions http_options = HttpServerOptionsFrom(config_, listen);
  http_options.listen_fd = preflight.http.fd();
  if (tls_on.http) http_options.tls = tls_.get();
  http_ = std::make_unique<HttpServer>(http_options, std::move(router), &metrics_);
  KVATLAS_RETURN_IF_ERROR(http_->Start());
  listen_address_ = HostPort{listen.host, http_->port()}.ToString();
  // Set before the address is published (http.addr, the log line): no client can reach
  // a handler that reads it earlier.
  services_.http_address = Advertised(listen_address_, group_->raft_address());
  KVATLAS_RETURN_IF_ERROR(
      WriteFileAtomically(fs::path(config_.data_dir) / "http.addr", listen_address_ + "\n"));
  wrote_address_ = true;
  if (!config_.publishers.empty()) {
    registrar_ = std::make_unique<PublisherRegistrar>(config_.publishers,
                                                      RegistrationLimitsOf(config_), &services_);
    registrar_->Start();
  }
  announcer_ = std::make_unique<Announcer>(
      config_.id, ServerAddresses{services_.http_address, services_.rpc_address},
      ShapeOf(services_), group_->awaiting_membership(), PolicyApplyWait(config_),
      services_.peer_http,
      Announcer::Deps{group_->machine(), group_->applier(), group_->raft(), peer_auth_.get(),
                      services_.shape_mismatch.get()});
  announcer_->Start();
  // Approximate mode: a follower's predictions go to the leader (before the recorder starts):
  // each group's to that group's leader, whose address group 1's state records.
  for (auto& group : groups_) {
    group->predictions()->SetForward(MakePredictionForward(
        config_.id, group->raft(), group_->machine(), peer_auth_.get(), services_.peer_http));
  }
  for (auto& group : groups_) group->StartPolicies();
  if (group_mirror_) group_mirror_->Start();
  if (replica_dropper_) replica_dropper_->Start();
  if (services_.groups != nullptr) {
    accepting_reporter_ = std::make_unique<AcceptingReporter>(&services_);
    accepting_reporter_->Start();
  }
  policies_started_ = true;
  return Status::Ok();
}

Status Server::OpenState(const Preflight& preflight) {
  const fs::path data_dir(config_.data_dir);
  std::error_code ec;
  // The topmost directory that does not exist yet is the one a failed start removes.
  for (fs::path p = fs::absolute(data_dir, ec); !ec && !p.empty() && !fs::exists(p, ec);
       p = p.parent_path()) {
    created_data_dir_ = p;
    if (p == p.parent_path()) break;
  }
  fs::create_directories(data_dir, ec);
  if (ec) {
    created_data_dir_.clear();  // nothing to remove, and maybe someone else's
    return Status::IOError("cannot create data dir " + config_.data_dir + ": " + ec.message());
  }

  KVATLAS_ASSIGN_OR_RETURN(const uint32_t found, CheckGroupCount());
  KVATLAS_RETURN_IF_ERROR(SettleReplicas(found));
  RemoveBackupParts(config_.data_dir);  // offered to a backup of the last run: nobody reads them
  trimmer_ = std::make_unique<MemoryTrimmer>();
  if (config_.groups > 1) raft_port_share_ = std::make_unique<RaftPortShare>();
  for (GroupId id = 1; id <= config_.groups; ++id) {
    GroupOptions options = GroupOptionsFrom(config_, preflight.raft, id);
    options.raft.port_share = raft_port_share_.get();
    fs::create_directories(options.dir, ec);
    if (ec) return Status::IOError("cannot create " + options.dir + ": " + ec.message());
    // Several groups start side by side, each reporting its own phase; a single group
    // reports to the server's progress itself.
    RecoveryProgress* progress =
        config_.groups > 1 ? progress_->AddPart("group " + std::to_string(id)) : progress_;
    groups_.push_back(std::make_unique<Group>(std::move(options), progress, trimmer_.get()));
  }
  group_ = groups_.front().get();
  return ForEachGroup("opening " + std::to_string(groups_.size()) + " groups",
                      [](Group& group) { return group.Open(); });
}

Status Server::ForEachGroup(const std::string& what, const std::function<Status(Group&)>& step) {
  if (groups_.size() == 1) return step(*groups_.front());
  // Shown only while no group runs a phase of its own (between them).
  progress_->BeginPhase(what);
  return RunConcurrently(
      groups_.size(), StartThreads(groups_.size()), "group-start",
      [&](size_t index) {
        Group& group = *groups_[index];
        Status done = step(group);
        group.progress()->EndPhase();
        if (done.ok()) return done;
        return Status(done.code(), group.progress()->label() + ": " + done.message());
      },
      [&] {
        for (const auto& group : groups_) group->progress()->RequestStop();
      });
}

Result<uint32_t> Server::CheckGroupCount() const {
  // Group g >= 2 lives in DATA_DIR/groups/g; group 1 in the data directory itself, which
  // holds its database once the server ran (or was restored from a backup).
  const uint32_t found = GroupsInDataDir(config_.data_dir);
  if (found == 0 || found == config_.groups) return found;  // 0: a new data directory
  return Status::FailedPrecondition(
      "the data directory " + config_.data_dir + " holds " + std::to_string(found) +
      " raft group(s), but groups is " + std::to_string(config_.groups) +
      ": the number of groups is fixed when a cluster is made (docs/scaling.md)");
}

Status Server::SettleReplicas(uint32_t found) {
  if (config_.groups == 1) {
    config_.replicas = 0;  // one group is on every server
    return Status::Ok();
  }
  KVATLAS_ASSIGN_OR_RETURN(const std::optional<uint32_t> recorded,
                           ReadReplicasRecord(config_.data_dir));
  const bool given = config_.Given("replicas");
  if (recorded) {
    if (given && config_.replicas != *recorded) {
      return Status::FailedPrecondition(
          "replicas: the data directory " + config_.data_dir + " records " +
          std::to_string(*recorded) + " (fixed when it was made), but replicas is " +
          std::to_string(config_.replicas) + " (docs/scaling.md §Replicas on some servers)");
    }
    config_.replicas = *recorded;
    return Status::Ok();
  }
  if (found > 0 && !given) {
    // Made before the record existed, when every group was on every server by default.
    LogInfo(
        "the data directory records no replication factor (made by an older version, or "
        "restored from an older backup): every group stays on every server (replicas 0)");
    config_.replicas = 0;
  }
  return WriteReplicasRecord(config_.data_dir, static_cast<uint32_t>(config_.replicas));
}

Status Server::StartAccessControl(std::vector<TokenEntry> tokens) {
  const bool enabled = AccessControlConfigured(config_);
  const size_t count = tokens.size();
  auth_ = std::make_unique<Authenticator>(enabled, std::move(tokens));
  audit_ = std::make_unique<AuditLog>(&metrics_);
  metrics_.SetAuthTokens(enabled ? count : 0);
  const std::vector<std::string> exposed = ExposedListeners(config_);
  if (enabled) {
    LogInfo("access control on: " + std::to_string(count) + " token(s) configured");
    if (count == 0)
      LogWarning(
          "access control is on but no token is configured: every request "
          "that needs one is refused until tokens are added (SIGHUP)");
    if (config_.insecure && (!config_.cluster_secret_file.empty() || !PeersExposed(config_))) {
      LogWarning("--insecure has no effect: tokens are configured");
    }
  } else if (!exposed.empty()) {
    std::string list;
    for (const std::string& e : exposed) list += (list.empty() ? "" : ", ") + e;
    LogWarning(
        "ACCESS CONTROL IS OFF (--insecure) while listening where other machines can "
        "reach this server (" +
        list + "): anyone who can connect can read, write and administer it");
  } else {
    LogInfo("access control off: no tokens configured; every listener is loopback-only");
  }
  // ZMQ carries no credentials whatever the tokens: say so when it is reachable.
  std::vector<std::string> zmq_binds;
  if (!config_.zmq_listen.empty()) zmq_binds.push_back(config_.zmq_listen);
  for (const ZmqListenerConfig& l : config_.zmq_listeners) zmq_binds.push_back(l.bind);
  for (const std::string& bind : zmq_binds) {
    const size_t scheme = bind.find("://");
    const size_t colon = bind.rfind(':');
    const std::string host = scheme == std::string::npos || colon <= scheme + 3
                                 ? std::string()
                                 : bind.substr(scheme + 3, colon - scheme - 3);
    if (bind.starts_with("tcp://") && !IsLoopbackHost(host)) {
      LogWarning("zmq listener " + bind +
                 " accepts engine events from anyone who can reach it (ZMQ carries no "
                 "credentials; docs/security.md)");
    }
  }
  return Status::Ok();
}

void Server::ReloadTokens(const Config& fresh) {
  Result<std::vector<TokenEntry>> tokens = LoadTokens(fresh);
  if (!tokens) {
    metrics_.RecordTokenReload(false, 0);
    LogError("SIGHUP: the tokens were not reloaded (the old ones stay): " +
             tokens.error().ToString());
    return;
  }
  if (!auth_->enabled()) {
    if (!AccessControlConfigured(fresh)) {
      LogInfo("SIGHUP: access control is off (no tokens configured): nothing to reload");
      return;
    }
    metrics_.RecordTokenReload(false, 0);
    LogError(
        "SIGHUP: tokens are configured now, but this server started without access "
        "control; restart it to turn access control on");
    return;
  }
  const size_t count = tokens->size();
  auth_->Replace(std::move(*tokens));
  metrics_.RecordTokenReload(true, count);
  audit_->Note("tokens reloaded: " + std::to_string(count) + " token(s) configured");
  // Connections holding a token that was removed end now, not at their next request.
  if (rpc_) rpc_->RecheckCredentials();
}

Status Server::StartZmqIngest() {
  ZmqIngestOptions options = ZmqIngestOptionsFrom(config_);
  if (groups_.size() > 1) {
    // A context the directory placed on a group is written there even once that group
    // stops taking new contexts (it was placed while the group took them).
    for (size_t i = 0; i < groups_.size(); ++i) {
      groups_[i]->applier()->SetPlacedHere(
          [cluster = group_->machine(), id = static_cast<GroupId>(i + 1)](const ContextKey& c) {
            const std::shared_ptr<const PlacementDirectory> directory = cluster->directory();
            const ContextPlacement* placed = directory->Find(c);
            return placed != nullptr && placed->ranges.front().group == id;
          });
    }
    options.target_of = [this](const ContextKey& context) {
      const size_t index = HomeGroup(context, static_cast<uint32_t>(groups_.size())) - 1;
      Group* group = groups_[index].get();
      ZmqTarget target{group->machine(), group->applier(), nullptr, static_cast<GroupId>(index + 1),
                       nullptr};
      // A stream's batches go to its group's leader wherever it is (forwarded while this
      // server does not lead that group).
      // Split where the directory places some of its contexts elsewhere (docs/scaling.md
      // §Placed contexts).
      target.try_submit = [this, group, index](CommandBatch* batch, Applier::Callback done) {
        const std::vector<Services>* copies = group_services_.load(std::memory_order_acquire);
        if (copies == nullptr) return group->applier()->TrySubmitAsync(batch, std::move(done));
        return TrySubmitStreamBatch(services_, (*copies)[index], batch, std::move(done));
      };
      target.drop_new_context_stores = [this, group, index](CommandBatch* batch) {
        const std::vector<Services>* copies = group_services_.load(std::memory_order_acquire);
        if (copies == nullptr) return group->applier()->DropNewContextStores(batch);
        return PlaceOrDropNewContextStores(services_, (*copies)[index], batch);
      };
      return target;
    };
  }
  // Each stream is followed by the leader of its group (groups are at most 64).
  options.led_groups = [this] {
    uint64_t led = 0;
    for (size_t i = 0; i < groups_.size(); ++i) {
      if (groups_[i]->raft()->is_leader()) led |= uint64_t{1} << i;
    }
    return led;
  };
  zmq_ = std::make_unique<ZmqIngest>(group_->machine(), group_->applier(), std::move(options));
  KVATLAS_RETURN_IF_ERROR(zmq_->Start());
  zmq_notify_.store(zmq_.get(), std::memory_order_release);
  zmq_->NotifyRegistryChanged();
  std::vector<Applier*> appliers;
  std::vector<RaftLog*> rafts;
  for (const auto& group : groups_) {
    appliers.push_back(group->applier());
    rafts.push_back(group->raft());
  }
  disk_watcher_ = std::make_unique<DiskWatcher>(config_.data_dir, config_.min_free_disk_bytes,
                                                std::move(appliers), std::move(rafts));
  disk_watcher_->Start();
  return Status::Ok();
}

Status Server::Shutdown() {
  if (shut_down_) return Status::Ok();
  shut_down_ = true;
  // Order matters: requests in flight wait on the applier, so the servers stop first (they
  // are answered), then the applier drains its queue, then what it wrote is made durable.
  // The RPC server is destroyed only after the applier stopped: ingest callbacks post into
  // its io_context.
  // The groups led here go to other servers first, while everything still runs (the
  // announcer stopped first: a server that has just started would end its drain).
  if (announcer_) announcer_->Stop();
  DrainLeadership();
  // Every policy loop is asked first, so that rounds waiting on the applier (up to 2 s
  // each) end together, then each is joined.
  for (auto& group : groups_) group->RequestStopPolicies();
  if (group_mirror_) group_mirror_->RequestStop();
  if (replica_dropper_) replica_dropper_->RequestStop();
  if (accepting_reporter_) accepting_reporter_->RequestStop();
  if (disk_watcher_) disk_watcher_->RequestStop();
  if (registrar_) registrar_->RequestStop();
  for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) (*it)->StopPolicies();
  if (group_mirror_) group_mirror_->Stop();
  if (replica_dropper_) replica_dropper_->Stop();
  if (accepting_reporter_) accepting_reporter_->Stop();
  if (announcer_) announcer_->Stop();
  if (disk_watcher_) disk_watcher_->Stop();
  if (registrar_) registrar_->Stop();
  if (rpc_) rpc_->Stop();
  if (http_) http_->Stop();
  // The ingest thread may be waiting for room in the applier's queue: stop it first.
  if (zmq_) zmq_->Stop();
  // Parts being routed again are submitted (or answered) before the appliers stop.
  if (rerouter_) rerouter_->Stop();
  // Parts still held for another group's leader are answered unavailable; calls in flight
  // end within their timeouts.
  if (group_forwarder_) group_forwarder_->Stop();
  // The applier stops taking batches; what it proposed completes (or fails) when raft
  // stops, on raft's thread, while the applier object still exists.
  for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) (*it)->StopReplication();
  rpc_.reset();
  Status flushed;
  for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) {
    if (Status s = (*it)->Flush(); !s.ok() && flushed.ok()) flushed = s;
  }
  // Only our own: after a failed start the file may be another server's.
  std::error_code ec;
  if (wrote_address_) fs::remove(fs::path(config_.data_dir) / "http.addr", ec);
  if (wrote_rpc_address_) fs::remove(fs::path(config_.data_dir) / "rpc.addr", ec);
  return flushed;
}

Server::~Server() {
  if (Status s = Shutdown(); !s.ok()) LogError("shutdown: " + s.ToString());
}

}  // namespace kvatlas::server
