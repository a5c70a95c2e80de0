// FsmAdapter: presents a LogStateMachine to canonical/raft as a `struct raft_fsm`. Shared by
// RaftLog (libuv I/O, async snapshots) and the deterministic raft_fixture tests (in-memory
// I/O, synchronous snapshots), so that the tests drive exactly the production callbacks.
//
// With an apply queue, apply only hands each entry to an ApplyThread (apply_thread.h), and
// snapshot and restore first wait for it to catch up; writes are then acknowledged through
// WhenApplied. Without one, entries are applied inside apply, on the loop thread.
//
// Thread-safety: raft calls the callbacks on its loop thread, except snapshot_async, which
// runs in the libuv thread pool; failed() may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "server/replication/apply_thread.h"
#include "server/state/replicated_log.h"

extern "C" {
struct raft;
struct raft_fsm;
struct raft_buffer;
}

namespace kvatlas::server {

class FsmAdapter {
 public:
  // `async_snapshots`: serialise snapshots in snapshot_async (version-3 FSM; needs an io
  // with async work), else inside snapshot() on the loop thread (version 2). `apply_queue`:
  // entries handed to an apply thread and not yet applied, at most; 0 = no apply thread.
  FsmAdapter(LogStateMachine* machine, bool async_snapshots, size_t apply_queue = 0);
  ~FsmAdapter();
  FsmAdapter(const FsmAdapter&) = delete;
  FsmAdapter& operator=(const FsmAdapter&) = delete;

  struct raft_fsm* fsm() {
    return fsm_.get();
  }
  // The raft instance applying through this FSM: apply derives entry indexes from it. Set
  // after raft_init (or raft_fixture_grow), before raft_start.
  void set_raft(struct raft* r) { raft_ = r; }

  // True once the state machine failed to apply an entry or a snapshot: the server must
  // stop (its restart re-applies from the persisted applied index).
  bool failed() const;

  // Loop thread: runs `done` once the command entry at `index`, which raft has passed to
  // apply, is applied to the state machine: at once without an apply thread, else as
  // ApplyThread::WhenApplied. An error instead when the state machine failed.
  void WhenApplied(uint64_t index, std::function<void(Status)> done);

  // Loop thread: the last index applied to the state machine (raft's last_applied may be
  // ahead of it while the apply thread catches up).
  uint64_t applied_index() const;

  // After raft is closed: applies what the apply thread still holds and stops it.
  void StopApplying();

  // Loop thread: the longest ApplyEntry since the last call, in milliseconds (on the loop
  // thread, the raft loop cannot send heartbeats while it applies).
  uint64_t TakeLongestApplyMs();

  // Any thread: snapshots taken and installed, and their durations, into *out.
  void ReadSnapshotMetrics(LogMetrics* out) const;

  // Loop thread, before raft_start: `taken` runs on the loop thread each time libraft has
  // decided to take a snapshot and the state was captured for it (before it is written).
  // Quick; it may change raft's snapshot settings (RaftLog puts back the threshold it had
  // lowered to 1, so that no second snapshot follows while the first is written).
  void SetOnSnapshotTaken(std::function<void()> taken) { on_snapshot_taken_ = std::move(taken); }

 private:
  static int Apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result);
  static int Snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n);
  static int SnapshotAsync(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n);
  static int SnapshotFinalize(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n);
  static int Restore(struct raft_fsm* fsm, struct raft_buffer* buf);
  // Serialises capture_ into raft_malloc'd buffers of kSnapshotChunkBytes.
  int Serialize(struct raft_buffer* bufs[], unsigned* n);
  // From SnapshotFinalize (loop thread): counts and logs a snapshot that libraft did not
  // make the log's snapshot.
  void NoteSnapshotOutcome();

  // Past glibc's largest mmap threshold (32 MiB), so every chunk is its own mapping and
  // goes back to the system when libraft frees it: smaller chunks come from the heap once
  // glibc's threshold has risen to them, and stay in the process until a malloc_trim.
  static constexpr size_t kSnapshotChunkBytes = 64 << 20;

  LogStateMachine* machine_;
  bool async_;
  std::unique_ptr<struct raft_fsm> fsm_;
  struct raft* raft_ = nullptr;
  std::unique_ptr<LogStateMachine::Capture> capture_;
  std::function<void()> on_snapshot_taken_;    // loop thread
  std::unique_ptr<ApplyThread> apply_thread_;  // null: apply on the loop thread
  std::atomic<bool> failed_{false};
  uint64_t longest_apply_ms_ = 0;  // loop thread
  // Snapshot metrics: a snapshot is timed from its capture to its finalize (written).
  std::chrono::steady_clock::time_point snapshot_started_;  // loop thread
  std::atomic<uint64_t> snapshots_taken_{0};
  std::atomic<uint64_t> snapshots_restored_{0};
  std::atomic<uint64_t> last_snapshot_bytes_{0};
  std::atomic<uint64_t> snapshot_failures_{0};
  std::atomic<uint64_t> failed_snapshot_index_{0};
  Histogram snapshot_duration_;
  Histogram restore_duration_;
};

}  // namespace kvatlas::server
