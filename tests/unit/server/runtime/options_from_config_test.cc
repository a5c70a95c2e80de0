// The builders of options_from_config.h: every config key a builder reads arrives in its
// Options. Each case sets those keys to values that are neither the Config's default nor
// the Options struct's, so a key a builder forgot fails its check.
#include "server/runtime/options_from_config.h"

#include <doctest/doctest.h>

#include <chrono>

namespace kvatlas::server {
namespace {

using std::chrono::milliseconds;

TEST_CASE("StorageOptionsFrom: the data directory's db, storage_sync and the memory budget") {
  Config config;
  config.data_dir = "/tmp/somewhere";
  config.storage_sync = true;
  config.storage_block_cache_bytes = 1'111;
  config.storage_write_buffer_bytes = 2'222;
  config.storage_memory_bytes = 3'333;
  StorageOptions options = StorageOptionsFrom(config);
  CHECK(options.path == "/tmp/somewhere/db");
  CHECK(options.sync_writes);
  CHECK_FALSE(options.disable_wal);
  CHECK(options.block_cache_bytes == 1'111);
  CHECK(options.write_buffer_bytes == 2'222);
  CHECK(options.memory_bytes == 3'333);
  CHECK_FALSE(options.on_flush);  // the Server's to set

  config.storage_sync = false;  // the raft log is the durable record: no RocksDB WAL
  options = StorageOptionsFrom(config);
  CHECK_FALSE(options.sync_writes);
  CHECK(options.disable_wal);
}

TEST_CASE("StateMachineOptionsFrom: hash_seed and the index limits") {
  Config config;
  config.hash_seed = 4'242;
  config.max_entries_per_context = 777;
  config.max_lookup_blocks = 99;
  const StateMachineOptions options = StateMachineOptionsFrom(config);
  CHECK(options.hash_seed == 4'242);
  CHECK(options.index.max_entries_per_context == 777);
  CHECK(options.index.max_lookup_blocks == 99);
}

TEST_CASE("ChangeFeedOptionsFrom, ApplierOptionsFrom, LeaseOptionsFrom") {
  Config config;
  config.feed_window_bytes = 5'555;
  config.feed_window_keys = 6'666;
  config.applier_max_queue = 17;
  config.applier_max_group_batches = 19;
  config.holder_ttl_seconds = 23;
  const ChangeFeedOptions feed = ChangeFeedOptionsFrom(config);
  CHECK(feed.window_bytes == 5'555);
  CHECK(feed.window_keys == 6'666);
  const ApplierOptions applier = ApplierOptionsFrom(config);
  CHECK(applier.max_queue == 17);
  CHECK(applier.max_group_batches == 19);
  CHECK(LeaseOptionsFrom(config).ttl == std::chrono::seconds(23));
}

TEST_CASE("RaftOptionsFrom: id, directory, timings, sizes, and the placement's bootstrap") {
  Config config;
  config.id = 7;
  config.data_dir = "/tmp/somewhere";
  config.raft_bind = "0.0.0.0:9999";
  config.raft_handshake_timeout_ms = 1'234;
  config.raft_election_timeout_ms = 2'345;
  config.raft_heartbeat_timeout_ms = 345;
  config.raft_snapshot_threshold = 4'567;
  config.raft_snapshot_trailing = 567;
  config.raft_snapshot_log_bytes = 6'789;
  config.raft_apply_queue = 3;
  config.raft_segment_bytes = 7'890;
  RaftPlacement placement;
  placement.address = "10.0.0.7:7072";
  placement.peers = {{7, "10.0.0.7:7072"}, {8, "10.0.0.8:7072"}};
  placement.initial_voter = true;
  RaftOptions options = RaftOptionsFrom(config, placement);
  CHECK(options.id == 7);
  CHECK(options.dir == "/tmp/somewhere/raft");
  CHECK(options.address == "10.0.0.7:7072");
  CHECK(options.bind_address == "0.0.0.0:9999");
  CHECK(options.handshake_timeout_ms == 1'234);
  CHECK(options.election_timeout_ms == 2'345);
  CHECK(options.heartbeat_timeout_ms == 345);
  CHECK(options.snapshot_threshold == 4'567);
  CHECK(options.snapshot_trailing == 567);
  CHECK(options.snapshot_log_bytes == 6'789);
  CHECK(options.apply_queue == 3);
  CHECK(options.segment_bytes == 7'890);
  CHECK(options.bootstrap == placement.peers);
  CHECK(options.listen_fd == -1);  // the preflight's socket: the Server's to set
  CHECK(options.peer_auth == nullptr);

  // A single server is a one-voter cluster of itself.
  placement.initial_voter = false;
  placement.single = true;
  options = RaftOptionsFrom(config, placement);
  CHECK(options.bootstrap == std::vector<std::pair<uint64_t, std::string>>{{7, "10.0.0.7:7072"}});
  // A server not among the initial voters joins with an empty configuration.
  placement.single = false;
  CHECK(RaftOptionsFrom(config, placement).bootstrap.empty());
}

TEST_CASE("GroupOptionsFrom: the group's parts from their builders, its directory, policies") {
  Config config;
  config.id = 7;
  config.data_dir = "/tmp/somewhere";
  config.raft_listen = "10.0.0.7:7072";
  config.storage_block_cache_bytes = 1'111;
  config.hash_seed = 4'242;
  config.feed_window_keys = 6'666;
  config.applier_max_queue = 17;
  config.holder_ttl_seconds = 23;
  config.raft_segment_bytes = 7'890;
  config.audit_interval_ms = 321;
  config.apply_timeout_ms = 1'500;
  RaftPlacement placement;
  placement.address = "10.0.0.7:7072";
  placement.single = true;
  const GroupOptions options = GroupOptionsFrom(config, placement);
  CHECK(options.server_id == 7);
  CHECK(options.dir == "/tmp/somewhere");
  // One key of each part: the rest is each builder's own test.
  CHECK(options.storage.path == "/tmp/somewhere/db");
  CHECK(options.storage.block_cache_bytes == 1'111);
  CHECK(options.machine.hash_seed == 4'242);
  CHECK(options.feed.window_keys == 6'666);
  CHECK(options.applier.max_queue == 17);
  CHECK(options.leases.ttl == std::chrono::seconds(23));
  CHECK(options.raft.segment_bytes == 7'890);
  CHECK(options.raft.dir == "/tmp/somewhere/raft");
  CHECK(options.raft.address == "10.0.0.7:7072");
  CHECK(options.placement.single);
  CHECK(options.raft_listen_configured);
  CHECK(options.audit_interval == milliseconds(321));
  CHECK(options.policy_apply_wait == milliseconds(1'500));

  config.raft_listen.clear();
  CHECK_FALSE(GroupOptionsFrom(config, placement).raft_listen_configured);
}

TEST_CASE("PolicyApplyWait: apply_timeout_ms, at most 2 s") {
  Config config;
  config.apply_timeout_ms = 700;
  CHECK(PolicyApplyWait(config) == milliseconds(700));
  config.apply_timeout_ms = 60'000;
  CHECK(PolicyApplyWait(config) == milliseconds(2'000));
}

TEST_CASE("ZmqIngestOptionsFrom: listeners (zmq_listen last), replays, sockets, limits") {
  Config config;
  ZmqListenerConfig listed;
  listed.bind = "tcp://127.0.0.1:5600";
  listed.model = "listed";
  config.zmq_listeners = {listed};
  config.zmq_listen = "tcp://127.0.0.1:5601";
  config.zmq_listen_model = "m";
  config.zmq_listen_block_size = 32;
  config.zmq_max_concurrent_replays = 9;
  config.zmq_replay_timeout_ms = 1'001;
  config.zmq_replay_cooldown_ms = 1'002;
  config.zmq_receive_hwm = 1'003;
  config.zmq_reconnect_interval_ms = 1'004;
  config.zmq_reconnect_interval_max_ms = 1'005;
  config.max_registrations = 11;
  config.max_blocks_per_event = 13;
  const ZmqIngestOptions options = ZmqIngestOptionsFrom(config);
  REQUIRE(options.listeners.size() == 2);
  CHECK(options.listeners[0] == listed);
  CHECK(options.listeners[1].bind == "tcp://127.0.0.1:5601");
  CHECK(options.listeners[1].model == "m");
  CHECK(options.listeners[1].block_size == 32);
  CHECK(options.max_concurrent_replays == 9);
  CHECK(options.replay_idle_timeout == milliseconds(1'001));
  CHECK(options.replay_cooldown == milliseconds(1'002));
  CHECK(options.receive_hwm == 1'003);
  CHECK(options.reconnect_interval == milliseconds(1'004));
  CHECK(options.reconnect_interval_max == milliseconds(1'005));
  CHECK(options.max_registrations == 11);
  CHECK(options.mapper.max_blocks_per_event == 13);
  CHECK_FALSE(options.led_groups);  // the Server's to set

  config.zmq_listen.clear();  // no bound listener of its own
  CHECK(ZmqIngestOptionsFrom(config).listeners.size() == 1);
}

TEST_CASE("SetServicesFrom: the service options, peer calls and the server's identity") {
  Config config;
  config.http_threads = 10;
  config.max_events_per_batch = 101;
  config.max_blocks_per_event = 102;
  config.max_snapshot_streams = 103;
  config.snapshot_page_copies = 104;
  config.apply_timeout_ms = 105;
  config.max_name_bytes = 106;
  config.max_salt_bytes = 107;
  config.max_location_bytes = 108;
  config.max_registrations = 109;
  config.zmq_allowed_transports = "tcp,ipc";
  config.max_lookup_blocks = 110;
  config.tls_cert = "cert.pem";
  config.tls_key = "key.pem";
  config.tls_listeners = "http";
  config.tls_peer_ca = "ca.pem";
  config.id = 12;
  config.data_dir = "/tmp/somewhere";
  config.backup_dir = "/tmp/backups";
  config.cluster_id = "prod";
  config.min_free_disk_bytes = 111;
  Services services;
  SetServicesFrom(config, &services);
  const ServiceOptions& options = services.options;
  CHECK(options.max_watch_streams == 5);  // half of http_threads
  CHECK(options.converter.max_events_per_batch == 101);
  CHECK(options.converter.max_blocks_per_event == 102);
  CHECK(options.max_snapshot_streams == 103);
  CHECK(options.snapshot_page_copies == 104);
  CHECK(options.apply_timeout == milliseconds(105));
  CHECK(options.names.name_bytes == 106);
  CHECK(options.names.salt_bytes == 107);
  CHECK(options.names.location_bytes == 108);
  CHECK(options.names.config_keys);
  CHECK(options.registrations.max_registrations == 109);
  CHECK(options.registrations.allowed_transports == std::vector<std::string>{"tcp", "ipc"});
  CHECK(options.max_lookup_blocks == 110);
  CHECK(services.peer_http.tls);
  CHECK(services.peer_http.ca_file == "ca.pem");
  CHECK(services.peer_http.cert_file == "cert.pem");
  CHECK(services.peer_http.key_file == "key.pem");
  CHECK(services.server_id == 12);
  CHECK(services.data_dir == "/tmp/somewhere");
  CHECK(services.backup_dir == "/tmp/backups");
  CHECK(services.cluster_id == "prod");
  CHECK(services.min_free_disk_bytes == 111);
  CHECK(services.machine == nullptr);  // the parts are the Server's to set

  config.http_threads = 1;  // at least one watch stream
  CHECK(ServiceOptionsFrom(config).max_watch_streams == 1);
  config.tls_listeners = "rpc";  // members' REST is plaintext then
  CHECK_FALSE(PeerHttpOptionsFrom(config).tls);
}

TEST_CASE("RpcServerOptionsFrom: the listen address and every rpc_ key") {
  Config config;
  config.rpc_threads = 5;
  config.rpc_max_frame_bytes = 201;
  config.rpc_max_in_flight = 202;
  config.rpc_max_connections = 203;
  config.rpc_max_connections_per_peer = 204;
  config.rpc_frame_timeout_ms = 205;
  config.rpc_max_buffered_bytes = 206;
  config.rpc_idle_timeout_ms = 207;
  const RpcServerOptions options = RpcServerOptionsFrom(config, HostPort{"10.1.2.3", 4'321});
  CHECK(options.host == "10.1.2.3");
  CHECK(options.port == 4'321);
  CHECK(options.threads == 5);
  CHECK(options.connection.max_frame_bytes == 201);
  CHECK(options.connection.max_in_flight == 202);
  CHECK(options.max_connections == 203);
  CHECK(options.max_connections_per_peer == 204);
  CHECK(options.connection.frame_timeout == milliseconds(205));
  CHECK(options.connection.handshake_timeout == milliseconds(205));
  CHECK(options.max_buffered_bytes == 206);
  CHECK(options.connection.idle_timeout == milliseconds(207));
  CHECK(options.tls == nullptr);
}

TEST_CASE("HttpServerOptionsFrom: the listen address and every http_ key") {
  Config config;
  config.http_threads = 3;
  config.max_body_bytes = 301;
  config.http_read_timeout_ms = 302;
  config.http_request_timeout_ms = 303;
  config.http_write_timeout_ms = 304;
  config.http_max_connections = 305;
  config.http_max_connections_per_peer = 306;
  config.http_max_queued_requests = 307;
  const HttpServerOptions options = HttpServerOptionsFrom(config, HostPort{"10.1.2.3", 4'322});
  CHECK(options.host == "10.1.2.3");
  CHECK(options.port == 4'322);
  CHECK(options.threads == 3);
  CHECK(options.max_body_bytes == 301);
  CHECK(options.idle_timeout == milliseconds(302));
  CHECK(options.request_timeout == milliseconds(303));
  CHECK(options.write_timeout == milliseconds(304));
  CHECK(options.max_connections == 305);
  CHECK(options.max_connections_per_peer == 306);
  CHECK(options.max_queued_requests == 307);
  CHECK(options.tls == nullptr);
}

}  // namespace
}  // namespace kvatlas::server
