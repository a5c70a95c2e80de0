// ChangeFeed: every applied change to the map, as records a client can follow
// (docs/feed.md). The state machine reports each applied group (ApplyObserver, on the
// applying thread); the feed turns its mutations into records, keeps a bounded window of
// recent ones, and hands them to watchers, each with a bounded queue of its own.
//
// Threading: OnApplied/OnReset run on the state machine's writing side (one thread at a
// time: OnApplied on the applying thread, OnReset there or, for a raft snapshot restore, on
// the raft loop while the applying thread is idle) and never block on a watcher:
// publishing appends one shared chunk to the window and to each watcher's queue (a short
// lock each). A watcher whose queue is full is cut: it stops receiving and reports the
// revision to resume from; it cannot slow ingestion or other watchers. Subscribe, Next and
// the accessors from any thread. A watcher is consumed either by blocking Next (the SSE
// stream) or by TryTake with a notify hook (the binary protocol's io threads, which must
// never wait).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/feed.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

// The records of one applied group, shared by the window and every watcher's queue.
struct FeedChunk {
  Revision revision = 0;
  std::vector<FeedRecord> records;
  size_t keys = 0;   // Σ records[i].keys.size()
  size_t bytes = 0;  // the chunk's memory, about (ChunkBytes): for the window's bound
  std::chrono::steady_clock::time_point published;
};

struct ChangeFeedOptions {
  // Memory of the window of recent records, about (FeedChunk::bytes), and block keys in
  // it: past either bound the oldest chunks are dropped (compacted) and a watch from before
  // them fails with kCompacted. The newest chunk stays whatever its size. 16 MiB holds
  // ~1.5M keys of records without locations.
  size_t window_bytes = 16u << 20;
  size_t window_keys = SIZE_MAX;
  // Chunks (applied groups) a watcher may have queued; past it the watcher is cut.
  size_t watcher_queue_chunks = 4096;
  // Watchers at once; further Subscribe calls fail with kResourceExhausted.
  size_t max_watchers = 64;
};

struct FeedStats {
  Revision revision = 0;           // last published
  Revision compacted_through = 0;  // records at or below are gone from the window
  size_t window_chunks = 0;
  size_t window_keys = 0;
  size_t window_bytes = 0;
  size_t watchers = 0;
  uint64_t records_published = 0;
  uint64_t records_sent = 0;    // delivered to watchers (after their filters)
  uint64_t cuts = 0;            // watchers cut for falling behind
  double last_lag_seconds = 0;  // publish → handed to a watcher, most recent delivery
};

// The feed's Prometheus metrics (kvatlas_feed_*), for GET /metrics.
std::string RenderFeedMetrics(const FeedStats& stats);

class ChangeFeed;

// One subscription. Next() hands out records in revision order, each revision whole.
class Watcher {
 public:
  ~Watcher();  // unsubscribes
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Waits up to `timeout` for more records and returns them (possibly none: a timeout).
  // kWatchCut once the watcher was cut for falling behind (the message says why and the
  // revision to resume from: ResumeFrom()), kUnavailable once the feed shut down.
  [[nodiscard]] Result<std::vector<FeedRecord>> Next(std::chrono::milliseconds timeout);

  // The revision a new watch should start after to miss nothing this one did not deliver:
  // the last revision fully handed out.
  Revision ResumeFrom() const;

  // What TryTake hands out: the matching records of whole revisions, in order, and the
  // revision they complete (ResumeFrom() after the take: it also passes revisions whose
  // records were all filtered out and, once the queue is drained, revisions that had no
  // records at all).
  struct Take {
    std::vector<FeedRecord> records;
    Revision through = 0;
    // More is queued, or the end (a cut, the feed's shutdown) is still to be reported: take
    // again. When false, the notify hook runs once something arrives.
    bool more = false;
  };

  // Next without waiting, for event-driven consumers (the binary protocol's watches): takes
  // queued applied groups worth at most `max_keys` block keys (at least one group), or
  // nothing. The same errors as Next once the queue is drained.
  [[nodiscard]] Result<Take> TryTake(size_t max_keys);

  // Sets the hook that runs when the watcher has something to take (records, a cut, the
  // feed's end, or only a newer revision: one applied without records) after a TryTake left
  // it with nothing: once per such transition, and at once if something is queued already. It runs
  // on the publishing (applying) thread under the feed's locks, so it must only schedule work (e.g.
  // post to an executor): never block, never call into the feed or a watcher. Set it once, before
  // the first TryTake.
  void SetNotify(std::function<void()> notify);

 private:
  friend class ChangeFeed;
  Watcher(ChangeFeed* feed, FeedFilter filter, Revision from, size_t max_chunks);

  // Wakes Next and runs the notify hook if it is armed. REQUIRES: mu_ held.
  void Signal();
  // The error a drained watcher reports (kWatchCut, kUnavailable). REQUIRES: mu_ held, and
  // cut_ or closed_.
  Status EndStatus() const;

  ChangeFeed* const feed_;
  const FeedFilter filter_;
  const size_t max_chunks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const FeedChunk>> queue_;
  Revision delivered_;  // last revision handed out by Next
  bool cut_ = false;
  bool closed_ = false;
  std::function<void()> notify_;
  bool notify_armed_ = false;  // notify_ runs on the next Signal()
};

class ChangeFeed final : public ApplyObserver {
 public:
  explicit ChangeFeed(ChangeFeedOptions options = {});
  ~ChangeFeed() override;  // cuts every watcher with kUnavailable
  ChangeFeed(const ChangeFeed&) = delete;
  ChangeFeed& operator=(const ChangeFeed&) = delete;

  // ApplyObserver (the writing side, see the threading note above).
  void OnApplied(Revision revision, const MutationList& mutations) override;
  void OnReset(Revision revision, const Index& index) override;

  // A watcher of the records after revision `from` (nullopt = from now). kCompacted when
  // `from` is older than the window (the message names the oldest revision available and
  // the current one), kInvalidArgument when it is in the future, kResourceExhausted past
  // max_watchers.
  [[nodiscard]] Result<std::unique_ptr<Watcher>> Subscribe(std::optional<Revision> from,
                                                           FeedFilter filter);

  FeedStats Stats() const;

 private:
  friend class Watcher;
  void Unsubscribe(Watcher* watcher);
  void CountDelivery(size_t records, std::chrono::steady_clock::time_point published);

  const ChangeFeedOptions options_;
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<const FeedChunk>> window_;
  size_t window_keys_ = 0;
  size_t window_bytes_ = 0;
  Revision revision_ = 0;
  // revision_, stored once a revision's chunk is in every watcher's queue: a watcher whose
  // queue is empty has been handed every record up to it (TryTake's `through`).
  std::atomic<Revision> published_{0};
  Revision compacted_through_ = 0;
  std::vector<Watcher*> watchers_;
  // Interned ids of the state's contexts and holders → keys, kept in step with the state
  // from kPutContext/kPutHolder mutations and OnReset. Applying thread only.
  std::unordered_map<uint32_t, ContextKey> contexts_;
  std::unordered_map<uint32_t, HolderKey> holders_;
  uint64_t records_published_ = 0;
  uint64_t records_sent_ = 0;
  uint64_t cuts_ = 0;
  double last_lag_seconds_ = 0;
};

}  // namespace kvatlas::server
