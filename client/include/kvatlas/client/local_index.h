// kvatlas::LocalIndex: an in-process replica of chosen contexts of the kvatlas map, so that
// a scheduler answers prefix lookups in microseconds without a network round trip
// (docs/feed.md §LocalIndex).
//
// It lists each context (Client::Snapshot) and follows the change feed from that revision
// (Client::Watch filtered to the context), so that no change is missed or applied twice.
// A watch that is cut for falling behind resumes from its last revision; one whose
// revision was compacted away, or whose server replaced its state, reloads the snapshot;
// a lost connection is retried, moving to the next endpoint (any server of the cluster
// serves watches from its own applied state, so a follower works as well as the leader).
// Lookups use the server's own prefix-matching code (common/internal/prefix_match.h) and
// return the answer Client::Lookup returns, at the revision the replica has reached.
//
// Thread-safety: every method may be called from any number of threads at once. Lookups
// of a context take a shared lock; updates apply under its exclusive lock one revision
// batch at a time, and a snapshot is loaded off the lock and swapped in.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/common/export.h"
#include "kvatlas/common/lookup.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// Where a context's replica is in its sync loop (docs/feed.md §LocalIndex).
enum class LocalIndexState : uint8_t {
  kConnecting,       // connecting to a server (first, or after the connection was lost)
  kLoadingSnapshot,  // receiving and loading the context's snapshot (and buffering the feed)
  kSynced,           // following a live watch
  kRetrying,         // an attempt failed (last_error says why): waiting out the backoff
};
// "connecting", "loading_snapshot", "synced", "retrying".
KVATLAS_EXPORT std::string_view LocalIndexStateName(LocalIndexState state);

// One replicated context's sync state (LocalIndex::ContextStatus).
struct LocalIndexContextStatus {
  ContextKey context;
  LocalIndexState state = LocalIndexState::kConnecting;
  // The snapshot being loaded (kLoadingSnapshot): its revision (once its first part came)
  // and the copies received so far; after it: those of the last snapshot loaded.
  Revision snapshot_revision = 0;
  uint64_t snapshot_copies = 0;
  // The feed watched from the snapshot's revision while it loads (kLoadingSnapshot): the
  // records buffered, their approximate bytes (bounded by max_buffered_feed_bytes) and the
  // revision through which the buffer is complete (0 until the watch has started). All 0
  // once the buffer has been applied.
  uint64_t buffered_records = 0;
  uint64_t buffered_bytes = 0;
  Revision buffered_through = 0;
  // The last failed attempt (connect, snapshot, watch start, a watch that ended with an
  // error), OK while none failed since the last sync; and how many failed in a row.
  Status last_error;
  uint64_t failures = 0;
};

struct LocalIndexOptions {
  // The servers to follow: any members of one cluster, tried in order (ClientOptions).
  ClientOptions client;
  // The contexts to replicate: at least one, each with a model and a block size (an empty
  // tenant is "default", as everywhere). Lookups of other contexts fail.
  std::vector<ContextKey> contexts;
  // Wait after a failed attempt (connect, snapshot, watch); doubles up to the max.
  std::chrono::milliseconds retry_backoff_min{50};
  std::chrono::milliseconds retry_backoff_max{2000};
  // Keys a lookup walks at most, as the server's max_lookup_blocks.
  uint32_t max_lookup_blocks = 8192;
  // Bound on receiving one snapshot (a context of 50M copies takes about a minute).
  std::chrono::milliseconds snapshot_timeout{600'000};
  // Bound on the feed records buffered while a snapshot loads (their approximate in-memory
  // size). The watch starts from the snapshot's revision as soon as its first part arrives,
  // so that ingest during a long load cannot push that revision out of the server's feed
  // window; past this bound the load is abandoned (resource_exhausted, state kRetrying) and
  // the context listed again.
  uint64_t max_buffered_feed_bytes = 256ull << 20;
  // Approximate mode (docs/routing.md §Approximate mode): also follow the feed's predicted
  // records (WatchOptions::predicted) and keep them per context, so that Lookup answers
  // carry LookupAnswer::predicted and Scorer credits them as the server's route does. A
  // replica sees the predictions its server applies after the watch starts (snapshots list
  // none); each counts until its expires_at_ms on this process's clock. Needs a server that
  // publishes them (an older one refuses the watch: invalid_argument).
  bool predictions = false;
  // Bound on the (block, holder) predictions kept per context; past it new ones are dropped
  // (LocalIndexStats::predicted_dropped). About 85 bytes each.
  size_t max_predicted_entries = 1'000'000;
  // Called on the client's I/O thread after each snapshot part is loaded, with the copies
  // received so far (e.g. to report progress); may be empty. It holds up the client's
  // other calls while it runs.
  std::function<void(const ContextKey&, uint64_t copies)> on_snapshot_progress;
  // Called on the context's sync thread for each failed attempt, before its backoff (e.g.
  // to log it); may be empty. Must not call back into the LocalIndex's destructor.
  std::function<void(const ContextKey&, const Status&)> on_error;
};

struct LocalIndexStats {
  Revision revision = 0;  // the lowest revision any context's replica has reached
  // Every context loaded and following a live watch: records arrive, or the server answers
  // a ping within 1 s whenever the feed has been quiet for 1 s.
  bool synced = false;
  // 0 while synced; otherwise how long since the replica was last known in sync (or since
  // Start, before the first sync).
  std::chrono::milliseconds staleness{0};
  uint64_t blocks = 0;
  uint64_t copies = 0;
  uint64_t memory_bytes = 0;
  uint64_t records_applied = 0;
  uint64_t snapshots_loaded = 0;  // first loads and reloads (after compaction or a reset)
  uint64_t watch_resumes = 0;     // watches restarted from their revision (cut, reconnect)
  // With predictions on: the (block, holder) predictions kept in every context (expired
  // ones not yet swept included), and those dropped past max_predicted_entries.
  uint64_t predicted_entries = 0;
  uint64_t predicted_dropped = 0;
  // The least advanced context's state, and the most recent failure of any context (OK
  // when none failed since its last sync); LocalIndex::ContextStatus has them per context.
  LocalIndexState state = LocalIndexState::kConnecting;
  Status last_error;
};

class KVATLAS_EXPORT LocalIndex {
 public:
  // Validates `options` (kInvalidArgument naming the field) and starts following in the
  // background; it does not wait for a server (see WaitSynced).
  [[nodiscard]] static Result<std::unique_ptr<LocalIndex>> Start(LocalIndexOptions options);
  // Stops following. Returns within ~100 ms, or after an in-flight connect, watch start or
  // ping (bounded by the client's connect_timeout and default_deadline).
  ~LocalIndex();
  LocalIndex(const LocalIndex&) = delete;
  LocalIndex& operator=(const LocalIndex&) = delete;

  // Waits until every context has loaded a snapshot and follows a live watch, or fails
  // with kDeadlineExceeded after `timeout`, its message naming each unsynced context's
  // state and last error (e.g. a refused token, a server that does not answer).
  [[nodiscard]] Status WaitSynced(std::chrono::milliseconds timeout) const;
  // Waits until every context's replica has reached `revision` (e.g. an ingest's answer).
  [[nodiscard]] Status WaitForRevision(Revision revision, std::chrono::milliseconds timeout) const;

  // The prefix lookup of Client::Lookup over the replica, with LookupAnswer::predicted
  // filled when predictions are on. Tokens are hashed with the server's hash seed. kNotFound for a
  // context not replicated; kUnavailable before its first snapshot; kUnavailable when
  // `min_revision` is set and not reached here; kInvalidArgument for a linearizable read (only a
  // server can answer one).
  [[nodiscard]] Result<LookupAnswer> Lookup(const LookupRequest& request) const;
  // The same by block keys, without building a request (the scheduler's hot path).
  [[nodiscard]] Result<LookupAnswer> Lookup(const ContextKey& context,
                                            std::span<const BlockKey> keys,
                                            std::string_view instance_id = {}) const;

  [[nodiscard]] Revision revision() const;
  [[nodiscard]] LocalIndexStats Stats() const;
  // Each context's sync state, in the order of LocalIndexOptions::contexts.
  [[nodiscard]] std::vector<LocalIndexContextStatus> ContextStatus() const;

  class Impl;

 private:
  explicit LocalIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvatlas
