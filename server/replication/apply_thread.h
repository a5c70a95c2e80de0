// ApplyThread: applies committed log entries to a LogStateMachine on a thread of its own,
// so that the raft loop only hands them over.
//
// Why: libraft 0.15 applies the entries a follower has just learnt are committed inside
// the completion of an append, before the follower answers it (appendFollowerCb →
// replicationApply). An apply on the loop thread therefore sits in the leader's commit
// path for the next entry, and a slow one (a page fault storm, a RocksDB write stall)
// delays every commit behind it (docs/replication.md §Commit latency).
//
// Contract with the raft loop (the only caller of Enqueue, Drain and WhenApplied):
// - entries are handed over in index order and applied in that order, each once;
// - Drain() returns once everything handed over is applied, so that a snapshot capture or
//   a restore that follows on the loop thread sees (and replaces) exactly the state at
//   raft's last applied index, as 0.15 assumes;
// - a write is acknowledged only through WhenApplied, i.e. after its entry is applied here,
//   not when raft believes it applied (it merely handed the entry over).
// The queue is bounded: Enqueue blocks the loop while it is full, which is the same
// back-pressure an apply on the loop gave.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kvatlas/common/status.h"
#include "server/state/replicated_log.h"

namespace kvatlas::server {

// Applies the committed entry at `index` to `machine` and returns how long that took, in
// milliseconds; logs a failure, after which the state can no longer follow the log and the
// caller must mark itself failed (the server then refuses writes and exits; its restart
// re-applies from the persisted applied index). Used by the apply thread and by the apply
// on the raft loop alike.
[[nodiscard]] Status ApplyCommittedEntry(LogStateMachine* machine, uint64_t index,
                                         std::string_view entry, uint64_t* took_ms);

// The error a write gets when its entry was committed but this server did not apply it
// (the state machine failed, or the server is stopping): the outcome is unknown to it.
Status NotAppliedHere(uint64_t index, bool failed);

class ApplyThread {
 public:
  // Starts the thread. `max_queued` (> 0) bounds the entries handed over and not applied.
  ApplyThread(LogStateMachine* machine, size_t max_queued);
  ~ApplyThread();  // Stop()s
  ApplyThread(const ApplyThread&) = delete;
  ApplyThread& operator=(const ApplyThread&) = delete;

  // Hands over the committed entry at `index`; blocks while max_queued entries wait.
  void Enqueue(uint64_t index, std::string entry);

  // Runs `done` once the entry at `index` is applied: at once (on the caller's thread) if
  // it already is, else on the apply thread right after it. Gets an error instead when the
  // state machine failed before reaching it, or the thread stopped first. `done` must be
  // quick and must not call back into the ApplyThread.
  void WhenApplied(uint64_t index, std::function<void(Status)> done);

  // Waits until every entry handed over has been applied (or skipped after a failure).
  void Drain();

  // Applies what is queued, fails the waiters left, and joins the thread. Idempotent; no
  // Enqueue after it.
  void Stop();

  // The last index applied; readable from any thread.
  uint64_t applied_index() const { return applied_.load(std::memory_order_acquire); }
  // `if_idle` when nothing handed over waits to be applied (raft's last applied index: it
  // also counts raft's own entries and restored snapshots, which bypass this thread), else
  // applied_index().
  uint64_t AppliedIndexOr(uint64_t if_idle);
  // True once the state machine failed to apply an entry: later entries are skipped.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The longest apply since the last call, in milliseconds. Any thread.
  uint64_t TakeLongestApplyMs() { return longest_apply_ms_.exchange(0); }

 private:
  struct Entry {
    uint64_t index;
    std::string data;
  };
  void Run();
  using Ready = std::vector<std::pair<std::function<void(Status)>, Status>>;
  // Under mu_: moves to `ready` (to be run once the lock is released) the waiters up to
  // applied_, and all the others with an error once nothing more will be applied.
  void CollectWaiters(Ready* ready);
  // Under mu_: true when no entry will be applied any more (failed, or stopped and empty).
  bool Finished() const;

  LogStateMachine* machine_;
  const size_t max_queued_;
  std::atomic<uint64_t> applied_{0};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> longest_apply_ms_{0};

  std::mutex mu_;
  std::condition_variable work_cv_;  // the apply thread waits for entries
  std::condition_variable idle_cv_;  // Enqueue waits for room, Drain for an empty queue
  std::deque<Entry> queue_;          // guarded by mu_
  bool applying_ = false;            // guarded by mu_: an entry is out of the queue, in apply
  bool stopping_ = false;            // guarded by mu_
  bool exited_ = false;              // guarded by mu_: Run returned
  // Waiters by index, guarded by mu_. Indexes of our commands only; raft's own entries
  // (barriers, configurations) never reach the state machine and have no waiters.
  std::multimap<uint64_t, std::function<void(Status)>> waiters_;
  std::thread thread_;
};

}  // namespace kvatlas::server
