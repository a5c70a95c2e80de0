// Services: what every request is decided with, whichever protocol it came over. The REST
// adapter (server/api/) and the binary-protocol adapter (server/rpc/) decode a request,
// call a function of this layer (lookup_service.h, route_decision.h, ingest_service.h,
// stats_service.h, cluster_service.h, registration_service.h, lease_service.h,
// feed_service.h, readiness.h) and encode what it returns; nothing here knows HTTP or
// frames. Handlers only submit writes to the Applier and read state under
// StateMachine::Read, so no network thread ever blocks the state machine.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/internal/worker_pool.h"
#include "kvatlas/common/limits.h"
#include "kvatlas/common/placement.h"
#include "server/feed/change_feed.h"
#include "server/index/index.h"
#include "server/ingest/event_converter.h"
#include "server/peer/peer_auth.h"
#include "server/service/audit.h"
#include "server/service/auth.h"
#include "server/service/group_forwarder.h"
#include "server/service/metrics.h"
#include "server/state/applier.h"
#include "server/state/lease_tracker.h"
#include "server/state/prediction_recorder.h"
#include "server/state/replicated_log.h"
#include "server/state/state_machine.h"
#include "server/storage/storage.h"
#include "server/zmq/endpoint_policy.h"
#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {

struct ServiceOptions {
  ConverterOptions converter;
  // How long a write waits for its batch to be applied (and a membership change for its
  // commit) before answering deadline_exceeded (the batch may still be applied later).
  std::chrono::milliseconds apply_timeout{10'000};
  // The index's IndexOptions::max_lookup_blocks: tokens past that many blocks are not even
  // hashed, so a huge query costs no more than a capped one.
  uint32_t max_lookup_blocks = IndexOptions{}.max_lookup_blocks;
  // GET /v1/watch streams open at once (each holds an HTTP worker thread).
  size_t max_watch_streams = 4;
  // Context snapshots (GET /v1/snapshot, the binary kSnapshot; snapshot_stream.h) being
  // streamed at once (resource_exhausted past it), and the copies of one page of them.
  size_t max_snapshot_streams = 4;
  size_t snapshot_page_copies = 65'536;
  // Copies a context snapshot of an in-memory server (no storage: copied whole under the
  // read lock) holds at most (payload_too_large past it). A server with storage streams
  // any number of copies from a pinned RocksDB snapshot.
  size_t max_snapshot_copies = 4'000'000;
  // Registrations admitted (count and endpoint transports), registration_service.h.
  RegistrationLimits registrations;
  // The configured name limits (max_name_bytes, max_salt_bytes, max_location_bytes), at most
  // the decoders' maxima: applied to ingested events (PrepareIngest), registrations
  // (RegisterPublisher) and lookups (LookupPrefix).
  NameLimits names{.config_keys = true};
};

// How this server calls other members' REST APIs (a follower forwarding a write to the
// leader, announcing its addresses): plaintext, or TLS verifying the member's certificate.
struct PeerHttpOptions {
  bool tls = false;
  std::string ca_file;  // CA certificates (PEM) of the members' certificates; empty: system's
  // This server's certificate and key (PEM), presented to members that require client
  // certificates; empty: none.
  std::string cert_file;
  std::string key_file;
};

// Pointers are not owned and must outlive every adapter that uses them.
// Write parts waiting to be routed again (Services::rerouter): past it such a write fails
// unavailable (docs/limits.md).
inline constexpr size_t kMaxRerouteQueued = 1'024;

// Why this server's group count or replication factor differs from the one group 1's leader
// runs, as that leader answered this server's announcement (CheckClusterShape); empty while
// none is known. Readiness reports it. Thread-safe.
class ShapeMismatch {
 public:
  void Set(std::string why) {
    std::lock_guard lock(mu_);
    why_ = std::move(why);
  }
  [[nodiscard]] std::string Get() const {
    std::lock_guard lock(mu_);
    return why_;
  }

 private:
  mutable std::mutex mu_;
  std::string why_;
};

struct Services {
  StateMachine* machine = nullptr;
  Applier* applier = nullptr;
  const Storage* storage = nullptr;  // null for an in-memory server
  Metrics* metrics = nullptr;
  ZmqIngest* zmq = nullptr;        // null when ZMQ ingest is not running (tests)
  ReplicatedLog* log = nullptr;    // null without replication (tests)
  ChangeFeed* feed = nullptr;      // null without a change feed (tests)
  LeaseTracker* leases = nullptr;  // null = holder leases off (tests)
  // Approximate mode's predictions (docs/routing.md §Approximate mode); null = a route
  // records none (tests).
  PredictionRecorder* predictions = nullptr;
  // Access control (auth.h): null = off, every request is the anonymous admin (tests).
  const Authenticator* auth = nullptr;
  AuditLog* audit = nullptr;  // null = no audit lines (tests)
  // How internal calls between the servers are signed and checked (forwarding.h); null
  // without replication (tests).
  PeerAuth* peers = nullptr;
  uint64_t server_id = 1;
  // The raft group the parts above belong to (1: the registry's group).
  GroupId group = 1;
  // Group 1's state machine, where the cluster-wide state lives: the registry, the servers'
  // addresses and the fleet's loads. Null = `machine` (group 1 itself, a single group).
  StateMachine* cluster = nullptr;
  // Every group this server hosts, by id from 1, each a copy of this struct with that
  // group's machine, applier, storage, log, feed, leases and predictions (docs/scaling.md
  // §Groups on every server), made before the listeners start (so without their
  // addresses: answers about the cluster use this struct); null on a single-group server.
  std::shared_ptr<const std::vector<Services>> groups;
  // Servers holding each group's replicas (docs/scaling.md §Replicas on some servers; the
  // `replicas` setting): 0 = every group on every server.
  size_t replicas = 0;
  // Set by the announcer when group 1's leader refuses this server's announcement because
  // they run another group count or replication factor; shared by every copy.
  std::shared_ptr<ShapeMismatch> shape_mismatch = std::make_shared<ShapeMismatch>();
  // Where a write part goes when this server does not lead its group (group_forwarder.h),
  // shared by every copy; null = submitted to the group's applier whoever leads (a single
  // group: a follower's writes are answered not_leader and proxied whole, forwarding.h).
  GroupForwarder* group_forwarder = nullptr;
  // Where write parts answered by callback (the binary protocol's, the ZMQ ingest's) that
  // their group refused wrong_group are routed again (one `reroute` thread, at most
  // kMaxRerouteQueued waiting; docs/scaling.md §Placed contexts); null = such a
  // refusal is the write's answer (a single group: never).
  WorkerPool* rerouter = nullptr;
  // The data dir (disk space metrics) and the free space under which writes are refused;
  // empty for an in-memory server (tests).
  std::string data_dir;
  uint64_t min_free_disk_bytes = 0;
  // Online backups (backup_service.h): the root they are written under (empty = off), the
  // configured cluster_id recorded in them, and the flag that lets one run at a time
  // (shared by every copy of this struct).
  std::string backup_dir;
  std::string cluster_id;
  std::shared_ptr<std::atomic<bool>> backup_running = std::make_shared<std::atomic<bool>>(false);
  // Snapshot streams open (snapshot_stream.h), shared by every copy of this struct.
  std::shared_ptr<std::atomic<size_t>> snapshot_streams = std::make_shared<std::atomic<size_t>>(0);
  // This server's addresses as it announces them (GET /v1/cluster, AnnounceCommand): the
  // bound ones, with a wildcard host replaced by the raft address's host.
  std::string http_address;
  std::string rpc_address;
  PeerHttpOptions peer_http;
  ServiceOptions options;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

// The state machine holding the cluster-wide state (Services::cluster).
[[nodiscard]] inline StateMachine& ClusterState(const Services& services) {
  return services.cluster != nullptr ? *services.cluster : *services.machine;
}

// The group `context` lives in: where the placement directory (group 1's: StateMachine::
// directory) places it, else its home group (HomeGroup; docs/scaling.md §Placed contexts).
// 1 on a single-group server. A split context's first range (splits are not made yet).
[[nodiscard]] inline GroupId GroupOf(const Services& services, const ContextKey& context) {
  if (services.groups == nullptr) return 1;
  return GroupOfContext(*ClusterState(services).directory(), context,
                        static_cast<uint32_t>(services.groups->size()));
}

// The servers the directory records as holding `group`'s replicas (SetGroupMembersCommand),
// ascending; empty when it records none (every server holds the group, or its leader has not
// recorded its members yet).
[[nodiscard]] std::vector<uint64_t> RecordedMembers(const PlacementDirectory& directory,
                                                    GroupId group);

// Whether this server answers for `group` — a group's copy of the Services (Services::groups),
// or a single-group server's — from its own replica (docs/scaling.md §Replicas on some
// servers): always for group 1; else while the directory's record of the group names this
// server, or, with no record yet, while every server holds every group (replicas 0) or this
// server is a voter of the group's raft configuration. A server that does not asks a
// member (RecordedMembers).
[[nodiscard]] bool HostsGroup(const Services& group);
// Ok where HostsGroup; else kWrongGroup naming the group's recorded members (or saying none
// are recorded yet), for a read this server cannot answer from its own replica.
[[nodiscard]] Status CheckHostsGroup(const Services& group);

// The parts of the group `context` lives in (GroupOf): `services` itself on a single-group
// server (and for a group's own copy).
[[nodiscard]] inline const Services& ServicesFor(const Services& services,
                                                 const ContextKey& context) {
  if (services.groups == nullptr) return services;
  return (*services.groups)[GroupOf(services, context) - 1];
}

}  // namespace kvatlas::server
