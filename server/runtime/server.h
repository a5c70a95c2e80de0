// Server: one kvatlas server process composed from its parts (docs/architecture.md): check
// the configuration, read its files and bind the listen addresses (preflight.h), then open
// its replicated state (a Group per raft group, group.h: Storage at DATA_DIR/db, the state
// machine rebuilt from it, raft and the Applier; several side by side), and serve the binary
// protocol and REST. Both serve only after recovery, so every answer reflects the recovered state.
//
// Thread-safety: Start/Shutdown from the owning (main) thread; failed() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/internal/tls.h"
#include "kvatlas/common/result.h"
#include "server/api/group_forwarder.h"
#include "server/api/http_server.h"
#include "server/api/routes.h"
#include "server/rpc/rpc_server.h"
#include "server/runtime/accepting_reporter.h"
#include "server/runtime/announcer.h"
#include "server/runtime/config.h"
#include "server/runtime/disk_watcher.h"
#include "server/runtime/group.h"
#include "server/runtime/group_mirror.h"
#include "server/runtime/memory_trimmer.h"
#include "server/runtime/preflight.h"
#include "server/runtime/publisher_registrar.h"
#include "server/runtime/replica_dropper.h"
#include "server/service/metrics.h"
#include "server/state/recovery_progress.h"
#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {

class Server {
 public:
  // Runs the preflight (preflight.h: config, TLS files, token file, cluster secret, and
  // binds the REST, binary protocol and raft addresses), and only then creates the data
  // directory if needed, opens and recovers the state and starts raft; then listens on
  // the binary protocol address and writes it to DATA_DIR/rpc.addr, then on the REST
  // address and writes DATA_DIR/http.addr (each atomically: a reader sees the whole address
  // or no file; http.addr last, so once it exists both are served).
  //
  // `progress` (null = an internal one) says what the recovery is doing (logged every few
  // seconds meanwhile) and can stop it: once it asks, Start returns kCancelled promptly (at
  // the next check of the phase running; libraft's loading of its log cannot be cut
  // short); the data directory stays fit to recover from at the next start. Several groups
  // open side by side, each reporting to a part of `progress` ("group G", AddPart).
  //
  // A failed start removes the data directory if it created it. Errors: the preflight's,
  // kIOError/kCorruption from storage (e.g. the directory is used by another server),
  // kFailedPrecondition on a hash seed mismatch, kCancelled (above); with several groups,
  // the first failing group's, its message prefixed with "group G: ".
  [[nodiscard]] static Result<std::unique_ptr<Server>> Start(const Config& config,
                                                             RecoveryProgress* progress = nullptr);

  ~Server();  // Shutdown()s if the owner did not
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // "HOST:PORT" actually bound (the chosen port when the config asked for port 0).
  const std::string& listen_address() const { return listen_address_; }
  // "HOST:PORT" the binary protocol is bound to.
  const std::string& rpc_listen_address() const { return rpc_listen_address_; }

  // True once a storage write failed: the process must exit (a restart rebuilds the index
  // from disk, which is behind the memory index after the failure).
  bool failed() const {
    for (const auto& group : groups_) {
      if (group->failed()) return true;
    }
    return false;
  }

  // SIGHUP: replaces the token set with the one `fresh` configures (its `tokens` and token
  // file, read again). Connections and streams whose token is still configured go on;
  // those whose token was removed end (docs/security.md §Tokens and roles). A set that
  // cannot be read keeps the old one (logged). Other settings of `fresh` are ignored.
  void ReloadTokens(const Config& fresh);
  // SIGHUP: makes the TLS context again from tls_cert, tls_key and tls_client_ca. New
  // connections use it; open ones keep theirs. A file that cannot be read or parsed is
  // logged and the current context kept. Logs and does nothing without TLS. Thread-safe.
  void ReloadTls();

  // Stops the binary protocol and HTTP (in-flight requests are answered), drains and stops
  // the applier, flushes storage and removes DATA_DIR/rpc.addr and DATA_DIR/http.addr.
  // Idempotent; returns the flush error, if any.
  [[nodiscard]] Status Shutdown();

 private:
  explicit Server(Config config, RecoveryProgress* progress);
  Status Init();
  // Creates the data directory (noting in created_data_dir_ the directory it created, if
  // any), and opens the groups in it (Group::Open: storage, the recovered state), side by
  // side (ForEachGroup).
  Status OpenState(const Preflight& preflight);
  // Runs `step` (a phase of Group's start) for every group. One group: on this thread, as
  // a server always did. Several: side by side on a bounded number of threads
  // (RunConcurrently), each group reporting to its own part of the progress (named "group
  // G"), whose phase ends with the step; `what` is the server's own phase meanwhile. The
  // first group to fail stops the others (at their next check) and its error is returned,
  // prefixed with "group G: ", once every step has ended. What the steps made is cleaned
  // up by the groups' destruction, as after a serial start.
  [[nodiscard]] Status ForEachGroup(const std::string& what,
                                    const std::function<Status(Group&)>& step);
  // kFailedPrecondition when an existing data directory holds another number of groups
  // than `groups`.
  // The groups the data directory holds (0: a new one), when that is config_.groups.
  [[nodiscard]] Result<uint32_t> CheckGroupCount() const;
  // Sets config_.replicas to the data directory's recorded replication factor, recording it
  // first in a directory that has none (config.h: Config::replicas). `found`: the groups
  // the directory held as the server started (CheckGroupCount).
  [[nodiscard]] Status SettleReplicas(uint32_t found);
  // Takes the tokens (read by the preflight), decides whether access control is on and
  // logs what it means.
  Status StartAccessControl(std::vector<TokenEntry> tokens);
  // Creates the ZMQ ingest and starts following, and starts the disk watcher.
  Status StartZmqIngest();
  // Starts the group's raft member (Group::StartReplication) on the preflight's raft
  // socket, with peer authentication from its cluster secret.
  Status StartRaft(const Preflight& preflight);
  // Hands the groups this server leads to other servers before it stops (server_drain.cc,
  // docs/operations.md §Draining a server): marks it draining in group 1 (DrainCommand, here
  // or through the leader's POST /v1/cluster/drain-self) and waits until the mirror has
  // handed every group over and none came back for 500 ms, up to shutdown_drain_ms.
  // Skipped when it is 0, when this server leads no group or no other voter was heard from
  // within half an election timeout; a failure is logged, and the stop goes on.
  void DrainLeadership();
  [[nodiscard]] size_t GroupsLedHere() const;
  // Whether another voter of a group led here answers (the leader's view of its members).
  [[nodiscard]] bool AnotherServerCanLead() const;
  [[nodiscard]] Status MarkSelfDraining(std::chrono::steady_clock::time_point deadline);
  // The PeerAuth of raft and the internal calls, from the cluster secret (a random key for
  // a `single` server without one); logs how peers authenticate.
  [[nodiscard]] Status StartPeerAuth(bool single, const std::string& secret);
  // The ReplicaDropper (replicas on some servers), asking members over POST
  // /v1/cluster/released.
  void MakeReplicaDropper();

  Config config_;
  std::unique_ptr<RecoveryProgress> own_progress_;  // when Start was given none
  RecoveryProgress* progress_;
  // The directory OpenState created for the data directory (its topmost new ancestor),
  // removed again when the start fails; empty when the data directory existed.
  std::filesystem::path created_data_dir_;
  // Trims the heap after RocksDB flushes and raft snapshots: outlives the group.
  std::unique_ptr<MemoryTrimmer> trimmer_;
  std::unique_ptr<ReloadableTlsContext> tls_;    // null without TLS; outlives the listeners
  std::unique_ptr<PeerAuth> peer_auth_;          // outlives the group's raft and the HTTP server
  std::atomic<ZmqIngest*> zmq_notify_{nullptr};  // zmq_ once started, for the registry listener
  // The raft port the groups share when there are several (tcp_transport.h §Groups on one
  // port): outlives them.
  std::unique_ptr<RaftPortShare> raft_port_share_;
  // The replicated state (storage, feed, state machine, raft, applier, leases), one Group
  // per raft group this server hosts, by id from 1: outlive the ZMQ ingest and the
  // listeners, which use them. Started in order, stopped in reverse.
  std::vector<std::unique_ptr<Group>> groups_;
  // Group 1: the registry, the servers' addresses and the leases live in it.
  Group* group_ = nullptr;
  std::unique_ptr<GroupMirror> group_mirror_;
  std::unique_ptr<ZmqIngest> zmq_;
  Metrics metrics_;
  std::unique_ptr<Authenticator> auth_;  // outlives the servers that use it
  std::unique_ptr<AuditLog> audit_;
  Services services_;
  // Hands write parts to the leaders of groups this server does not lead (several groups
  // only): after services_, whose group copies its queued parts use.
  std::unique_ptr<HttpGroupForwarder> group_forwarder_;
  // Routes again the parts answered by callback that their group refused (several groups
  // only); stopped after the listeners and the ZMQ ingest, before the appliers.
  std::unique_ptr<WorkerPool> rerouter_;
  // services_.groups once made, for the ZMQ ingest's thread (which starts before it).
  std::atomic<const std::vector<Services>*> group_services_{nullptr};
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<HttpServer> http_;
  std::string listen_address_;
  std::string rpc_listen_address_;
  bool policies_started_ = false;  // Init ran to its end: the mirror runs
  bool wrote_address_ = false;
  bool wrote_rpc_address_ = false;
  bool shut_down_ = false;
  // The server's policy loops, each with its own thread (common/internal/periodic_task.h): started
  // in this order (the group's after them), stopped in reverse first thing in Shutdown. Null when
  // not started.
  std::unique_ptr<DiskWatcher> disk_watcher_;
  std::unique_ptr<PublisherRegistrar> registrar_;  // only with publishers in the config
  std::unique_ptr<Announcer> announcer_;
  // Several groups only: the directory's accepting flags follow the snapshot guards.
  std::unique_ptr<AcceptingReporter> accepting_reporter_;
  // With replicas on some servers: copies of groups no longer held here are dropped.
  std::unique_ptr<ReplicaDropper> replica_dropper_;
};

}  // namespace kvatlas::server
