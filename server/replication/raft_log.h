// RaftLog: the ReplicatedLog over canonical/raft 0.15 (Debian libraft-dev) with its libuv
// disk and TCP I/O (raft_uv, raft_uv_tcp). docs/replication.md has the guarantees and the
// library's known limits.
//
// Threading: one thread runs the libuv loop, and every raft call and callback happens on
// it — including LogStateMachine::CaptureState/Restore; snapshot serialisation runs in
// libuv's thread pool. Committed entries are applied (LogStateMachine::ApplyEntry) on a
// thread of their own, `raft-apply` (apply_thread.h), or with apply_queue = 0 on the loop
// thread; proposals complete on whichever thread applied them. Other threads hand work in
// through a bounded queue and uv_async_send. Raft is never re-entered from a raft callback
// (0.15 crashes when an apply is issued from the callback of an apply failed by a
// step-down): follow-up work is queued.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/peer/peer_auth.h"
#include "server/state/replicated_log.h"

namespace kvatlas::server {

class RaftPortShare;  // tcp_transport.h

struct RaftOptions {
  uint64_t id = 1;
  // HOST:PORT peers reach this server's raft transport at (a host name is resolved,
  // tcp_transport.h); it listens there too unless bind_address is set.
  std::string address;
  // IPv4 HOST:PORT the raft transport listens on; empty = `address`.
  std::string bind_address;
  // A socket already bound to that address, not listening: the transport listens on a
  // duplicate of it (TcpTransportOptions::listen_fd); -1 = it binds the address itself.
  int listen_fd = -1;
  // The server's raft port shared by the groups it hosts (tcp_transport.h §Groups on one
  // port; the address names the group: "HOST:PORT/g"); not owned, outlives the RaftLog.
  // Null: this log is alone on its port. With a share, only a log with `listen` set listens.
  RaftPortShare* port_share = nullptr;
  bool listen = true;
  // Directory of the raft log segments, metadata and snapshots (created if missing).
  std::string dir;
  // The initial voters {id, address}, the same on every server. Used only to bootstrap a
  // pristine directory; ignored once the log exists.
  std::vector<std::pair<uint64_t, std::string>> bootstrap;
  unsigned election_timeout_ms = 1000;
  unsigned heartbeat_timeout_ms = 100;
  // Entries between snapshots, and entries kept after one (for followers slightly behind).
  // With snapshot_log_bytes on, the threshold waits (up to 16 times itself) while the
  // entries hold less than 1/16 of the last snapshot: a snapshot rewrites the whole state.
  unsigned snapshot_threshold = 8192;
  unsigned snapshot_trailing = 2048;
  // Bytes of entry data libraft may hold in memory (its log since the last snapshot, plus
  // the trailing entries) before a snapshot is taken regardless of snapshot_threshold: a
  // bulk ingest applies few, large entries, so counting entries alone bounds no memory.
  // The budget is the larger of this and 1/16 of the last snapshot's size: a snapshot
  // rewrites the whole state, so its cost stays within 16 times the log's own bytes however
  // large the state grows. Such a snapshot keeps at most snapshot_trailing entries and a
  // quarter of the budget of them. Checked every 50 ms; the snapshot follows at the next
  // applied entry. 0 = off.
  size_t snapshot_log_bytes = 0;
  // Proposals queued for the loop thread; past it Propose returns kResourceExhausted.
  size_t max_queue = 4096;
  // Size of each raft log segment file, preallocated (libraft keeps about three ahead).
  // Starting a segment stalled log writes for 30-70 ms on every server sharing the disk,
  // so big segments make it rare (docs/replication.md §Commit latency item 6); etcd's WAL
  // files are 64 MB too. Rounded down to the disk's block size by libraft.
  size_t segment_bytes = 64u << 20;
  // Committed entries handed to the apply thread and not yet applied, at most (the loop
  // waits beyond it); 0 = apply on the loop thread, as libraft itself would.
  size_t apply_queue = 64;
  // How raft connections prove membership (tcp_transport.h): not owned, outlives the
  // RaftLog. Null: a PeerAuth of the RaftLog's own with no cluster secret and cluster id ""
  // (tests).
  PeerAuth* peer_auth = nullptr;
  // A raft connection's peer handshake must complete within this, or it is closed.
  unsigned handshake_timeout_ms = 5'000;
  // The state was restored from a backup under a new log (kvatlas-server restore): a log
  // replayed from index 1, as the leader sends it to a member added before any snapshot,
  // would lack that state. So the first snapshot is taken after the first applied entry
  // and keeps no trailing entries (a member added later receives the state as a snapshot);
  // `compacted` runs on the loop thread once it is written, and snapshot_threshold and
  // snapshot_trailing apply from then on.
  bool compact_early = false;
  std::function<void()> compacted;
  // Runs on the loop thread (within 50 ms) after a snapshot was written or installed: the
  // log entries and the state it replaced are freed by then. Must not block.
  std::function<void()> snapshot_done;
};

class RaftLog final : public ReplicatedLog {
 public:
  // Starts the loop thread, opens (or bootstraps) the log and starts raft; returns once
  // raft runs, or the error that prevented it (kIOError for the directory, kUnavailable if
  // the address cannot be bound). The machine must outlive the RaftLog.
  [[nodiscard]] static Result<std::unique_ptr<RaftLog>> Start(RaftOptions options,
                                                              LogStateMachine* machine);
  ~RaftLog() override;  // Stop()s
  RaftLog(const RaftLog&) = delete;
  RaftLog& operator=(const RaftLog&) = delete;

  // Closes raft (pending proposals fail with kUnavailable) and joins the loop thread.
  void Stop();

  // Stops raft as Stop does and starts it again on this object (every pointer to it stays
  // valid), for a server that no longer holds a replica of the group (docs/scaling.md
  // §Dropping a copy). With `wipe`, the directory's contents are deleted first and
  // kDroppedMarker left in it, so raft starts as a server in no configuration — as a joining
  // server does, never bootstrapping (now or at a later start) — and takes the group again
  // only when a leader adds it; the state machine must be emptied meanwhile
  // (StateMachine::DropReplica). Without it, raft resumes its log as it was. Proposals made
  // meanwhile fail with kUnavailable; the snapshot metrics start again. Errors:
  // kFailedPrecondition once failed(), kIOError for the directory, raft's start errors.
  [[nodiscard]] Status Reopen(bool wipe);

  // True once the state machine failed to apply an entry, or raft turned unavailable (a
  // disk write of its log failed): the server must stop. In the second case the RaftLog
  // also leaves kRebuildMarker in its directory, because 0.15.0 may have applied entries
  // that were never committed (docs/replication.md): the next start must rebuild the state
  // from the log instead of trusting it.
  bool failed() const;

  // File name, in RaftOptions::dir, of the "rebuild the state from the log" marker.
  static constexpr const char* kRebuildMarker = "REBUILD_STATE";
  // File name, in RaftOptions::dir, of the "this replica was dropped: never bootstrap"
  // marker (Reopen).
  static constexpr const char* kDroppedMarker = "DROPPED";
  // Whether this server led the cluster at the last status refresh (every 50 ms).
  bool is_leader() const override { return leader_.load(std::memory_order_acquire); }

  [[nodiscard]] Status Propose(std::string* entry,
                               std::function<void(Result<uint64_t>)> done) override;
  [[nodiscard]] ClusterStatus GetStatus() const override;
  [[nodiscard]] LogMetrics GetMetrics() const override;
  void AddServer(uint64_t id, std::string raft_address, Done done) override;
  void RemoveServer(uint64_t id, Done done) override;
  void TransferLeadership(uint64_t id, Done done) override;

 private:
  class Loop;
  explicit RaftLog(RaftOptions options, LogStateMachine* machine);

  // Starts the loop thread with a new Loop (Start, Reopen); returns raft's start outcome.
  Status Launch();
  // Queues `op` for the loop thread, which runs it with its Loop. False when stopped (op is
  // not run).
  bool Post(std::function<void(Loop&)> op, bool is_proposal);
  // Loop thread: runs the queued ops.
  void DrainOps(Loop& loop);

  RaftOptions options_;
  std::unique_ptr<PeerAuth> own_peer_auth_;  // when options_.peer_auth was null
  LogStateMachine* machine_;
  std::unique_ptr<Loop> loop_;  // replaced by Reopen (under mu_) while stopped
  std::thread thread_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> unavailable_{false};
  std::atomic<uint64_t> leadership_changes_{0};
  std::atomic<uint64_t> appends_repaired_{0};
  Histogram commit_latency_;  // Propose to applied, successful proposals only

  mutable std::mutex mu_;
  std::deque<std::function<void(Loop&)>> ops_;  // guarded by mu_
  size_t queued_proposals_ = 0;                 // guarded by mu_
  bool stopped_ = false;                        // guarded by mu_
  ClusterStatus status_;                        // guarded by mu_; refreshed by the loop
};

}  // namespace kvatlas::server
