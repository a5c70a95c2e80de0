// Config: every setting of kvatlas-server, from a JSON config file (--config FILE) and
// command-line flags, flags overriding the file. Each field has one JSON key and one flag
// ("max_body_bytes" ↔ --max-body-bytes); the defaults are documented in
// deploy/config/kvatlas.example.json and docs/api.md §Configuration.
// Plain values and pure functions: thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/host_port.h"
#include "kvatlas/common/block_hasher.h"
#include "kvatlas/common/limits.h"
#include "kvatlas/common/result.h"
#include "server/model/registration.h"
#include "server/service/auth.h"
#include "server/zmq/endpoint_policy.h"
#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {

// The most raft groups a server hosts (`groups`): each runs a RocksDB instance, a raft
// loop and an apply thread of its own.
inline constexpr uint64_t kMaxGroups = 64;

struct Config {
  // Where the server keeps its state: RocksDB in DIR/db, the bound addresses in
  // DIR/http.addr and DIR/rpc.addr.
  std::string data_dir = "./data";
  // The directory online backups (POST /v1/admin/backup) are written under; empty = online
  // backups are off. Every backup is a new, empty directory inside it (docs/operations.md
  // §Backup and restore).
  std::string backup_dir;
  // HOST:PORT of the REST API ([v6]:PORT for IPv6). Port 0 picks a free port. Loopback by
  // default; a non-loopback address needs tokens (or `insecure`).
  std::string http_listen = "127.0.0.1:7070";
  // HOST:PORT of the binary protocol (docs/protocol.md); port 0 picks a free port, written
  // to DIR/rpc.addr. Loopback by default, like the REST API.
  std::string rpc_listen = "127.0.0.1:7071";
  // debug, info, warning or error.
  std::string log_level = "info";
  // Seed of the standard block hash. Must match the routers' (Dynamo uses 1337) and is
  // fixed for the life of a data directory: the server refuses to start on a mismatch.
  uint64_t hash_seed = kDefaultHashSeed;
  // Entries one context may hold before its oldest blocks are evicted (bounds memory
  // against publishers that never remove).
  uint64_t max_entries_per_context = 16'000'000;
  // Longest key chain a lookup walks; longer queries are cut.
  uint64_t max_lookup_blocks = 8'192;
  // fsync the RocksDB WAL on every applied group. Off by default: a write is acknowledged
  // once its raft log entry is fsynced (on a majority), and RocksDB, which may lose its
  // last writes in a power loss, is brought up to date from the log at restart.
  bool storage_sync = false;
  // RocksDB's memory, one budget (docs/operations.md §Sizing): memtables of both column
  // families and cached blocks are charged to one cache of storage_memory_bytes; memtables
  // flush once they pass storage_memory_bytes - storage_block_cache_bytes. 0 = no budget
  // (a block cache of storage_block_cache_bytes, memtables bounded by their number only).
  uint64_t storage_memory_bytes = 96ull << 20;
  uint64_t storage_block_cache_bytes = 16ull << 20;
  uint64_t storage_write_buffer_bytes = 32ull << 20;  // one memtable, at most
  // Memory of the change feed's window (ChangeFeedOptions::window_bytes): a watch resuming
  // from before it is compacted and must list again.
  uint64_t feed_window_bytes = 16ull << 20;
  // glibc malloc arenas (M_ARENA_MAX; 0 = glibc's own default, 8 per core). Each arena keeps
  // the memory freed in it until a trim; fewer arenas strand less of it (docs/operations.md
  // §Sizing). The MALLOC_ARENA_MAX environment variable, when set, wins.
  uint64_t malloc_arena_max = 4;
  // HTTP worker threads: requests served at once (a write waiting for its group commit
  // holds one).
  uint64_t http_threads = 8;
  // Request bodies larger than this are refused with 413 before being read.
  uint64_t max_body_bytes = 16ull << 20;
  // A keep-alive connection waiting for its next request's first byte is closed after this.
  uint64_t http_read_timeout_ms = 5'000;
  // A request's first byte to its last (headers and body); past it the connection closes.
  uint64_t http_request_timeout_ms = 10'000;
  // Per answer, or per chunk of an event stream; past it the connection closes.
  uint64_t http_write_timeout_ms = 5'000;
  // Open REST connections, in total and per peer address; past either a new connection
  // gets 503 and is closed.
  uint64_t http_max_connections = 2'048;
  uint64_t http_max_connections_per_peer = 256;
  // Complete requests waiting for a worker thread; past it, 503.
  uint64_t http_max_queued_requests = 1'024;
  // Binary-protocol io threads. Lookups are answered on them in microseconds and ingests
  // only wait on the applier asynchronously, so a thread per core is plenty.
  uint64_t rpc_threads = 2;
  // Largest binary-protocol frame payload; a larger frame gets an error answer and the
  // connection is closed (its bytes are never buffered).
  uint64_t rpc_max_frame_bytes = 16ull << 20;
  // A binary-protocol connection with nothing in flight that sends nothing for this long
  // is closed (frees the sockets of vanished clients).
  uint64_t rpc_idle_timeout_ms = 300'000;
  // Requests one connection may have in flight (decoded, answer not yet written); past it
  // the server stops reading that connection until answers drain (backpressure).
  uint64_t rpc_max_in_flight = 1'024;
  // Open binary-protocol connections, in all and per peer address; past either a new
  // connection gets an `unavailable` error frame and is closed.
  uint64_t rpc_max_connections = 2'048;
  uint64_t rpc_max_connections_per_peer = 256;
  // Bytes all binary-protocol connections together may hold for incomplete frames larger
  // than 64 KiB; a connection waits (reading nothing) for its frame's share.
  uint64_t rpc_max_buffered_bytes = 256ull << 20;
  // How long such a frame may wait for that share, and then take to arrive whole; past
  // it an error frame and the connection is closed.
  uint64_t rpc_frame_timeout_ms = 30'000;
  // TLS (docs/security.md §TLS). The server's PEM certificate chain and private key; both
  // set = TLS on the listeners of tls_listeners, reloaded on SIGHUP. Empty = plaintext.
  std::string tls_cert;
  std::string tls_key;
  // PEM CA certificates; set = every TLS client must present a certificate chaining to one
  // of them (mutual TLS).
  std::string tls_client_ca;
  // The listeners TLS applies to when tls_cert is set: a comma-separated list of http, rpc.
  std::string tls_listeners = "http,rpc";
  // PEM CA certificates that other members' REST certificates chain to, for this server's
  // calls to them (forwarded writes, address announcements) when REST is TLS; empty = the
  // system's trust store.
  std::string tls_peer_ca;
  // How long POST /v1/events waits for its batch to be applied (then 504).
  uint64_t apply_timeout_ms = 10'000;
  uint64_t max_events_per_batch = 10'000;
  // Context snapshots streamed at once (GET /v1/snapshot, kSnapshot; else 429 /
  // resource_exhausted), and the copies of one of their pages (≤ 65,536, a kSnapshot part).
  uint64_t max_snapshot_streams = 4;
  uint64_t snapshot_page_copies = 65'536;
  // Block keys of recent change-feed records kept for watches (ChangeFeedOptions::
  // window_keys): a watch from a revision older than the window fails with kCompacted.
  uint64_t feed_window_keys = 4'000'000;
  // Name limits the service layer applies to ingested events, registrations and lookups;
  // at most the decoders' hard maxima (kvatlas/common/limits.h), which are the defaults.
  uint64_t max_name_bytes = kMaxNameBytes;
  uint64_t max_salt_bytes = kMaxSaltBytes;
  uint64_t max_location_bytes = kMaxLocationBytes;
  uint64_t max_blocks_per_event = 16'384;
  // Write batches waiting for the applier; past it writes get 429 at once.
  uint64_t applier_max_queue = 1'024;
  // Batches applied together as one storage write (group commit).
  uint64_t applier_max_group_batches = 256;

  // Replication (docs/replication.md). This server's id, and the HOST:PORT its raft
  // transport listens on; empty = the --peers entry of this id, or, for a single server,
  // 127.0.0.1 on any free port.
  uint64_t id = 1;
  std::string raft_listen;
  // The IPv4 HOST:PORT the raft transport binds (e.g. 0.0.0.0:7072); empty = the raft
  // address above. Set it when that address is a host name, which peers resolve (a
  // Kubernetes pod's stable DNS name) and a socket cannot bind.
  std::string raft_bind;
  // The initial voters "1@host:port,2@host:port,3@host:port", the same on every server;
  // empty = a single-server (one-voter) cluster. Used to bootstrap a new data directory. A
  // server whose id is not listed joins a running cluster (set raft_listen; the leader
  // adds it with POST /v1/cluster/members).
  std::string peers;
  // Peer authentication (docs/security.md §Peers). The cluster's name, the same on every
  // server: 1..64 of [A-Za-z0-9._-]. Required with cluster_secret_file.
  std::string cluster_id;
  // A file holding the cluster secret, the same on every server (at least 16 bytes, e.g.
  // `head -c 32 /dev/urandom | base64 > FILE`): raft connections and internal calls prove
  // knowledge of it. Required when peers are configured and any of http_listen,
  // raft_listen or a peer address is not a loopback address, unless `insecure`.
  std::string cluster_secret_file;
  // A raft connection's peer handshake must complete within this, or it is closed.
  uint64_t raft_handshake_timeout_ms = 5'000;
  uint64_t raft_election_timeout_ms = 1'000;
  // A server that leads groups and is asked to stop first hands them to other servers (it
  // drains: docs/operations.md §Draining a server), for at most this long, so their writes
  // wait for no election; 0 = stop at once.
  uint64_t shutdown_drain_ms = 5'000;
  uint64_t raft_heartbeat_timeout_ms = 100;
  uint64_t raft_snapshot_threshold = 8'192;
  uint64_t raft_snapshot_trailing = 2'048;
  // Bytes of raft log held in memory that also trigger a snapshot, at least (RaftOptions:
  // the budget grows to 1/16 of the last snapshot); 0 = off.
  uint64_t raft_snapshot_log_bytes = 64ull << 20;
  // Committed entries waiting for the apply thread, at most; 0 = apply on the raft loop
  // thread (docs/replication.md §Commit latency).
  uint64_t raft_apply_queue = 64;
  // Size of each raft log segment file, preallocated, about three at a time: a new segment
  // stalls log writes, so fewer and bigger ones. Small disks want smaller segments.
  uint64_t raft_segment_bytes = 64ull << 20;
  // Below this many free bytes on the data directory's filesystem the server refuses new
  // writes (429 resource_exhausted) and hands leadership away; it accepts them again once
  // 10% more than this is free. libraft 0.15 crashes when its disk actually fills.
  uint64_t min_free_disk_bytes = 256ull << 20;
  // Once the last raft snapshot taken here reaches this many bytes, writes into contexts
  // never held before are refused (429 resource_exhausted) and the contexts held go on;
  // new contexts are taken again below 3/4 of it. Half of libraft 0.15's 2 GiB snapshot
  // failure (docs/scaling.md §Policy). 0 = never refuse.
  uint64_t snapshot_stop_bytes = 1ull << 30;
  // Raft groups the map is spread over (docs/scaling.md §Groups on every server): every
  // server hosts one replica of each, all on the raft port (group g's raft address is
  // HOST:PORT/g). Fixed when the cluster's data directories are made: a server refuses to
  // start on a data directory made with another count. 1 = one group, as a cluster has
  // always been (its data directory's layout is unchanged).
  uint64_t groups = 1;
  // Servers holding each group's replicas (docs/scaling.md §Replicas on some servers): group
  // g ≥ 2 lives on `replicas` voters of group 1, picked by rendezvous hashing and balanced
  // (PlaceReplicas), so a server holds about replicas/servers of the map; group 1 stays on
  // every server. 0 = every group on every server. With groups > 1 only (one group is on
  // every server); the same on every server. Fixed when the data directory is made: it is
  // recorded there (DATA_DIR/replicas), and a later start uses the record, refusing a
  // `replicas` given that differs. A data directory of several groups made before the
  // record existed runs 0 (as it was made) unless `replicas` is given.
  uint64_t replicas = 3;
  // Holder leases (docs/leases.md): a holder with no applied event and no heartbeat
  // (POST /v1/heartbeat) for this many seconds is expired by the leader, which drops its
  // entries. 0 = off. Holders of registered publishers are exempt. Flag: --holder-ttl too.
  uint64_t holder_ttl_seconds = 0;
  // Replica audits (docs/replication.md §Replica audits): the leader proposes an audit point
  // this often; 0 = off.
  uint64_t audit_interval_ms = 5'000;
  // Approximate mode (docs/routing.md §Approximate mode): how long the blocks a route sends
  // to a candidate flagged `predict` count as cached there, and the most (block, holder)
  // predictions a server keeps (0 = none).
  uint64_t predicted_ttl_ms = 120'000;
  uint64_t predicted_max_entries = 1'000'000;

  // ZMQ engine events (docs/engine-events.md). A SUB socket kvatlas binds for publishers
  // that connect to it (vLLM with a non-wildcard endpoint), e.g. "tcp://*:5557"; empty =
  // none. Streams on it are named by topic ("kv@<pod>@<model>") and dp rank; the model
  // and block size of topics that do not name them come from the next two keys.
  std::string zmq_listen;
  std::string zmq_listen_model;
  uint64_t zmq_listen_block_size = 16;
  // Gap replays running at once, and how long one may stay silent before it is abandoned.
  uint64_t zmq_max_concurrent_replays = 4;
  uint64_t zmq_replay_timeout_ms = 2'000;
  // After a failed replay, that stream's gaps are not replayed for this long.
  uint64_t zmq_replay_cooldown_ms = 30'000;
  // Receive high-water mark of each SUB socket, in messages.
  uint64_t zmq_receive_hwm = 100'000;
  // Publishers registered at once (POST /register and the config file's publishers);
  // a new registration past it gets 429. Each costs three ZMQ sockets and about four fds.
  uint64_t max_registrations = 256;
  // Transports a registered publisher or replay endpoint may use: a comma-separated list
  // of tcp, ipc, inproc (ipc and inproc reach local files and in-process names).
  std::string zmq_allowed_transports = "tcp";
  // Hosts a registered tcp publisher or replay endpoint may name: a comma-separated list of
  // "*" (any), addresses and networks (10.0.0.0/8), names and name suffixes (*.svc).
  std::string zmq_allowed_hosts = "*";
  // Reconnection backoff of the SUB sockets to registered publishers: the first retry
  // after the interval, doubling up to the maximum.
  uint64_t zmq_reconnect_interval_ms = 100;
  uint64_t zmq_reconnect_interval_max_ms = 5'000;
  // Config file only: publishers to follow from the start, as POST /register bodies; each
  // is registered at boot unless the same registration is already in the state.
  std::vector<Registration> publishers;
  // Config file only: more bound listeners, objects {bind, topic?, type?, modelname?,
  // tenant_id?, lora_name?, block_size?, additionalsalt?}.
  std::vector<ZmqListenerConfig> zmq_listeners;

  // Access control (docs/security.md). Tokens are configured by name, role and SHA-256:
  // in a file of NAME:ROLE:SHA256HEX lines, and/or (config file only) as a list of objects
  // {name, role, sha256}. Either turns access control on; both are read again on SIGHUP.
  std::string token_file;
  std::vector<TokenEntry> tokens;
  // Start, with a warning, where security would otherwise be required (docs/security.md):
  // without tokens while the REST, binary protocol or raft address is not loopback, and
  // without cluster_secret_file while peers use non-loopback addresses. Without this, such
  // a server refuses to start.
  bool insecure = false;
  // Host names REST clients use for this server (comma-separated; "*" = any), besides
  // "localhost", IP literals and the listen and advertised hosts: a request whose Host
  // header names another host is refused (DNS rebinding).
  std::string http_allowed_hosts;

  // The keys of the settings the config file or a flag set (the others hold their
  // defaults): a setting recorded in the data directory (`replicas`) refuses only a value
  // that was given.
  std::set<std::string, std::less<>> given;
  [[nodiscard]] bool Given(std::string_view key) const { return given.contains(key); }
};

// Reads a JSON object of config keys over `base`. kInvalidArgument naming the file and
// the key for unknown keys (all of them) and wrongly typed values; kIOError if unreadable.
[[nodiscard]] Result<Config> LoadConfigFile(const std::string& path, Config base = {});

// Checks ranges and formats (http_listen, rpc_listen, log_level, non-empty data_dir,
// ZMQ endpoints, peers, raft_listen and raft_bind, tokens, the TLS keys: tls_cert and tls_key
// together, tls_listeners), that a server listening on a non-loopback address has tokens or
// `insecure` (kFailedPrecondition), and that a cluster whose servers use non-loopback
// addresses has a cluster secret or `insecure`. The TLS files themselves are read by
// Server::Start.
[[nodiscard]] Status ValidateConfig(const Config& config);

// Whether the servers of a cluster (peers configured) reach each other or are reached over
// a non-loopback address (http_listen, raft_listen, raft_bind, a peer's address): then
// peers must authenticate with a cluster secret (ValidateConfig, unless insecure).
[[nodiscard]] bool PeersExposed(const Config& config);

// "1@host:port,2@host:port" → {id, address} pairs (ids > 0, distinct; addresses
// HOST:PORT). kInvalidArgument naming the bad element.
[[nodiscard]] Result<std::vector<std::pair<uint64_t, std::string>>> ParsePeers(
    std::string_view text);

// Which listeners serve TLS under a validated config.
struct TlsListeners {
  bool http = false;
  bool rpc = false;
};
[[nodiscard]] TlsListeners TlsListenersOf(const Config& config);

// The registration limits of a validated config (max_registrations,
// zmq_allowed_transports).
[[nodiscard]] RegistrationLimits RegistrationLimitsOf(const Config& config);

// The config as a JSON object with every key (pretty-printed).
[[nodiscard]] std::string ConfigToJson(const Config& config);

enum class CommandAction { kRun, kHelp, kPrintConfig };

struct CommandLine {
  CommandAction action = CommandAction::kRun;
  Config config;
};

// Parses the arguments after the program name: --help, --print-config, --config FILE,
// and one flag per config key (--key VALUE or --key=VALUE; booleans take true/false, and a
// boolean flag alone, e.g. `--insecure`, means true).
// The config file is read first, then flags apply over it, then the result is validated.
[[nodiscard]] Result<CommandLine> ParseCommandLine(std::span<const std::string> args);

// The --help text: usage and every flag with its default.
[[nodiscard]] std::string UsageText();

}  // namespace kvatlas::server
