// PredictionRecorder: the server's side of approximate mode (docs/routing.md §Approximate
// mode). A route that picks a candidate publishing no events queues the request's block
// keys here (Enqueue, non-blocking); a thread of its own, every `interval`, coalesces what
// was queued (one PredictCommand per holder and context, keys deduplicated) into one
// batch, stamps it with this server's clock and, on the leader, submits it to the applier
// without waiting: a route costs no raft write of its own, at most 1000 / interval_ms
// writes/s in all. On a follower the round's batch is handed to `forward` (SetForward: the
// runtime POSTs it to the leader's /v1/cluster/predict, which submits it there), in calls of
// at most kMaxForwardedPredictions commands and kMaxForwardedPredictionKeys keys; what is not
// forwarded (no forward set, no leader known, a failed call, and every later call of that
// round) is recorded in this follower's own table only. The leader takes forwarded batches
// with SubmitForwarded.
//
// The queue is bounded (max_queued_blocks keys): past it a prediction is dropped and
// counted, never waited for.
//
// Thread-safety: Enqueue, SubmitForwarded and stats from any thread; construct, SetForward,
// Start, RequestStop and Stop from one thread. `forward` runs on the recorder's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/internal/periodic_task.h"
#include "kvatlas/common/status.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

// The most one forward to the leader carries (POST /v1/cluster/predict refuses more, 413):
// commands, and keys in all. About 1.4 MB of JSON at most.
inline constexpr size_t kMaxForwardedPredictions = 4096;
inline constexpr size_t kMaxForwardedPredictionKeys = 65'536;

struct PredictionOptions {
  // How long a prediction counts (predicted_ttl_ms): kMinPredictedTtlMs..kMaxPredictedTtlMs.
  uint32_t ttl_ms = 120'000;
  std::chrono::milliseconds interval{50};
  size_t max_queued_blocks = size_t{1} << 20;  // 8 MiB of keys
};

struct PredictionRecorderStats {
  uint64_t queued = 0;          // predictions queued
  uint64_t dropped = 0;         // predictions dropped because the queue was full
  uint64_t proposed = 0;        // batches submitted (leader)
  uint64_t failed = 0;          // batches refused or not applied (e.g. leadership lost)
  uint64_t local = 0;           // commands recorded on this follower only
  uint64_t forwarded = 0;       // batches a follower forwarded and the leader took
  uint64_t forward_failed = 0;  // forwards that failed (recorded locally instead)
  uint64_t received = 0;        // batches a leader took from followers (SubmitForwarded)
};

class PredictionRecorder {
 public:
  // `is_leader`: whether this server leads now. `machine` and `applier` must outlive it.
  PredictionRecorder(PredictionOptions options, StateMachine* machine, Applier* applier,
                     std::function<bool()> is_leader);
  ~PredictionRecorder();  // Stop()s

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }
  void Stop() { task_.Stop(); }

  // Queues `keys` as predicted on `holder` in `context`. False (counted) when the queue is
  // full or there is nothing to record.
  bool Enqueue(const ContextKey& context, const HolderKey& holder, std::vector<BlockKey> keys);
  // Submits what is queued now (the task's round; tests call it directly).
  void Flush();

  // Sends a follower's round to the leader: OK once the leader took the batch. Must be
  // bounded in time (it delays the next round, never a route). Set before Start.
  using Forward = std::function<Status(const CommandBatch& batch)>;
  void SetForward(Forward forward) { forward_ = std::move(forward); }

  // A batch of PredictCommands a follower forwarded (validated by the caller): given this
  // server's ttl_ms, stamped with its clock and submitted without waiting. kNotLeader on a
  // follower; kResourceExhausted (or the applier's refusal) when the applier takes no more now.
  [[nodiscard]] Status SubmitForwarded(CommandBatch batch);

  PredictionRecorderStats stats() const;
  const PredictionOptions& options() const { return options_; }

 private:
  struct Pending {
    ContextKey context;
    HolderKey holder;
    std::vector<BlockKey> keys;
  };

  // Stamps `batch` with this server's clock and submits it (counted).
  Status Submit(CommandBatch batch);
  // The follower's round: forwards `batch` in bounded calls, records the rest locally.
  void ForwardOrRecord(CommandBatch batch);
  void RecordLocally(const CommandBatch& batch);

  const PredictionOptions options_;
  StateMachine* machine_;
  Applier* applier_;
  std::function<bool()> is_leader_;
  Forward forward_;                 // the task's thread once started
  std::string last_forward_error_;  // the task's thread: logged when it changes
  mutable std::mutex mu_;
  std::vector<Pending> pending_;  // guarded by mu_
  size_t pending_blocks_ = 0;     // guarded by mu_
  std::atomic<uint64_t> queued_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> proposed_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> local_{0};
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> forward_failed_{0};
  std::atomic<uint64_t> received_{0};
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
