// The settings of each part of a server from its Config: one builder per part's Options,
// the one place where config keys become module settings (docs/api.md §Configuration
// names the keys). A builder sets what the config decides and leaves the rest — sockets,
// callbacks, the TLS context, pointers to other parts — at the struct's default, for the
// Server that wires the parts to set.
//
// Pure functions of a validated config (ValidateConfig): thread-compatible.
#pragma once

#include "common/internal/host_port.h"
#include "server/api/http_server.h"
#include "server/feed/change_feed.h"
#include "server/replication/raft_log.h"
#include "server/rpc/rpc_server.h"
#include "server/runtime/config.h"
#include "server/runtime/group.h"
#include "server/runtime/preflight.h"
#include "server/service/services.h"
#include "server/state/applier.h"
#include "server/state/lease_tracker.h"
#include "server/state/state_machine.h"
#include "server/storage/storage.h"
#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {

// RocksDB at DATA_DIR/db: storage_sync, the memory budget (storage_*_bytes). Without
// storage_sync RocksDB's own WAL is off: the raft log is the durable record
// (docs/replication.md), and the WAL would only write everything a second time.
[[nodiscard]] StorageOptions StorageOptionsFrom(const Config& config);
// hash_seed, max_entries_per_context, max_lookup_blocks.
[[nodiscard]] StateMachineOptions StateMachineOptionsFrom(const Config& config);
// feed_window_bytes, feed_window_keys.
[[nodiscard]] ChangeFeedOptions ChangeFeedOptionsFrom(const Config& config);
// applier_max_queue, applier_max_group_batches.
[[nodiscard]] ApplierOptions ApplierOptionsFrom(const Config& config);
// holder_ttl_seconds.
[[nodiscard]] LeaseOptions LeaseOptionsFrom(const Config& config);
// This server's raft member: its id, DATA_DIR/raft, raft_bind, the raft_* timings and
// sizes, and from `placement` its address and whom it bootstraps with (a single server is
// a one-voter cluster; an initial voter bootstraps with --peers; a server not among them
// joins a running cluster with an empty configuration and waits to be added).
[[nodiscard]] RaftOptions RaftOptionsFrom(const Config& config, const RaftPlacement& placement);
// The directory of group `group`'s state: the data directory for group 1 (a single-group
// server's layout), DATA_DIR/groups/<group> for the others.
[[nodiscard]] std::string GroupDirOf(const Config& config, GroupId group);
// Group `group`'s parts (group.h): the builders above for storage, the state machine, the
// feed, the applier, leases and raft (`placement` from the preflight), in GroupDirOf's
// directory, with audit_interval_ms and PolicyApplyWait. Groups other than 1 have raft
// address HOST:PORT/<group> (their voters' too) and do not listen themselves
// (tcp_transport.h §Groups on one port).
[[nodiscard]] GroupOptions GroupOptionsFrom(const Config& config, const RaftPlacement& placement,
                                            GroupId group = 1);
// How long a policy loop (announcer, lease keeper) waits for a command it submitted to be
// applied: apply_timeout_ms, at most 2 s, so that a shutdown never waits long for it.
[[nodiscard]] std::chrono::milliseconds PolicyApplyWait(const Config& config);
// The zmq_* keys (zmq_listen as one more listener after zmq_listeners),
// max_registrations, max_blocks_per_event.
[[nodiscard]] ZmqIngestOptions ZmqIngestOptionsFrom(const Config& config);
// What the service layer decides requests with: the ingest and name limits, apply_timeout_ms,
// max_lookup_blocks, the snapshot stream limits, the registration limits, and watch streams
// at most half of http_threads (they hold HTTP workers; at least one).
[[nodiscard]] ServiceOptions ServiceOptionsFrom(const Config& config);
// How this server calls other members' REST APIs: they are configured as this one's (the
// same TLS settings on every member), trusting tls_peer_ca.
[[nodiscard]] PeerHttpOptions PeerHttpOptionsFrom(const Config& config);
// The config's part of `services`: options, peer_http, server_id, data_dir, backup_dir,
// cluster_id, min_free_disk_bytes. Its pointers to the parts are the caller's to set.
void SetServicesFrom(const Config& config, Services* services);
// The binary protocol's listener at `listen` (rpc_listen, parsed): rpc_* keys; a TLS
// handshake is bounded like a frame (rpc_frame_timeout_ms).
[[nodiscard]] RpcServerOptions RpcServerOptionsFrom(const Config& config, const HostPort& listen);
// The REST listener at `listen` (http_listen, parsed): http_* keys and max_body_bytes.
[[nodiscard]] HttpServerOptions HttpServerOptionsFrom(const Config& config, const HostPort& listen);

}  // namespace kvatlas::server
