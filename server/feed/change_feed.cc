#include "server/feed/change_feed.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

namespace kvatlas::server {
namespace {

// Heap bytes of a string beyond its inline size (0 while it fits the small buffer).
size_t HeapBytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}
size_t HeapBytes(const ContextKey& c) {
  return HeapBytes(c.tenant) + HeapBytes(c.model) + HeapBytes(c.lora_name) + HeapBytes(c.salt);
}
size_t HeapBytes(const HolderKey& h) { return HeapBytes(h.id); }

// The record a mutation contributes to, or nullopt for mutations the feed does not
// report (blocks, registry records, a refcount change that leaves the copy in place). A
// repeated store of a copy that has a location is reported again (with the location,
// which that store may have changed), so that a follower's copy of the location is current.
std::optional<FeedOp> OpOf(const Mutation& m) {
  if (m.kind == MutationKind::kPutEntry) {
    if (m.cause == MutationCause::kStored && (m.refcount == 1 || !m.location.empty())) {
      return FeedOp::kStored;
    }
    return std::nullopt;
  }
  if (m.kind != MutationKind::kDeleteEntry) return std::nullopt;
  switch (m.cause) {
    case MutationCause::kCleared:
      return FeedOp::kCleared;
    case MutationCause::kEvicted:
      return FeedOp::kEvicted;
    case MutationCause::kExpired:
      return FeedOp::kExpired;
    case MutationCause::kStored:
    case MutationCause::kRemoved:
      break;
  }
  return FeedOp::kRemoved;
}

}  // namespace

// --- Watcher -----------------------------------------------------------------------------

Watcher::Watcher(ChangeFeed* feed, FeedFilter filter, Revision from, size_t max_chunks)
    : feed_(feed), filter_(std::move(filter)), max_chunks_(max_chunks), delivered_(from) {}

Watcher::~Watcher() { feed_->Unsubscribe(this); }

Revision Watcher::ResumeFrom() const {
  std::lock_guard lock(mu_);
  return delivered_;
}

Status Watcher::EndStatus() const {
  if (cut_) {
    return Status(StatusCode::kWatchCut,
                  "the watcher fell behind (more than " + std::to_string(max_chunks_) +
                      " applied groups queued) and was cut; watch again from revision " +
                      std::to_string(delivered_));
  }
  return Status::Unavailable("the change feed is shutting down");
}

void Watcher::Signal() {
  cv_.notify_all();
  if (notify_armed_ && notify_) {
    notify_armed_ = false;
    notify_();
  }
}

void Watcher::SetNotify(std::function<void()> notify) {
  std::lock_guard lock(mu_);
  notify_ = std::move(notify);
  notify_armed_ = true;
  if (!queue_.empty() || cut_ || closed_) Signal();
}

Result<Watcher::Take> Watcher::TryTake(size_t max_keys) {
  std::unique_lock lock(mu_);
  // With nothing queued (and not cut), every record up to the feed's published revision
  // has been handed out: revisions without records count as delivered too.
  const auto drained = [this] {
    delivered_ = std::max(delivered_, feed_->published_.load(std::memory_order_acquire));
    notify_armed_ = true;
  };
  if (queue_.empty()) {
    // As in Next: what was queued before a cut is delivered first.
    if (cut_ || closed_) return EndStatus();
    drained();
    return Take{{}, delivered_, false};
  }
  std::vector<std::shared_ptr<const FeedChunk>> chunks;
  size_t keys = 0;
  while (!queue_.empty() && (chunks.empty() || keys + queue_.front()->keys <= max_keys)) {
    keys += queue_.front()->keys;
    chunks.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  delivered_ = chunks.back()->revision;
  Take take;
  take.more = !queue_.empty() || cut_ || closed_;
  if (!take.more) drained();
  take.through = delivered_;
  lock.unlock();
  for (const auto& chunk : chunks) {
    for (const FeedRecord& record : chunk->records) {
      if (filter_.Matches(record)) take.records.push_back(record);
    }
  }
  feed_->CountDelivery(take.records.size(), chunks.back()->published);
  return take;
}

Result<std::vector<FeedRecord>> Watcher::Next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !queue_.empty() || cut_ || closed_; });
  // What was queued before a cut is still delivered: the cut only means nothing after it
  // will be, so the resume point stays exact.
  if (queue_.empty()) {
    if (cut_ || closed_) return EndStatus();
    return std::vector<FeedRecord>();
  }
  std::vector<std::shared_ptr<const FeedChunk>> chunks(queue_.begin(), queue_.end());
  queue_.clear();
  delivered_ = chunks.back()->revision;
  lock.unlock();
  std::vector<FeedRecord> out;
  for (const auto& chunk : chunks) {
    for (const FeedRecord& record : chunk->records) {
      if (filter_.Matches(record)) out.push_back(record);
    }
  }
  feed_->CountDelivery(out.size(), chunks.back()->published);
  return out;
}

// --- ChangeFeed --------------------------------------------------------------------------

ChangeFeed::ChangeFeed(ChangeFeedOptions options) : options_(options) {}

ChangeFeed::~ChangeFeed() {
  std::lock_guard lock(mu_);
  for (Watcher* w : watchers_) {
    std::lock_guard wl(w->mu_);
    w->closed_ = true;
    w->Signal();
  }
}

void ChangeFeed::OnReset(Revision revision, const Index& index) {
  contexts_.clear();
  holders_.clear();
  for (const ContextInfo& c : index.Contexts()) contexts_.emplace(c.id, c.context);
  for (const HolderInfo& h : index.Holders()) holders_.emplace(h.id, h.holder);
  std::lock_guard lock(mu_);
  // The state was replaced wholesale (boot, or a snapshot installed on a lagging follower):
  // there are no records for what happened before `revision`, so the window restarts and
  // watchers that expected continuity are cut.
  window_.clear();
  window_keys_ = 0;
  window_bytes_ = 0;
  revision_ = revision;
  published_.store(revision, std::memory_order_release);
  compacted_through_ = revision;
  for (Watcher* w : watchers_) {
    std::lock_guard wl(w->mu_);
    if (!w->cut_) ++cuts_;
    w->cut_ = true;
    w->Signal();
  }
}

void ChangeFeed::OnApplied(Revision revision, const MutationList& mutations) {
  auto chunk = std::make_shared<FeedChunk>();
  chunk->revision = revision;
  FeedRecord* open = nullptr;                  // the record consecutive mutations extend
  uint32_t open_context = 0, open_holder = 0;  // its interned ids: no string compares
  for (const Mutation& m : mutations) {
    if (m.kind == MutationKind::kPutContext && m.context_key) {
      contexts_[m.context] = *m.context_key;
      continue;
    }
    if (m.kind == MutationKind::kPutHolder && m.holder_key) {
      holders_[m.holder] = *m.holder_key;
      continue;
    }
    if (m.kind == MutationKind::kPredicted && m.predicted) {
      // A record of its own, in apply order (a later event of the holder in this group
      // drops it on a replica as on the server), for the watchers that ask for predictions.
      chunk->records.push_back(*m.predicted);
      chunk->records.back().revision = revision;
      chunk->keys += m.predicted->keys.size();
      open = nullptr;
      continue;
    }
    const std::optional<FeedOp> op = OpOf(m);
    if (!op) continue;
    if (open == nullptr || open->op != *op || open->tier != m.tier || open_context != m.context ||
        open_holder != m.holder) {
      const auto context = contexts_.find(m.context);
      const auto holder = holders_.find(m.holder);
      if (context == contexts_.end() || holder == holders_.end()) continue;  // cannot happen
      chunk->records.push_back(
          FeedRecord{revision, *op, context->second, holder->second, m.tier, {}, {}, 0});
      open = &chunk->records.back();
      open_context = m.context;
      open_holder = m.holder;
    }
    if (*op == FeedOp::kStored && (!m.location.empty() || !open->locations.empty())) {
      open->locations.resize(open->keys.size());  // earlier keys had no location
      open->locations.push_back(m.location);
    }
    open->keys.push_back(m.key);
    ++chunk->keys;
  }
  chunk->bytes = sizeof(FeedChunk) + chunk->records.capacity() * sizeof(FeedRecord);
  for (FeedRecord& r : chunk->records) {
    if (!r.locations.empty()) r.locations.resize(r.keys.size());
    chunk->bytes += r.keys.capacity() * sizeof(BlockKey) +
                    r.locations.capacity() * sizeof(std::string) + HeapBytes(r.context) +
                    HeapBytes(r.holder);
    for (const std::string& location : r.locations) chunk->bytes += HeapBytes(location);
  }
  chunk->published = std::chrono::steady_clock::now();

  std::lock_guard lock(mu_);
  revision_ = revision;
  if (chunk->records.empty()) {
    // Nothing to report, but the revision advances: idle event-driven watchers are told,
    // so that their clients see it reached (a take's `through`). No queue grows.
    published_.store(revision, std::memory_order_release);
    for (Watcher* w : watchers_) {
      std::lock_guard wl(w->mu_);
      if (w->notify_armed_ && !w->cut_ && !w->closed_) w->Signal();
    }
    return;
  }
  records_published_ += chunk->records.size();
  window_keys_ += chunk->keys;
  window_bytes_ += chunk->bytes;
  window_.push_back(chunk);
  while ((window_keys_ > options_.window_keys || window_bytes_ > options_.window_bytes) &&
         window_.size() > 1) {
    window_keys_ -= window_.front()->keys;
    window_bytes_ -= window_.front()->bytes;
    compacted_through_ = window_.front()->revision;
    window_.pop_front();
  }
  for (Watcher* w : watchers_) {
    std::lock_guard wl(w->mu_);
    if (w->cut_ || w->closed_) continue;
    if (w->queue_.size() >= w->max_chunks_) {
      w->cut_ = true;
      ++cuts_;
    } else {
      w->queue_.push_back(chunk);
    }
    w->Signal();
  }
  // After every queue has the chunk: a watcher that reads it drained has all of it.
  published_.store(revision, std::memory_order_release);
}

Result<std::unique_ptr<Watcher>> ChangeFeed::Subscribe(std::optional<Revision> from,
                                                       FeedFilter filter) {
  std::lock_guard lock(mu_);
  if (watchers_.size() >= options_.max_watchers) {
    return Status::ResourceExhausted("too many watchers (" + std::to_string(watchers_.size()) +
                                     "); the limit is " + std::to_string(options_.max_watchers));
  }
  const Revision start = from.value_or(revision_);
  if (start > revision_) {
    return Status::InvalidArgument("from: revision " + std::to_string(start) +
                                   " is in the future; the current revision is " +
                                   std::to_string(revision_));
  }
  if (start < compacted_through_) {
    return Status(StatusCode::kCompacted,
                  "from: revision " + std::to_string(start) +
                      " is compacted; the oldest revision to watch from is " +
                      std::to_string(compacted_through_) + ", the current revision is " +
                      std::to_string(revision_) + " (list with GET /v1/snapshot, then watch)");
  }
  // The backlog the watcher starts with may exceed its queue bound; it is cut only if it
  // keeps falling behind after that.
  std::unique_ptr<Watcher> w(
      new Watcher(this, std::move(filter), start, options_.watcher_queue_chunks));
  const auto first = std::upper_bound(
      window_.begin(), window_.end(), start,
      [](Revision r, const std::shared_ptr<const FeedChunk>& c) { return r < c->revision; });
  w->queue_.assign(first, window_.end());
  watchers_.push_back(w.get());
  return w;
}

void ChangeFeed::Unsubscribe(Watcher* watcher) {
  std::lock_guard lock(mu_);
  std::erase(watchers_, watcher);
}

void ChangeFeed::CountDelivery(size_t records, std::chrono::steady_clock::time_point published) {
  const double lag =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - published).count();
  std::lock_guard lock(mu_);
  records_sent_ += records;
  last_lag_seconds_ = lag;
}

FeedStats ChangeFeed::Stats() const {
  std::lock_guard lock(mu_);
  FeedStats s;
  s.revision = revision_;
  s.compacted_through = compacted_through_;
  s.window_chunks = window_.size();
  s.window_keys = window_keys_;
  s.window_bytes = window_bytes_;
  s.watchers = watchers_.size();
  s.records_published = records_published_;
  s.records_sent = records_sent_;
  s.cuts = cuts_;
  s.last_lag_seconds = last_lag_seconds_;
  return s;
}

std::string RenderFeedMetrics(const FeedStats& s) {
  std::string out;
  const auto metric = [&out](const char* name, const char* type, const char* help, double value) {
    char number[32];
    std::snprintf(number, sizeof(number), "%.17g", value);
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + number + "\n";
  };
  metric("kvatlas_feed_revision", "gauge", "Last revision published on the change feed.",
         static_cast<double>(s.revision));
  metric("kvatlas_feed_compacted_revision", "gauge",
         "Records at or below this revision are no longer in the feed's window.",
         static_cast<double>(s.compacted_through));
  metric("kvatlas_feed_window_keys", "gauge", "Block keys held in the feed's window.",
         static_cast<double>(s.window_keys));
  metric("kvatlas_feed_window_bytes", "gauge",
         "Memory of the feed's window, about (bounded by feed_window_bytes).",
         static_cast<double>(s.window_bytes));
  metric("kvatlas_feed_watchers", "gauge", "Open watchers.", static_cast<double>(s.watchers));
  metric("kvatlas_feed_records_published_total", "counter", "Records published.",
         static_cast<double>(s.records_published));
  metric("kvatlas_feed_records_sent_total", "counter",
         "Records handed to watchers (after their filters).", static_cast<double>(s.records_sent));
  metric("kvatlas_feed_watcher_cuts_total", "counter", "Watchers cut for falling behind.",
         static_cast<double>(s.cuts));
  metric("kvatlas_feed_lag_seconds", "gauge",
         "Publish-to-watcher delay of the most recent delivery.", s.last_lag_seconds);
  return out;
}

}  // namespace kvatlas::server
