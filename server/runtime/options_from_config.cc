#include "server/runtime/options_from_config.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "kvatlas/common/placement.h"
#include "server/placement/replica_placement.h"
#include "server/replication/peer_handshake.h"

namespace kvatlas::server {
namespace {

namespace fs = std::filesystem;

std::chrono::milliseconds Ms(uint64_t ms) { return std::chrono::milliseconds(ms); }

}  // namespace

StorageOptions StorageOptionsFrom(const Config& config) {
  StorageOptions options;
  options.path = (fs::path(config.data_dir) / "db").string();
  options.sync_writes = config.storage_sync;
  options.disable_wal = !config.storage_sync;
  options.block_cache_bytes = config.storage_block_cache_bytes;
  options.write_buffer_bytes = config.storage_write_buffer_bytes;
  options.memory_bytes = config.storage_memory_bytes;
  return options;
}

StateMachineOptions StateMachineOptionsFrom(const Config& config) {
  StateMachineOptions options;
  options.hash_seed = config.hash_seed;
  options.index.max_entries_per_context = config.max_entries_per_context;
  options.index.max_lookup_blocks = static_cast<uint32_t>(config.max_lookup_blocks);
  options.predicted_max_entries = static_cast<size_t>(config.predicted_max_entries);
  return options;
}

ChangeFeedOptions ChangeFeedOptionsFrom(const Config& config) {
  ChangeFeedOptions options;
  options.window_bytes = static_cast<size_t>(config.feed_window_bytes);
  options.window_keys = config.feed_window_keys;
  return options;
}

ApplierOptions ApplierOptionsFrom(const Config& config) {
  ApplierOptions options;
  options.max_queue = config.applier_max_queue;
  options.max_group_batches = config.applier_max_group_batches;
  return options;
}

LeaseOptions LeaseOptionsFrom(const Config& config) {
  LeaseOptions options;
  options.ttl = std::chrono::seconds(config.holder_ttl_seconds);
  return options;
}

RaftOptions RaftOptionsFrom(const Config& config, const RaftPlacement& placement) {
  RaftOptions options;
  options.handshake_timeout_ms = static_cast<unsigned>(config.raft_handshake_timeout_ms);
  options.id = config.id;
  options.dir = (fs::path(config.data_dir) / "raft").string();
  options.address = placement.address;
  options.bind_address = config.raft_bind;
  if (placement.single) options.bootstrap = {{config.id, options.address}};
  if (placement.initial_voter) options.bootstrap = placement.peers;
  options.election_timeout_ms = static_cast<unsigned>(config.raft_election_timeout_ms);
  options.heartbeat_timeout_ms = static_cast<unsigned>(config.raft_heartbeat_timeout_ms);
  options.snapshot_threshold = static_cast<unsigned>(config.raft_snapshot_threshold);
  options.snapshot_trailing = static_cast<unsigned>(config.raft_snapshot_trailing);
  options.snapshot_log_bytes = static_cast<size_t>(config.raft_snapshot_log_bytes);
  options.apply_queue = static_cast<size_t>(config.raft_apply_queue);
  options.segment_bytes = static_cast<size_t>(config.raft_segment_bytes);
  return options;
}

std::string GroupDirOf(const Config& config, GroupId group) {
  if (group == 1) return config.data_dir;
  return (fs::path(config.data_dir) / "groups" / std::to_string(group)).string();
}

GroupOptions GroupOptionsFrom(const Config& config, const RaftPlacement& placement, GroupId group) {
  GroupOptions options;
  options.group = group;
  options.server_id = config.id;
  options.dir = GroupDirOf(config, group);
  options.storage = StorageOptionsFrom(config);
  options.machine = StateMachineOptionsFrom(config);
  options.feed = ChangeFeedOptionsFrom(config);
  options.applier = ApplierOptionsFrom(config);
  options.leases = LeaseOptionsFrom(config);
  options.raft = RaftOptionsFrom(config, placement);
  options.placement = placement;
  options.raft_listen_configured = !config.raft_listen.empty();
  options.audit_interval = Ms(config.audit_interval_ms);
  options.snapshot_stop_bytes = config.snapshot_stop_bytes;
  options.predictions.ttl_ms = static_cast<uint32_t>(config.predicted_ttl_ms);
  options.policy_apply_wait = PolicyApplyWait(config);
  if (group != 1) {
    options.storage.path = (fs::path(options.dir) / "db").string();
    options.raft.dir = (fs::path(options.dir) / "raft").string();
    options.raft.address = RaftAddressOfGroup(options.raft.address, group);
    for (auto& [id, address] : options.raft.bootstrap) address = RaftAddressOfGroup(address, group);
    options.raft.listen = false;  // group 1's transport listens for every group
    if (config.replicas > 0 && !placement.single) {
      // Bootstrapped on its chosen servers only; a server not chosen starts the group with
      // no configuration, as a joining server does, and holds none of it.
      std::vector<uint64_t> ids;
      for (const auto& [id, address] : placement.peers) ids.push_back(id);
      const std::vector<uint64_t> chosen =
          PlaceReplicas(config.groups, ids, config.replicas)[group - 1];
      std::erase_if(options.raft.bootstrap, [&chosen](const auto& peer) {
        return !std::binary_search(chosen.begin(), chosen.end(), peer.first);
      });
      options.placement.initial_voter =
          placement.initial_voter && std::binary_search(chosen.begin(), chosen.end(), config.id);
      if (!options.placement.initial_voter) options.raft.bootstrap.clear();
    }
  }
  return options;
}

std::chrono::milliseconds PolicyApplyWait(const Config& config) {
  return std::min(Ms(config.apply_timeout_ms), Ms(2'000));
}

ZmqIngestOptions ZmqIngestOptionsFrom(const Config& config) {
  ZmqIngestOptions options;
  options.listeners = config.zmq_listeners;
  if (!config.zmq_listen.empty()) {
    ZmqListenerConfig listener;
    listener.bind = config.zmq_listen;
    listener.model = config.zmq_listen_model;
    listener.block_size = static_cast<uint32_t>(config.zmq_listen_block_size);
    options.listeners.push_back(std::move(listener));
  }
  options.max_concurrent_replays = config.zmq_max_concurrent_replays;
  options.replay_idle_timeout = Ms(config.zmq_replay_timeout_ms);
  options.replay_cooldown = Ms(config.zmq_replay_cooldown_ms);
  options.receive_hwm = static_cast<int>(config.zmq_receive_hwm);
  options.reconnect_interval = Ms(config.zmq_reconnect_interval_ms);
  options.reconnect_interval_max = Ms(config.zmq_reconnect_interval_max_ms);
  options.max_registrations = config.max_registrations;
  options.mapper.max_blocks_per_event = config.max_blocks_per_event;
  return options;
}

ServiceOptions ServiceOptionsFrom(const Config& config) {
  ServiceOptions options;
  options.max_watch_streams = std::max<size_t>(1, config.http_threads / 2);
  options.converter.max_events_per_batch = config.max_events_per_batch;
  options.converter.max_blocks_per_event = config.max_blocks_per_event;
  options.max_snapshot_streams = config.max_snapshot_streams;
  options.snapshot_page_copies = config.snapshot_page_copies;
  options.apply_timeout = Ms(config.apply_timeout_ms);
  options.names.name_bytes = config.max_name_bytes;
  options.names.salt_bytes = config.max_salt_bytes;
  options.names.location_bytes = config.max_location_bytes;
  options.registrations = RegistrationLimitsOf(config);
  options.max_lookup_blocks = static_cast<uint32_t>(config.max_lookup_blocks);
  return options;
}

PeerHttpOptions PeerHttpOptionsFrom(const Config& config) {
  PeerHttpOptions options;
  options.tls = TlsListenersOf(config).http;
  options.ca_file = config.tls_peer_ca;
  options.cert_file = config.tls_cert;
  options.key_file = config.tls_key;
  return options;
}

void SetServicesFrom(const Config& config, Services* services) {
  services->options = ServiceOptionsFrom(config);
  services->peer_http = PeerHttpOptionsFrom(config);
  services->server_id = config.id;
  services->data_dir = config.data_dir;
  services->backup_dir = config.backup_dir;
  services->cluster_id = config.cluster_id;
  services->min_free_disk_bytes = config.min_free_disk_bytes;
  services->replicas = static_cast<size_t>(config.replicas);
}

RpcServerOptions RpcServerOptionsFrom(const Config& config, const HostPort& listen) {
  RpcServerOptions options;
  options.host = listen.host;
  options.port = listen.port;
  options.threads = config.rpc_threads;
  options.connection.max_frame_bytes = static_cast<uint32_t>(config.rpc_max_frame_bytes);
  options.connection.max_in_flight = config.rpc_max_in_flight;
  options.max_connections = config.rpc_max_connections;
  options.max_connections_per_peer = config.rpc_max_connections_per_peer;
  options.connection.frame_timeout = Ms(config.rpc_frame_timeout_ms);
  options.max_buffered_bytes = static_cast<size_t>(config.rpc_max_buffered_bytes);
  options.connection.idle_timeout = Ms(config.rpc_idle_timeout_ms);
  options.connection.handshake_timeout = options.connection.frame_timeout;
  return options;
}

HttpServerOptions HttpServerOptionsFrom(const Config& config, const HostPort& listen) {
  HttpServerOptions options;
  options.host = listen.host;
  options.port = listen.port;
  options.threads = config.http_threads;
  options.max_body_bytes = config.max_body_bytes;
  options.idle_timeout = Ms(config.http_read_timeout_ms);
  options.request_timeout = Ms(config.http_request_timeout_ms);
  options.write_timeout = Ms(config.http_write_timeout_ms);
  options.max_connections = config.http_max_connections;
  options.max_connections_per_peer = config.http_max_connections_per_peer;
  options.max_queued_requests = config.http_max_queued_requests;
  return options;
}

}  // namespace kvatlas::server
