#include "server/state/prediction_recorder.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace kvatlas::server {

PredictionRecorder::PredictionRecorder(PredictionOptions options, StateMachine* machine,
                                       Applier* applier, std::function<bool()> is_leader)
    : options_(options),
      machine_(machine),
      applier_(applier),
      is_leader_(std::move(is_leader)),
      task_(options.interval, [this]() -> PeriodicTask::Next {
        Flush();
        return options_.interval;
      }) {}

PredictionRecorder::~PredictionRecorder() { Stop(); }

bool PredictionRecorder::Enqueue(const ContextKey& context, const HolderKey& holder,
                                 std::vector<BlockKey> keys) {
  if (keys.empty()) return false;
  std::lock_guard lock(mu_);
  if (pending_blocks_ + keys.size() > options_.max_queued_blocks) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  pending_blocks_ += keys.size();
  pending_.push_back({context, holder, std::move(keys)});
  queued_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void PredictionRecorder::Flush() {
  std::vector<Pending> pending;
  {
    std::lock_guard lock(mu_);
    pending.swap(pending_);
    pending_blocks_ = 0;
  }
  if (pending.empty()) return;
  // One command per (holder, context): routes of one prefix to one instance repeat keys.
  std::map<std::tuple<std::string, uint32_t, std::string>, PredictCommand> merged;
  for (Pending& p : pending) {
    PredictCommand& c = merged[{p.holder.id, p.holder.dp_rank, p.context.ToString()}];
    if (c.hashes.empty()) {
      c.context = std::move(p.context);
      c.holder = std::move(p.holder);
    }
    c.hashes.insert(c.hashes.end(), p.keys.begin(), p.keys.end());
  }
  const uint64_t now_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  CommandBatch batch;
  for (auto& [key, c] : merged) {
    std::sort(c.hashes.begin(), c.hashes.end());
    c.hashes.erase(std::unique(c.hashes.begin(), c.hashes.end()), c.hashes.end());
    c.ttl_ms = options_.ttl_ms;
    c.accepted_at_ms = now_ms;
    batch.commands.emplace_back(std::move(c));
  }
  if (!is_leader_()) {
    for (const Command& command : batch.commands) {
      (void)machine_->PredictLocally(std::get<PredictCommand>(command));
      local_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  if (Status s = applier_->TrySubmitAsync(&batch,
                                          [this](const Result<Revision>& applied) {
                                            if (!applied.has_value())
                                              failed_.fetch_add(1, std::memory_order_relaxed);
                                          });
      !s.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  proposed_.fetch_add(1, std::memory_order_relaxed);
}

PredictionRecorderStats PredictionRecorder::stats() const {
  PredictionRecorderStats out;
  out.queued = queued_.load(std::memory_order_relaxed);
  out.dropped = dropped_.load(std::memory_order_relaxed);
  out.proposed = proposed_.load(std::memory_order_relaxed);
  out.failed = failed_.load(std::memory_order_relaxed);
  out.local = local_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace kvatlas::server
