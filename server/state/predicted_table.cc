#include "server/state/predicted_table.h"

#include <algorithm>

namespace kvatlas::server {
namespace {

constexpr auto kSweepEvery = std::chrono::seconds(1);
constexpr auto kLongestTtl = std::chrono::milliseconds(kMaxPredictedTtlMs);

}  // namespace

size_t PredictedTable::Record(const ContextKey& context, const HolderKey& holder,
                              std::span<const BlockKey> keys, Clock::time_point accepted_at,
                              Clock::time_point expires_at, Clock::time_point now) {
  if (keys.empty() || expires_at <= now) return 0;
  std::lock_guard lock(mu_);
  SweepLocked(now, false);
  // The holder's stream is up: its events say what it holds, better than a guess.
  if (const auto event = events_.find(holder);
      event != events_.end() && event->second + (expires_at - accepted_at) > accepted_at) {
    stats_.replaced += keys.size();
    return 0;
  }
  if (stats_.entries + keys.size() > max_entries_) SweepLocked(now, true);
  Blocks& blocks = holders_[holder][context];
  size_t recorded = 0;
  for (const BlockKey key : keys) {
    const auto [it, added] = blocks.try_emplace(key, expires_at);
    if (!added) {
      it->second = std::max(it->second, expires_at);
    } else if (stats_.entries >= max_entries_) {
      blocks.erase(it);
      stats_.dropped += 1;
      continue;
    } else {
      stats_.entries += 1;
    }
    recorded += 1;
  }
  stats_.recorded += recorded;
  if (blocks.empty()) {
    auto h = holders_.find(holder);
    h->second.erase(context);
    if (h->second.empty()) holders_.erase(h);
  }
  return recorded;
}

void PredictedTable::NoteEvent(const HolderKey& holder, Clock::time_point now) {
  std::lock_guard lock(mu_);
  events_[holder] = now;
  EraseHolderLocked(holder);
}

void PredictedTable::Clear() {
  std::lock_guard lock(mu_);
  holders_.clear();
  events_.clear();
  stats_.entries = 0;
}

void PredictedTable::EraseHolderLocked(const HolderKey& holder) {
  const auto it = holders_.find(holder);
  if (it == holders_.end()) return;
  for (const auto& [context, blocks] : it->second) {
    stats_.entries -= blocks.size();
    stats_.replaced += blocks.size();
  }
  holders_.erase(it);
}

void PredictedTable::SweepLocked(Clock::time_point now, bool force) {
  if (!force && now < next_sweep_) return;
  next_sweep_ = now + kSweepEvery;
  for (auto h = holders_.begin(); h != holders_.end();) {
    for (auto c = h->second.begin(); c != h->second.end();) {
      const size_t expired =
          std::erase_if(c->second, [now](const auto& entry) { return entry.second <= now; });
      stats_.entries -= expired;
      stats_.expired += expired;
      c = c->second.empty() ? h->second.erase(c) : std::next(c);
    }
    h = h->second.empty() ? holders_.erase(h) : std::next(h);
  }
  std::erase_if(events_, [now](const auto& entry) { return entry.second + kLongestTtl <= now; });
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

uint32_t PredictedTable::PrefixOf(const ContextKey& context, const HolderKey& holder,
                                  std::span<const BlockKey> keys, Clock::time_point now) const {
  std::lock_guard lock(mu_);
  const auto h = holders_.find(holder);
  if (h == holders_.end()) return 0;
  const auto c = h->second.find(context);
  return c == h->second.end() ? 0 : PrefixIn(c->second, keys, now);
}

uint32_t PredictedTable::BestOfInstance(const ContextKey& context, std::string_view instance_id,
                                        std::span<const BlockKey> keys,
                                        Clock::time_point now) const {
  std::lock_guard lock(mu_);
  uint32_t best = 0;
  for (auto h = holders_.lower_bound(HolderKey{std::string(instance_id), 0});
       h != holders_.end() && h->first.id == instance_id; ++h) {
    if (const auto c = h->second.find(context); c != h->second.end()) {
      best = std::max(best, PrefixIn(c->second, keys, now));
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
    if (const uint32_t blocks = PrefixIn(c->second, keys, now); blocks > 0) {
      out.push_back({holder, blocks});
    }
  }
  return out;
}

PredictedStats PredictedTable::stats() const {
  std::lock_guard lock(mu_);
  PredictedStats out = stats_;
  out.max_entries = max_entries_;
  return out;
}

}  // namespace kvatlas::server
