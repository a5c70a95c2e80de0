// Predicted blocks (docs/routing.md §Approximate mode): the blocks a route sent to an
// instance that publishes no KV events, held as "probably cached there" until a TTL ends.
// Leased soft state like the router fleet's loads: every replica fills its table from the
// PredictCommands it applies, in memory only — never in storage, snapshots or the replica
// digest; a LocalIndex with predictions on fills one per context from the change feed's
// `predicted` records (docs/feed.md §Predicted records). Real events replace predictions: a Store,
// Remove or Clear naming a holder drops its predicted blocks and keeps new ones off it while its
// stream is live (an event less than kPredictionLiveWindow ago); a holder quiet for longer — its
// stream down, or never up — takes predictions again, until its next event.
//
// Memory is bounded twice: entries end with their TTL, and past `max_entries` (block,
// holder) entries new predictions are dropped and counted. Expired entries leave through
// a queue in order of expiry, so every call costs O(keys it names + entries it expires,
// at most 16,384), never a pass over the table. Thread-safe: Record/NoteEvent from the applying
// thread, reads from any.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/types.h"

namespace kvatlas {

// The TTL range of predictions (the predicted_ttl_ms option) and the default entry cap
// (predicted_max_entries): 1M entries of ~85 bytes each (the expiry queue included).
inline constexpr uint32_t kMinPredictedTtlMs = 100;
inline constexpr uint32_t kMaxPredictedTtlMs = 3'600'000;
inline constexpr size_t kDefaultMaxPredictedEntries = 1'000'000;
// A holder whose last real event is younger than this has a live stream: its events say
// what it holds, so predictions for it are not recorded.
inline constexpr std::chrono::milliseconds kPredictionLiveWindow{5'000};

// One holder's predicted prefix of a request.
struct PredictedMatch {
  HolderKey holder;
  uint32_t blocks = 0;  // leading blocks of the request predicted on it

  friend bool operator==(const PredictedMatch&, const PredictedMatch&) = default;
};

struct PredictedStats {
  size_t entries = 0;      // (block, holder) entries kept now, expired ones not yet swept included
  size_t max_entries = 0;  // the cap
  uint64_t recorded = 0;   // entries added or renewed
  uint64_t expired = 0;    // entries swept after their TTL
  uint64_t dropped = 0;    // entries not recorded because the table was full
  uint64_t replaced = 0;   // entries dropped, or not recorded, because the holder sent events
  size_t queued = 0;       // elements of the expiry queue (renewals add one each)
};

class PredictedTable {
 public:
  using Clock = std::chrono::system_clock;

  explicit PredictedTable(size_t max_entries = kDefaultMaxPredictedEntries)
      : max_entries_(max_entries) {}

  // Records `keys` as predicted on `holder` in `context` from `accepted_at` until
  // `expires_at` (a key predicted again has its end moved). Nothing is recorded for a holder
  // whose stream is live at `accepted_at` (IsLive), nor when the prediction ended already.
  // Returns the entries recorded (added, or renewed to end later); their keys are appended
  // to `recorded` when it is set (the applied effect the change feed publishes).
  size_t Record(const ContextKey& context, const HolderKey& holder, std::span<const BlockKey> keys,
                Clock::time_point accepted_at, Clock::time_point expires_at, Clock::time_point now,
                std::vector<BlockKey>* recorded = nullptr);
  // A real event (store, remove, clear) of `holder` was applied at `now`: its predictions go,
  // and new ones are refused while its stream is live (IsLive).
  void NoteEvent(const HolderKey& holder, Clock::time_point now);
  // Drops `holder`'s predictions without marking its stream live: a replica applying the
  // records of a server that already applied the live rule (LocalIndex).
  void Forget(const HolderKey& holder);
  // Forgets everything (a server restoring a snapshot).
  void Clear();

  // Whether `holder` sent a real event less than kPredictionLiveWindow before `at`.
  bool IsLive(const HolderKey& holder, Clock::time_point at) const;

  // Leading blocks of `keys` predicted on `holder` in `context` and not expired at `now`.
  uint32_t PrefixOf(const ContextKey& context, const HolderKey& holder,
                    std::span<const BlockKey> keys, Clock::time_point now) const;
  // The best of PrefixOf over the ranks of `instance_id`.
  uint32_t BestOfInstance(const ContextKey& context, std::string_view instance_id,
                          std::span<const BlockKey> keys, Clock::time_point now) const;
  // Every holder with a predicted prefix of `keys` in `context` (blocks > 0), by holder.
  std::vector<PredictedMatch> Matches(const ContextKey& context, std::span<const BlockKey> keys,
                                      Clock::time_point now) const;

  PredictedStats stats() const;

 private:
  struct HolderLess {
    using is_transparent = void;
    bool operator()(const HolderKey& a, const HolderKey& b) const {
      return std::tie(a.id, a.dp_rank) < std::tie(b.id, b.dp_rank);
    }
  };
  using Blocks = std::unordered_map<BlockKey, Clock::time_point>;  // key → expiry
  // One holder's predictions in one context; named by id in the expiry queue, so that an
  // erased bucket leaves no dangling reference there.
  struct Bucket {
    HolderKey holder;
    ContextKey context;
    Blocks blocks;
  };
  struct Expiry {
    Clock::time_point at;
    uint64_t bucket;
    BlockKey key;
  };
  using Contexts = std::unordered_map<ContextKey, uint64_t, ContextKeyHash>;  // → bucket id

  static uint32_t PrefixIn(const Blocks& blocks, std::span<const BlockKey> keys,
                           Clock::time_point now);
  // The bucket of `holder` in `context`, or null. mu_ held.
  const Blocks* FindLocked(const ContextKey& context, const HolderKey& holder) const;
  bool IsLiveLocked(const HolderKey& holder, Clock::time_point at) const;
  // Drops the entries expired at `now`, from the front of the queue (which is in order of
  // expiry while every prediction has one TTL; an entry with a shorter one waits for those
  // queued before it, unseen by reads meanwhile), at most kExpireBudget elements per call,
  // and event marks past the live window. mu_ held.
  void ExpireLocked(Clock::time_point now);
  // Drops the queue's elements of ends moved by renewals, once they are over half of it.
  // mu_ held.
  void CompactQueueLocked();
  // Drops bucket `id` and its place among its holder's contexts. mu_ held.
  void EraseBucketLocked(uint64_t id);
  // Drops every entry of `holder`, counting them in `replaced`. mu_ held.
  void EraseHolderLocked(const HolderKey& holder);

  const size_t max_entries_;
  mutable std::mutex mu_;
  std::map<HolderKey, Contexts, HolderLess> holders_;
  std::unordered_map<uint64_t, Bucket> buckets_;
  uint64_t next_bucket_ = 1;
  // One element per recorded or renewed entry; a renewed entry's older elements are
  // skipped when they reach the front.
  std::deque<Expiry> expiries_;
  // When each holder last sent a real event (kept for the live window).
  std::unordered_map<HolderKey, Clock::time_point, HolderKeyHash> events_;
  Clock::time_point next_event_sweep_{};
  PredictedStats stats_;
};

}  // namespace kvatlas
