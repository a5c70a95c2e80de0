// Server: this server's part of the raft cluster (peer authentication, the RaftLog, and
// for a single server the wait until it leads and has replayed its log). server.h.
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/internal/log.h"
#include "server/runtime/options_from_config.h"
#include "server/runtime/server.h"
#include "server/storage/backup.h"

namespace kvatlas::server {
namespace {

namespace fs = std::filesystem;

// What the log says of this server's place in the cluster as raft starts.
std::string DescribePlacement(uint64_t id, const RaftPlacement& raft, bool own_address) {
  const std::string server = "raft: server " + std::to_string(id);
  if (raft.single) {
    return server + (own_address
                         ? " at " + raft.address + ", a single server (a one-voter cluster)"
                         : ", a single server (a one-voter cluster; no raft address: no --peers "
                           "and no --raft-listen, so no other server can reach it)");
  }
  const std::string voters = std::to_string(raft.peers.size()) + " initial voters in --peers";
  if (raft.initial_voter) {
    return server + " at " + raft.address +
           (raft.peers.size() == 1 ? ", the only initial voter in --peers"
                                   : ", one of the " + voters);
  }
  return server + " at " + raft.address + ", joining a running cluster (not one of the " + voters +
         ", so it does not bootstrap one)";
}

}  // namespace

Status Server::StartPeerAuth(bool single, const std::string& secret) {
  if (!config_.cluster_secret_file.empty()) {
    LogInfo("peers authenticate with the cluster secret of " + config_.cluster_secret_file +
            " (cluster_id \"" + config_.cluster_id + "\")");
  } else if (!single && PeersExposed(config_)) {
    LogWarning(
        "insecure: this cluster's servers use non-loopback addresses and no cluster_secret_file "
        "is set: anyone who reaches them can pose as a member (join raft, announce addresses, "
        "answer forwarded writes); docs/security.md §Peers");
  } else if (!single) {
    LogWarning(
        "no cluster_secret_file: peers on loopback addresses prove only the cluster id, so any "
        "process on this machine can pose as a member");
  }
  // A single server without a secret uses a random key: nobody else can sign for it (a
  // server that should take members later needs the secret from the start).
  peer_auth_ = std::make_unique<PeerAuth>(config_.id, config_.cluster_id, secret,
                                          /*random_if_no_secret=*/single);
  return Status::Ok();
}

Status Server::StartRaft(const Preflight& preflight) {
  const RaftPlacement& raft = preflight.raft;
  KVATLAS_RETURN_IF_ERROR(StartPeerAuth(raft.single, preflight.cluster_secret));
  RaftOptions options = RaftOptionsFrom(config_, raft);
  options.peer_auth = peer_auth_.get();
  options.listen_fd = preflight.raft_socket.fd();
  options.snapshot_done = [trimmer = trimmer_.get()] { trimmer->Request(); };
  // A data directory made by `kvatlas-server restore`: snapshot at once (RaftOptions).
  const fs::path restored = fs::path(config_.data_dir) / kRestoredMarker;
  std::error_code exists_error;
  if (fs::exists(restored, exists_error)) {
    options.compact_early = true;
    options.compacted = [restored] {
      std::error_code ec;
      fs::remove(restored, ec);
      LogInfo("the restored state is in a raft snapshot" +
              (ec ? " (cannot remove " + restored.string() + ": " + ec.message() + ")"
                  : std::string()));
    };
    LogInfo("data directory restored from a backup: taking a raft snapshot of it first");
  }
  LogInfo(DescribePlacement(config_.id, raft, !config_.raft_listen.empty()));
  // Registry changes reach the ZMQ ingest once it exists; raft may apply entries (replay
  // past the persisted state) as soon as it starts.
  machine_->SetRegistryListener([this] {
    if (ZmqIngest* zmq = zmq_notify_.load(std::memory_order_acquire)) zmq->NotifyRegistryChanged();
  });
  raft_address_ = options.address;
  const auto patience = std::chrono::milliseconds(10 * options.election_timeout_ms);
  // libraft reads its whole snapshot and log as it starts (and hands the snapshot to the
  // state machine, which restores it if it is newer than the state) and cannot be asked to
  // stop: a stop meanwhile ends the process (SignalWatcher), as safe as a crash there,
  // which changes nothing raft or RocksDB cannot recover (a restore's replacement of the
  // database is one atomic write).
  progress_->BeginPhase("loading the raft snapshot and log", "", 0, DirectoryBytes(options.dir));
  progress_->MarkUninterruptible();
  machine_->SetRecoveryProgress(progress_);
  Result<std::unique_ptr<RaftLog>> started = RaftLog::Start(std::move(options), machine_.get());
  KVATLAS_RETURN_IF_ERROR(progress_->CheckStop("loading the raft log"));
  if (!started.has_value()) return started.status();
  raft_ = std::move(*started);
  if (raft.single) return AwaitSingleServer(patience);
  if (!raft.initial_voter) LogMembership();
  return Status::Ok();
}

void Server::LogMembership() {
  // The status is refreshed every 50 ms from the loop: wait (bounded) for the first one.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  ClusterStatus status = raft_->GetStatus();
  while (status.id == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    status = raft_->GetStatus();
  }
  if (status.members.empty()) {
    awaiting_membership_ = true;  // AnnounceAddresses says when it is added
    LogInfo("raft: waiting to be added to the cluster (on the leader: `kvatlas cluster add " +
            std::to_string(config_.id) + " " + raft_address_ + "`, or POST /v1/cluster/members)");
  } else {
    LogInfo("raft: a member of the cluster already (its log holds a configuration of " +
            std::to_string(status.members.size()) + " servers)");
  }
}

Status Server::AwaitSingleServer(std::chrono::milliseconds patience) {
  // A one-voter cluster elects itself within an election timeout: wait for it, so that
  // the first write after start-up is not refused as "not leader".
  progress_->BeginPhase("electing itself (a one-voter cluster)");
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!raft_->is_leader()) {
    KVATLAS_RETURN_IF_ERROR(progress_->CheckStop("waiting for raft to elect this server"));
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Unavailable("raft: the single server did not elect itself");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Its whole log is committed now, but the raft-apply thread may still be replaying it:
  // serve only once it has, so that every write acknowledged before a restart is visible
  // to the first read after it (as when the apply ran on the raft loop).
  const ClusterStatus first = raft_->GetStatus();  // refreshed every 50 ms
  progress_->BeginPhase(
      "replaying the raft log", "entries",
      first.last_index > first.applied_index ? first.last_index - first.applied_index : 0);
  for (;;) {
    const ClusterStatus status = raft_->GetStatus();
    if (status.applied_index > first.applied_index) {
      progress_->Set(status.applied_index - first.applied_index, 0);
    }
    if (status.state == "leader" && status.applied_index >= status.last_index) break;
    if (raft_->failed()) return Status::Internal("raft: replaying the log failed");
    KVATLAS_RETURN_IF_ERROR(progress_->CheckStop("replaying the raft log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Status::Ok();
}

}  // namespace kvatlas::server
