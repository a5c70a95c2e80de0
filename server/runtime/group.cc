#include "server/runtime/group.h"

#include <filesystem>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "common/internal/log.h"
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

Group::Group(GroupOptions options, RecoveryProgress* progress, MemoryTrimmer* trimmer)
    : options_(std::move(options)), progress_(progress), trimmer_(trimmer) {}

Group::~Group() {
  StopPolicies();
  StopReplication();
}

Status Group::Open() {
  StorageOptions storage_options = options_.storage;
  const fs::path rebuild = fs::path(options_.raft.dir) / RaftLog::kRebuildMarker;
  std::error_code ec;
  if (fs::exists(rebuild)) {
    // The last run stopped because its raft log failed (RaftLog::failed): the database may
    // hold entries that were never committed. Start from nothing; raft restores its latest
    // snapshot and replays the log.
    LogWarning("rebuilding the state from the raft log (" + rebuild.string() + ")");
    fs::remove_all(storage_options.path, ec);
    if (ec) return Status::IOError("cannot remove " + storage_options.path + ": " + ec.message());
    fs::remove(rebuild, ec);
  }
  storage_options.on_flush = [trimmer = trimmer_] { trimmer->Request(); };
  LogInfo("recovering state from " + storage_options.path);
  progress_->BeginPhase("opening RocksDB", "", 0, DirectoryBytes(storage_options.path));
  KVATLAS_ASSIGN_OR_RETURN(storage_, Storage::Open(storage_options));
  KVATLAS_RETURN_IF_ERROR(progress_->CheckStop("opening RocksDB"));

  machine_ = std::make_unique<StateMachine>(options_.machine, storage_.get());
  feed_ = std::make_unique<ChangeFeed>(options_.feed);
  machine_->SetApplyObserver(feed_.get());
  progress_->BeginPhase("loading the state from RocksDB", "entries", 0,
                        storage_->ApproximateSizeBytes());
  machine_->SetRecoveryProgress(progress_);
  KVATLAS_RETURN_IF_ERROR(machine_->Recover());
  const RecoveryProgress::View loaded = progress_->Read();
  const std::string& label = progress_->label();
  LogInfo((label.empty() ? "" : label + ": ") + "recovered at revision " +
          std::to_string(machine_->applied_revision()) + ": " + std::to_string(loaded.records) +
          " entries loaded in " +
          std::to_string(static_cast<uint64_t>(loaded.phase_seconds * 1000)) + " ms");
  return progress_->CheckStop("recovering the state");
}

Status Group::StartReplication(PeerAuth* peer_auth, int raft_listen_fd,
                               std::function<void()> registry_changed) {
  KVATLAS_RETURN_IF_ERROR(StartRaft(peer_auth, raft_listen_fd, std::move(registry_changed)));
  // Past recovery: a snapshot a leader sends later is not part of it.
  machine_->SetRecoveryProgress(nullptr);
  applier_ = std::make_unique<Applier>(machine_.get(), options_.applier, raft_.get());
  // The term from one status snapshot: a term in which this server leads is a stretch of
  // leadership with no other leader in between.
  leases_ = std::make_unique<LeaseTracker>(options_.leases, machine_.get(),
                                           [raft = raft_.get()]() -> std::optional<uint64_t> {
                                             const ClusterStatus status = raft->GetStatus();
                                             if (status.state != "leader") return std::nullopt;
                                             return status.term;
                                           });
  predictions_ =
      std::make_unique<PredictionRecorder>(options_.predictions, machine_.get(), applier_.get(),
                                           [raft = raft_.get()] { return raft->is_leader(); });
  return Status::Ok();
}

Status Group::StartRaft(PeerAuth* peer_auth, int raft_listen_fd,
                        std::function<void()> registry_changed) {
  const RaftPlacement& placement = options_.placement;
  RaftOptions options = options_.raft;
  options.peer_auth = peer_auth;
  options.listen_fd = raft_listen_fd;
  options.snapshot_done = [trimmer = trimmer_] { trimmer->Request(); };
  // A data directory made by `kvatlas-server restore`: snapshot at once (RaftOptions).
  const fs::path restored = fs::path(options_.dir) / kRestoredMarker;
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
  LogInfo(DescribePlacement(options_.server_id, placement, options_.raft_listen_configured));
  // Registry changes reach the listener from now on; raft may apply entries (replay past
  // the persisted state) as soon as it starts.
  machine_->SetRegistryListener(std::move(registry_changed));
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
  if (placement.single) return AwaitSingleServer(patience);
  if (!placement.initial_voter) LogMembership();
  return Status::Ok();
}

void Group::LogMembership() {
  // The status is refreshed every 50 ms from the loop: wait (bounded) for the first one.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  ClusterStatus status = raft_->GetStatus();
  while (status.id == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    status = raft_->GetStatus();
  }
  if (status.members.empty() && options_.group != 1) {
    LogInfo("raft group " + std::to_string(options_.group) +
            ": waiting to be added (the leader adds this server to every group once it is in "
            "group 1)");
    return;
  }
  if (status.members.empty()) {
    awaiting_membership_ = true;  // the announcer says when it is added
    LogInfo("raft: waiting to be added to the cluster (on the leader: `kvatlas cluster add " +
            std::to_string(options_.server_id) + " " + options_.raft.address +
            "`, or POST /v1/cluster/members)");
  } else {
    LogInfo("raft: a member of the cluster already (its log holds a configuration of " +
            std::to_string(status.members.size()) + " servers)");
  }
}

Status Group::AwaitSingleServer(std::chrono::milliseconds patience) {
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

void Group::StartPolicies() {
  if (leases_->enabled()) {
    LogInfo("holder leases on: holders silent for " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(options_.leases.ttl).count()) +
            " s are expired");
    lease_keeper_ =
        std::make_unique<LeaseKeeper>(leases_.get(), applier_.get(), options_.policy_apply_wait);
    lease_keeper_->Start();
  }
  auditor_ = std::make_unique<AuditProposer>(
      options_.audit_interval, machine_.get(), applier_.get(),
      [raft = raft_.get()] { return raft->is_leader() && raft->GetStatus().members.size() > 1; });
  auditor_->Start();
  if (predictions_) predictions_->Start();
  if (options_.snapshot_stop_bytes > 0) {
    snapshot_guard_ = std::make_unique<SnapshotGuard>(
        options_.snapshot_stop_bytes, kSnapshotResumeFraction, applier_.get(), raft_.get());
    snapshot_guard_->Start();
  }
  StartRestoreNudge();
}

void Group::StartRestoreNudge() {
  const fs::path restored = fs::path(options_.dir) / kRestoredMarker;
  std::error_code ec;
  if (!fs::exists(restored, ec)) return;
  restore_nudge_ = std::make_unique<PeriodicTask>(
      std::chrono::milliseconds(0), [this, restored]() -> PeriodicTask::Next {
        std::error_code exists_error;
        if (!fs::exists(restored, exists_error)) return std::nullopt;  // snapshotted
        if (raft_->is_leader()) {
          // Applied (or refused) within the wait, or the next round asks again.
          applier_->Submit(CommandBatch{}).wait_for(options_.policy_apply_wait);
        }
        return std::chrono::milliseconds(100);
      });
  restore_nudge_->Start();
}

void Group::RequestStopPolicies() {
  if (restore_nudge_) restore_nudge_->RequestStop();
  if (snapshot_guard_) snapshot_guard_->RequestStop();
  if (predictions_) predictions_->RequestStop();
  if (auditor_) auditor_->RequestStop();
  if (lease_keeper_) lease_keeper_->RequestStop();
}

void Group::StopPolicies() {
  RequestStopPolicies();
  if (restore_nudge_) restore_nudge_->Stop();
  if (snapshot_guard_) snapshot_guard_->Stop();
  if (predictions_) predictions_->Stop();
  if (auditor_) auditor_->Stop();
  if (lease_keeper_) lease_keeper_->Stop();
}

void Group::StopReplication() {
  if (applier_) applier_->Stop();
  if (raft_) raft_->Stop();
}

Result<bool> Group::DropReplica(const std::function<Result<bool>()>& released) {
  raft_->Stop();
  // Asked with the member stopped: a leader adding this server back from now on finds it
  // silent, and takes it again only once it has restarted (empty, when dropped).
  const Result<bool> answer = released();
  const bool drop = answer.has_value() && *answer;
  const std::string group = "group " + std::to_string(options_.group);
  if (drop) {
    LogInfo(group + ": dropping this server's replica (" +
            std::to_string(machine_->applied_revision()) +
            " revisions applied): the group's leader has a committed configuration without "
            "this server");
    if (Status s = machine_->DropReplica(); !s.ok()) {
      // Memory and storage may disagree now: the server stops (failed()); its restart
      // recovers from storage and the raft log, which is still whole.
      LogError(group + ": dropping the replica: " + s.ToString() + "; stopping");
      drop_failed_.store(true, std::memory_order_release);
      return s;
    }
    // A restored state dropped: no snapshot of it is owed any more.
    std::error_code ec;
    fs::remove(fs::path(options_.dir) / kRestoredMarker, ec);
  }
  if (Status s = raft_->Reopen(/*wipe=*/drop); !s.ok()) {
    LogError(group + ": restarting its raft member: " + s.ToString() + "; stopping");
    drop_failed_.store(true, std::memory_order_release);
    return s;
  }
  if (!drop && !answer.has_value()) {
    LogWarning(group + ": not dropped (" + answer.error().ToString() + ")");
  }
  trimmer_->Request();
  return drop;
}

Status Group::Flush() { return storage_ ? storage_->Flush() : Status::Ok(); }

}  // namespace kvatlas::server
