#include "common/internal/predicted_table.h"

#include <algorithm>

namespace kvatlas {
namespace {

// Event marks are dropped once past the live window, at most once a second.
constexpr auto kEventSweepEvery = std::chrono::seconds(1);
// Queue elements one call pops at most (~7 ms of the applying thread), so that a table
// whose predictions all ended together (an idle TTL) is freed over a few recordings
// instead of stalling one. Entries past their end are unseen by reads meanwhile.
constexpr size_t kExpireBudget = 16'384;

}  // namespace

size_t PredictedTable::Record(const ContextKey& context, const HolderKey& holder,
                              std::span<const BlockKey> keys, Clock::time_point accepted_at,
                              Clock::time_point expires_at, Clock::time_point now,
                              std::vector<BlockKey>* recorded_keys) {
  if (keys.empty() || expires_at <= now) return 0;
  std::lock_guard lock(mu_);
  ExpireLocked(now);
  // The holder's stream is live: its events say what it holds, better than a guess.
  if (IsLiveLocked(holder, accepted_at)) {
    stats_.replaced += keys.size();
    return 0;
  }
  auto [contexts, new_holder] = holders_.try_emplace(holder);
  auto [slot, new_context] = contexts->second.try_emplace(context, next_bucket_);
  if (new_context) buckets_.emplace(next_bucket_++, Bucket{holder, context, {}});
  const uint64_t id = slot->second;
  Blocks& blocks = buckets_.at(id).blocks;
  size_t recorded = 0;
  for (const BlockKey key : keys) {
    const auto [it, added] = blocks.try_emplace(key, expires_at);
    if (!added) {
      if (it->second >= expires_at) continue;  // already predicted as long
      it->second = expires_at;
    } else if (stats_.entries >= max_entries_) {
      blocks.erase(it);
      stats_.dropped += 1;
      continue;
    } else {
      stats_.entries += 1;
    }
    expiries_.push_back({expires_at, id, key});
    recorded += 1;
    if (recorded_keys != nullptr) recorded_keys->push_back(key);
  }
  stats_.recorded += recorded;
  if (blocks.empty()) EraseBucketLocked(id);
  if (expiries_.size() > 2 * stats_.entries + 1024) CompactQueueLocked();
  return recorded;
}

void PredictedTable::NoteEvent(const HolderKey& holder, Clock::time_point now) {
  std::lock_guard lock(mu_);
  events_[holder] = now;
  EraseHolderLocked(holder);
}

void PredictedTable::Forget(const HolderKey& holder) {
  std::lock_guard lock(mu_);
  EraseHolderLocked(holder);
}

void PredictedTable::Clear() {
  std::lock_guard lock(mu_);
  holders_.clear();
  buckets_.clear();
  expiries_.clear();
  events_.clear();
  stats_.entries = 0;
}

bool PredictedTable::IsLive(const HolderKey& holder, Clock::time_point at) const {
  std::lock_guard lock(mu_);
  return IsLiveLocked(holder, at);
}

bool PredictedTable::IsLiveLocked(const HolderKey& holder, Clock::time_point at) const {
  const auto event = events_.find(holder);
  return event != events_.end() && event->second + kPredictionLiveWindow > at;
}

void PredictedTable::EraseBucketLocked(uint64_t id) {
  const auto bucket = buckets_.find(id);
  if (bucket == buckets_.end()) return;
  const auto h = holders_.find(bucket->second.holder);
  if (h != holders_.end()) {
    h->second.erase(bucket->second.context);
    if (h->second.empty()) holders_.erase(h);
  }
  buckets_.erase(bucket);
}

void PredictedTable::EraseHolderLocked(const HolderKey& holder) {
  const auto it = holders_.find(holder);
  if (it == holders_.end()) return;
  for (const auto& [context, id] : it->second) {
    const auto bucket = buckets_.find(id);
    stats_.entries -= bucket->second.blocks.size();
    stats_.replaced += bucket->second.blocks.size();
    buckets_.erase(bucket);
  }
  holders_.erase(it);
}

void PredictedTable::ExpireLocked(Clock::time_point now) {
  for (size_t popped = 0;
       popped < kExpireBudget && !expiries_.empty() && expiries_.front().at <= now; ++popped) {
    const Expiry e = expiries_.front();
    expiries_.pop_front();
    const auto bucket = buckets_.find(e.bucket);
    if (bucket == buckets_.end()) continue;  // replaced by events, or already expired
    Blocks& blocks = bucket->second.blocks;
    const auto it = blocks.find(e.key);
    if (it == blocks.end() || it->second > now) continue;  // renewed: a later element ends it
    blocks.erase(it);
    stats_.entries -= 1;
    stats_.expired += 1;
    if (blocks.empty()) EraseBucketLocked(e.bucket);
  }
  if (now < next_event_sweep_) return;
  next_event_sweep_ = now + kEventSweepEvery;
  std::erase_if(events_,
                [now](const auto& entry) { return entry.second + kPredictionLiveWindow <= now; });
}

void PredictedTable::CompactQueueLocked() {
  // Keeps each entry's element of its current end, in queue order: O(queue), amortized over
  // the renewals that made the queue twice the entries.
  std::erase_if(expiries_, [this](const Expiry& e) {
    const auto bucket = buckets_.find(e.bucket);
    if (bucket == buckets_.end()) return true;
    const auto it = bucket->second.blocks.find(e.key);
    return it == bucket->second.blocks.end() || it->second != e.at;
  });
}

uint32_t PredictedTable::PrefixIn(const Blocks& blocks, std::span<const BlockKey> keys,
                                  Clock::time_point now) {
  uint32_t n = 0;
  for (const BlockKey key : keys) {
    const auto it = blocks.find(key);
    if (it == blocks.end() || it->second <= now) break;
    ++n;
  }
  return n;
}

const PredictedTable::Blocks* PredictedTable::FindLocked(const ContextKey& context,
                                                         const HolderKey& holder) const {
  const auto h = holders_.find(holder);
  if (h == holders_.end()) return nullptr;
  const auto c = h->second.find(context);
  return c == h->second.end() ? nullptr : &buckets_.at(c->second).blocks;
}

uint32_t PredictedTable::PrefixOf(const ContextKey& context, const HolderKey& holder,
                                  std::span<const BlockKey> keys, Clock::time_point now) const {
  std::lock_guard lock(mu_);
  const Blocks* blocks = FindLocked(context, holder);
  return blocks == nullptr ? 0 : PrefixIn(*blocks, keys, now);
}

uint32_t PredictedTable::BestOfInstance(const ContextKey& context, std::string_view instance_id,
                                        std::span<const BlockKey> keys,
                                        Clock::time_point now) const {
  std::lock_guard lock(mu_);
  uint32_t best = 0;
  for (auto h = holders_.lower_bound(HolderKey{std::string(instance_id), 0});
       h != holders_.end() && h->first.id == instance_id; ++h) {
    if (const auto c = h->second.find(context); c != h->second.end()) {
      best = std::max(best, PrefixIn(buckets_.at(c->second).blocks, keys, now));
    }
  }
  return best;
}

std::vector<PredictedMatch> PredictedTable::Matches(const ContextKey& context,
                                                    std::span<const BlockKey> keys,
                                                    Clock::time_point now) const {
  std::lock_guard lock(mu_);
  std::vector<PredictedMatch> out;
  for (const auto& [holder, contexts] : holders_) {
    const auto c = contexts.find(context);
    if (c == contexts.end()) continue;
    if (const uint32_t blocks = PrefixIn(buckets_.at(c->second).blocks, keys, now); blocks > 0) {
      out.push_back({holder, blocks});
    }
  }
  return out;
}

PredictedStats PredictedTable::stats() const {
  std::lock_guard lock(mu_);
  PredictedStats out = stats_;
  out.max_entries = max_entries_;
  out.queued = expiries_.size();
  return out;
}

}  // namespace kvatlas
