// Group: one replicated state of a server — its storage (RocksDB), change feed, state
// machine, raft member, applier and holder leases, with the policies that act on it alone
// (the lease keeper, the replica auditor). The Server composes it with the parts it
// shares (listeners, access control, metrics, peer authentication, ZMQ ingest) and runs it
// in phases, since those shared parts start between them:
//
//   Open              storage, state machine and feed; the state recovered from storage
//   StartReplication  this server's raft member (for a single server: until it leads and
//                     has replayed its log), then the applier and the lease tracker
//   StartPolicies     the lease keeper (when leases are on), the replica auditor, the
//                     prediction recorder, the snapshot guard and, in a restored
//                     directory, the restore nudge
//   StopPolicies, StopReplication, Flush: the reverse, at shutdown
//
// A server holds one group or several (--groups): group 1's directory is the data
// directory, group g's DATA_DIR/groups/g. A server opens and starts its groups side by
// side (Server::OpenState), each reporting to its own `progress` then.
//
// Thread-safety: the phases in order, one at a time, each from any thread (a server runs
// Open and StartReplication on a group-start thread and joins it before the next phase;
// each stop idempotent); the accessors from any thread once their part exists; failed()
// from any thread. Groups are independent: different groups' phases may run at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/internal/periodic_task.h"
#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"
#include "server/feed/change_feed.h"
#include "server/peer/peer_auth.h"
#include "server/replication/raft_log.h"
#include "server/runtime/lease_keeper.h"
#include "server/runtime/memory_trimmer.h"
#include "server/runtime/preflight.h"
#include "server/runtime/snapshot_guard.h"
#include "server/state/applier.h"
#include "server/state/audit_proposer.h"
#include "server/state/lease_tracker.h"
#include "server/state/prediction_recorder.h"
#include "server/state/recovery_progress.h"
#include "server/state/state_machine.h"
#include "server/storage/storage.h"

namespace kvatlas::server {

// GroupOptionsFrom (options_from_config.h) builds them from the config.
struct GroupOptions {
  GroupId group = 1;  // its id in the cluster (1..kMaxGroups); the raft address names it
  uint64_t server_id = 1;
  // The group's directory: the restore marker is looked for in it; storage.path and
  // raft.dir are below it.
  std::string dir;
  StorageOptions storage;  // on_flush is the Group's (the trimmer)
  StateMachineOptions machine;
  ChangeFeedOptions feed;
  ApplierOptions applier;
  LeaseOptions leases;
  // peer_auth, listen_fd, snapshot_done and the restore callbacks are the Group's.
  RaftOptions raft;
  RaftPlacement placement;                          // this server's place in the group's cluster
  bool raft_listen_configured = false;              // raft_listen set (the start-up log says so)
  std::chrono::milliseconds audit_interval{5'000};  // 0 = no replica audits
  PredictionOptions predictions;  // approximate mode (docs/routing.md §Approximate mode)
  // The group takes no new contexts once its last snapshot here reaches this
  // (SnapshotGuard); 0 = never refuses.
  uint64_t snapshot_stop_bytes = 0;
  // How long the lease keeper waits for an expiry to apply (and Stop for it).
  std::chrono::milliseconds policy_apply_wait{2'000};
};

class Group {
 public:
  // `progress` says what the start is doing and can stop it; `trimmer` is asked to trim
  // after RocksDB flushes and raft snapshots. Both must outlive the group.
  Group(GroupOptions options, RecoveryProgress* progress, MemoryTrimmer* trimmer);
  ~Group();  // stops whatever was started
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Opens storage (from nothing after a failed raft log: its rebuild marker), the state
  // machine and the feed, and recovers the state. The directory must exist. Errors:
  // kIOError/kCorruption from storage, kFailedPrecondition on a hash seed mismatch,
  // kCancelled when `progress` asks to stop.
  [[nodiscard]] Status Open();
  // Starts this server's raft member on `raft_listen_fd` (the preflight's raft socket),
  // signing with `peer_auth` (must outlive the group); `registry_changed` is called on
  // every registry change applied, from then on. A restored directory is snapshotted at
  // once. For a single server, returns once it leads and has replayed its log; a joining
  // server logs whether it is a member already. Then makes the applier and the lease
  // tracker. Errors: raft's, kUnavailable (a single server did not elect itself),
  // kInternal (its replay failed), kCancelled.
  [[nodiscard]] Status StartReplication(PeerAuth* peer_auth, int raft_listen_fd,
                                        std::function<void()> registry_changed);
  void StartPolicies();
  // Asks the policy loops to end without waiting (a Server asks every loop it has first,
  // so that their rounds in progress end together); StopPolicies then joins them.
  void RequestStopPolicies();
  void StopPolicies();  // returns within about 2 s (their longest wait for an apply)
  // The applier stops taking batches; what it proposed completes (or fails) when raft
  // stops, on raft's thread, while the applier still exists.
  void StopReplication();
  // Drops this server's replica of the group (docs/scaling.md §Dropping a copy): stops its
  // raft member, then asks `released` whether the group's leader holds a committed
  // configuration without this server. If so, empties the state machine and its storage
  // and restarts raft on an emptied directory, as a server in no configuration (RaftLog::
  // Reopen with wipe); otherwise (false or an error) restarts raft as it was. Returns
  // whether it dropped; an error when emptying the state or restarting raft failed (the group
  // then fails: failed()).
  // One call at a time, after StartReplication; the policies keep running meanwhile (they
  // act on a leader, and this server leads no group it is not a member of).
  [[nodiscard]] Result<bool> DropReplica(const std::function<Result<bool>()>& released);

  // Makes what the state machine wrote durable (RocksDB flush); Ok when not open.
  [[nodiscard]] Status Flush();

  // True once a storage write, the raft log or a replica's drop failed: the process must exit (a
  // restart rebuilds the index from disk, which is behind the memory index after the failure).
  bool failed() const {
    return (applier_ && applier_->failed()) || (raft_ && raft_->failed()) ||
           drop_failed_.load(std::memory_order_acquire);
  }
  // A joining server that is in no configuration yet (set by StartReplication).
  bool awaiting_membership() const { return awaiting_membership_; }
  GroupId id() const { return options_.group; }
  // What its start reports to (the constructor's `progress`).
  RecoveryProgress* progress() const { return progress_; }
  // This server's raft address in the group, as configured.
  const std::string& raft_address() const { return options_.raft.address; }

  Storage* storage() const { return storage_.get(); }
  ChangeFeed* feed() const { return feed_.get(); }
  StateMachine* machine() const { return machine_.get(); }
  RaftLog* raft() const { return raft_.get(); }
  Applier* applier() const { return applier_.get(); }
  LeaseTracker* leases() const { return leases_.get(); }
  PredictionRecorder* predictions() const { return predictions_.get(); }

 private:
  Status StartRaft(PeerAuth* peer_auth, int raft_listen_fd, std::function<void()> registry_changed);
  Status AwaitSingleServer(std::chrono::milliseconds patience);
  // A joining server: logs whether it waits to be added or is a member already.
  void LogMembership();
  // A restored group snapshots its state at its first applied entry (RaftOptions::
  // compact_early), and until then a member added would be sent a log that lacks it. A
  // group no write reaches (one of several groups) would wait for that entry indefinitely:
  // while the RESTORED file is there, the leader applies an empty batch every 100 ms.
  void StartRestoreNudge();

  GroupOptions options_;
  RecoveryProgress* progress_;
  MemoryTrimmer* trimmer_;
  bool awaiting_membership_ = false;
  std::atomic<bool> drop_failed_{false};  // DropReplica failed half-way
  // Destroyed in the reverse of their start: the policies first, storage last.
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<ChangeFeed> feed_;  // outlives the state machine (and the HTTP server)
  std::unique_ptr<StateMachine> machine_;
  std::unique_ptr<RaftLog> raft_;
  std::unique_ptr<Applier> applier_;
  std::unique_ptr<LeaseTracker> leases_;
  std::unique_ptr<LeaseKeeper> lease_keeper_;        // only when leases are on
  std::unique_ptr<AuditProposer> auditor_;           // replica audits (on the leader)
  std::unique_ptr<PredictionRecorder> predictions_;  // approximate mode's predictions
  std::unique_ptr<SnapshotGuard> snapshot_guard_;    // only with snapshot_stop_bytes
  // In a restored directory until its RESTORED file is gone: on the leader, an empty batch
  // (StartRestoreNudge).
  std::unique_ptr<PeriodicTask> restore_nudge_;
};

}  // namespace kvatlas::server
