// Applier: the thread that owns writes. Network handlers Submit() command batches into a
// bounded queue and wait on the returned future; the applier drains up to
// max_group_batches at a time and applies them as one group (one storage write, one fsync):
// group commit. Handlers never touch the state machine directly.
//
// Thread-safety: Submit/Stop from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/model/command.h"
#include "server/state/replicated_log.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

struct ApplierOptions {
  // Pending batches; past it Submit answers kResourceExhausted at once (the HTTP layer
  // turns it into 429) instead of queueing without bound.
  size_t max_queue = 1024;
  // Batches applied per group (one storage write; with a replicated log, one log entry).
  size_t max_group_batches = 256;
  // With a replicated log: groups proposed and not yet committed. Pipelining hides the
  // commit latency (an fsync and a round trip) behind the next groups; few enough that
  // batches queue up meanwhile and the next entry carries many (raft costs ~100 µs per
  // entry on this kind of machine, whatever its size).
  size_t max_in_flight_groups = 4;
};

class Applier {
 public:
  // Without `log`, groups are applied to `machine` directly (tests, benchmarks). With it,
  // each group is proposed as one log entry and acknowledged once the log committed and
  // applied it (the log drives `machine`); revisions are then log indexes, shared by the
  // batches of one group. `log` must outlive the Applier.
  Applier(StateMachine* machine, ApplierOptions options = {}, ReplicatedLog* log = nullptr);
  ~Applier();  // Stop()s
  Applier(const Applier&) = delete;
  Applier& operator=(const Applier&) = delete;

  // Queues `batch`; the future yields the revision it was applied at, or an error
  // (kResourceExhausted when the queue is full, kUnavailable after Stop or a storage
  // failure, kIOError for the failing group itself).
  std::future<Result<Revision>> Submit(CommandBatch batch);

  // As Submit, but calls `done` instead of completing a future: on the applier thread once
  // the batch is applied, or on the caller's thread at once when it is refused. `done`
  // must be quick and must not call back into the Applier (post elsewhere to do work).
  using Callback = std::function<void(Result<Revision>)>;
  void SubmitAsync(CommandBatch batch, Callback done);

  // As SubmitAsync, but a refusal is returned instead of reported to `done`, and leaves
  // `*batch` as it was, so that a producer that can wait (the ZMQ ingest) retries the same
  // batch later. On success `*batch` is moved from and `done` will be called.
  [[nodiscard]] Status TrySubmitAsync(CommandBatch* batch, Callback done);

  // Refuses new writes with `reason` (kResourceExhausted) until called with an empty
  // reason; queued and in-flight batches are unaffected, and so are empty batches (the
  // barrier of a linearizable read: reads go on). For the disk-space watermark.
  void SetWritesRefused(std::string reason);
  // The reason new writes are refused (SetWritesRefused), or empty while they are accepted.
  std::string writes_refused() const;

  // Refuses stores into contexts this state has never held, with `reason`, until called
  // with an empty reason: Submit answers such a batch kResourceExhausted naming the
  // context; stores into known contexts, removals and clears go on. For the snapshot-size
  // guard (a group near libraft's snapshot bound takes no new contexts: docs/scaling.md).
  void SetNewContextsRefused(std::string reason);
  // The reason new contexts are refused, or empty while they are taken.
  std::string new_contexts_refused() const;
  // Contexts for which `placed_here` is true are never refused as new: the placement
  // directory placed them on this group (docs/scaling.md §Placed contexts), which it did
  // while the group took new contexts, so they are written here even once it stops. Set
  // before the first Submit (a server of several groups); null = none.
  void SetPlacedHere(std::function<bool(const ContextKey&)> placed_here) {
    placed_here_ = std::move(placed_here);
  }
  // While new contexts are refused, removes from `batch` the stores into contexts this
  // state has never held and returns how many it removed (0 otherwise): for a producer that
  // must go on with the rest of its stream (the ZMQ ingest), where a refusal would stall it.
  size_t DropNewContextStores(CommandBatch* batch);

  // Applies what is queued, then stops the thread. Idempotent.
  void Stop();

  // True once a storage write failed: the process must stop taking writes.
  bool failed() const;

  // Batches waiting to be applied.
  size_t queue_depth() const;

 private:
  struct Pending {
    CommandBatch batch;
    Callback done;
  };
  void Run();
  void RunReplicated();
  // The first context of a store in `batch` that this state has never held, if any.
  std::optional<ContextKey> FirstNewContext(const CommandBatch& batch) const;
  // Proposes one group, retrying while the log's queue is full.
  void Propose(std::vector<Pending> group);

  StateMachine* machine_;
  ApplierOptions options_;
  ReplicatedLog* log_;
  size_t in_flight_ = 0;              // guarded by mu_
  std::string refused_reason_;        // guarded by mu_; empty = writes accepted
  std::string new_contexts_refused_;  // guarded by mu_; empty = new contexts taken
  // Whether new_contexts_refused_ is set: the writes' path checks it without the lock.
  std::atomic<bool> refusing_new_contexts_{false};
  std::function<bool(const ContextKey&)> placed_here_;  // set before the first Submit
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  bool failed_ = false;
  std::thread thread_;
};

}  // namespace kvatlas::server
