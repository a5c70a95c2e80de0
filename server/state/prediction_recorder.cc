#include "server/state/prediction_recorder.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "common/internal/log.h"

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

namespace {

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// accepted_at_ms is the clock of the server that submits or records (docs/routing.md).
void Stamp(CommandBatch* batch) {
  const uint64_t now_ms = NowMs();
  for (Command& command : batch->commands)
    std::get<PredictCommand>(command).accepted_at_ms = now_ms;
}

}  // namespace

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
  CommandBatch batch;
  for (auto& [key, c] : merged) {
    std::sort(c.hashes.begin(), c.hashes.end());
    c.hashes.erase(std::unique(c.hashes.begin(), c.hashes.end()), c.hashes.end());
    c.ttl_ms = options_.ttl_ms;
    batch.commands.emplace_back(std::move(c));
  }
  if (!is_leader_()) {
    ForwardOrRecord(std::move(batch));
    return;
  }
  (void)Submit(std::move(batch));
}

Status PredictionRecorder::Submit(CommandBatch batch) {
  Stamp(&batch);
  if (Status s = applier_->TrySubmitAsync(&batch,
                                          [this](const Result<Revision>& applied) {
                                            if (!applied.has_value())
                                              failed_.fetch_add(1, std::memory_order_relaxed);
                                          });
      !s.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  proposed_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status PredictionRecorder::SubmitForwarded(CommandBatch batch) {
  if (!is_leader_()) {
    return Status(StatusCode::kNotLeader, "this server does not lead: it takes no predictions");
  }
  // The leader's TTL and clock are the ones recorded (docs/routing.md §Approximate mode).
  for (Command& command : batch.commands)
    std::get<PredictCommand>(command).ttl_ms = options_.ttl_ms;
  KVATLAS_RETURN_IF_ERROR(Submit(std::move(batch)));
  received_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void PredictionRecorder::RecordLocally(const CommandBatch& batch) {
  const uint64_t now_ms = NowMs();
  for (const Command& command : batch.commands) {
    PredictCommand c = std::get<PredictCommand>(command);
    c.accepted_at_ms = now_ms;
    (void)machine_->PredictLocally(c);
    local_.fetch_add(1, std::memory_order_relaxed);
  }
}

void PredictionRecorder::ForwardOrRecord(CommandBatch batch) {
  if (!forward_) {
    RecordLocally(batch);
    return;
  }
  // After a failed call the rest of the round is recorded here without trying: one round
  // waits for at most one failed call.
  bool failed = false;
  CommandBatch chunk;
  size_t chunk_keys = 0;
  const auto send = [&] {
    if (chunk.commands.empty()) return;
    if (!failed) {
      if (const Status s = forward_(chunk); s.ok()) {
        forwarded_.fetch_add(1, std::memory_order_relaxed);
        if (!last_forward_error_.empty()) {
          LogInfo("predictions are forwarded to the leader again");
          last_forward_error_.clear();
        }
      } else {
        failed = true;
        forward_failed_.fetch_add(1, std::memory_order_relaxed);
        if (s.ToString() != last_forward_error_) {
          last_forward_error_ = s.ToString();
          LogInfo("forwarding predictions to the leader: " + last_forward_error_ +
                  " (recorded on this server only; retried next round)");
        }
      }
    }
    if (failed) RecordLocally(chunk);
    chunk.commands.clear();
    chunk_keys = 0;
  };
  for (const Command& command : batch.commands) {
    const PredictCommand& c = std::get<PredictCommand>(command);
    // A command with more keys than one call takes is split over calls.
    for (size_t at = 0; at < c.hashes.size();) {
      if (chunk.commands.size() == kMaxForwardedPredictions ||
          chunk_keys == kMaxForwardedPredictionKeys) {
        send();
      }
      const size_t n = std::min(c.hashes.size() - at, kMaxForwardedPredictionKeys - chunk_keys);
      const auto first = c.hashes.begin() + static_cast<std::ptrdiff_t>(at);
      chunk.commands.emplace_back(PredictCommand{c.context,
                                                 c.holder,
                                                 c.ttl_ms,
                                                 c.accepted_at_ms,
                                                 {first, first + static_cast<std::ptrdiff_t>(n)}});
      chunk_keys += n;
      at += n;
    }
  }
  send();
}

PredictionRecorderStats PredictionRecorder::stats() const {
  PredictionRecorderStats out;
  out.queued = queued_.load(std::memory_order_relaxed);
  out.dropped = dropped_.load(std::memory_order_relaxed);
  out.proposed = proposed_.load(std::memory_order_relaxed);
  out.failed = failed_.load(std::memory_order_relaxed);
  out.local = local_.load(std::memory_order_relaxed);
  out.forwarded = forwarded_.load(std::memory_order_relaxed);
  out.forward_failed = forward_failed_.load(std::memory_order_relaxed);
  out.received = received_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace kvatlas::server
