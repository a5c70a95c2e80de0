#include "server/state/applier.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/internal/thread_name.h"
#include "server/model/command_codec.h"

namespace kvatlas::server {
namespace {

// The context `command` would create: a store's, when `index` has never held it; else null.
const ContextKey* NewContextOf(const Index& index, const Command& command) {
  const auto* store = std::get_if<StoreCommand>(&command);
  return store != nullptr && !index.HasContext(store->context) ? &store->context : nullptr;
}

}  // namespace

Applier::Applier(StateMachine* machine, ApplierOptions options, ReplicatedLog* log)
    : machine_(machine), options_(options), log_(log), thread_([this] {
        SetCurrentThreadName("applier");
        log_ ? RunReplicated() : Run();
      }) {}

Applier::~Applier() { Stop(); }

std::future<Result<Revision>> Applier::Submit(CommandBatch batch) {
  auto done = std::make_shared<std::promise<Result<Revision>>>();
  std::future<Result<Revision>> result = done->get_future();
  SubmitAsync(std::move(batch), [done](Result<Revision> r) { done->set_value(std::move(r)); });
  return result;
}

void Applier::SubmitAsync(CommandBatch batch, Callback done) {
  Status refused = TrySubmitAsync(&batch, done);
  if (!refused.ok()) done(std::move(refused));
}

Status Applier::TrySubmitAsync(CommandBatch* batch, Callback done) {
  // Checked before taking mu_: the index read takes the state machine's lock.
  if (refusing_new_contexts_.load(std::memory_order_acquire)) {
    const std::string refusing = new_contexts_refused();
    std::optional<ContextKey> fresh;
    if (!refusing.empty() && (fresh = FirstNewContext(*batch))) {
      return Status::ResourceExhausted("context " + fresh->ToString() +
                                       " is new and this server's group takes no new "
                                       "contexts: " +
                                       refusing);
    }
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_ || failed_ || machine_->failed()) {
      return Status::Unavailable(!stopping_
                                     ? "the server stopped taking writes after a storage failure"
                                     : "the server is shutting down");
    }
    // An empty batch is a linearizable read's barrier, not a write: reads go on.
    if (!refused_reason_.empty() && !batch->commands.empty()) {
      return Status::ResourceExhausted(refused_reason_);
    }
    if (queue_.size() >= options_.max_queue) {
      return Status::ResourceExhausted("write queue is full (" +
                                       std::to_string(options_.max_queue) +
                                       " batches pending); retry later");
    }
    queue_.push_back(Pending{std::move(*batch), std::move(done)});
  }
  cv_.notify_one();
  return Status::Ok();
}

void Applier::SetWritesRefused(std::string reason) {
  std::lock_guard lock(mu_);
  refused_reason_ = std::move(reason);
}

std::string Applier::writes_refused() const {
  std::lock_guard lock(mu_);
  return refused_reason_;
}

void Applier::SetNewContextsRefused(std::string reason) {
  std::lock_guard lock(mu_);
  refusing_new_contexts_.store(!reason.empty(), std::memory_order_release);
  new_contexts_refused_ = std::move(reason);
}

std::string Applier::new_contexts_refused() const {
  std::lock_guard lock(mu_);
  return new_contexts_refused_;
}

std::optional<ContextKey> Applier::FirstNewContext(const CommandBatch& batch) const {
  return machine_->Read([&](const Index& index, Revision) -> std::optional<ContextKey> {
    for (const Command& command : batch.commands) {
      const ContextKey* fresh = NewContextOf(index, command);
      if (fresh != nullptr && !(placed_here_ && placed_here_(*fresh))) return *fresh;
    }
    return std::nullopt;
  });
}

size_t Applier::DropNewContextStores(CommandBatch* batch) {
  if (!refusing_new_contexts_.load(std::memory_order_acquire)) return 0;
  return machine_->Read([&](const Index& index, Revision) {
    return std::erase_if(batch->commands, [&](const Command& command) {
      const ContextKey* fresh = NewContextOf(index, command);
      return fresh != nullptr && !(placed_here_ && placed_here_(*fresh));
    });
  });
}

void Applier::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Applier::failed() const {
  if (machine_->failed()) return true;
  std::lock_guard lock(mu_);
  return failed_;
}

size_t Applier::queue_depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void Applier::Run() {
  std::vector<Pending> group;
  std::vector<const CommandBatch*> batches;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has been applied
      while (!queue_.empty() && group.size() < options_.max_group_batches) {
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    batches.clear();
    for (const Pending& p : group) batches.push_back(&p.batch);
    Result<Revision> last = failed() ? Result<Revision>(Status::Unavailable("storage failed"))
                                     : machine_->Apply(batches);
    if (!last.has_value()) {
      std::lock_guard lock(mu_);
      failed_ = true;
    }
    const Revision first = last.has_value() ? *last - group.size() + 1 : 0;
    for (size_t i = 0; i < group.size(); ++i) {
      if (last.has_value()) {
        group[i].done(first + i);
      } else {
        group[i].done(last.error());
      }
    }
    group.clear();
  }
}

void Applier::RunReplicated() {
  for (;;) {
    std::vector<Pending> group;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return (stopping_ && queue_.empty()) ||
               (!queue_.empty() && in_flight_ < options_.max_in_flight_groups);
      });
      // Stopping with nothing queued: proposals in flight complete on the log's thread.
      if (queue_.empty()) return;
      while (!queue_.empty() && group.size() < options_.max_group_batches) {
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      ++in_flight_;
    }
    Propose(std::move(group));
  }
}

void Applier::Propose(std::vector<Pending> group) {
  std::vector<const CommandBatch*> batches;
  batches.reserve(group.size());
  for (const Pending& p : group) batches.push_back(&p.batch);
  std::string entry = EncodeLogEntry(batches);
  auto shared = std::make_shared<std::vector<Pending>>(std::move(group));
  // Runs on the log's thread once the entry is applied there (or failed).
  auto done = [this, shared](Result<uint64_t> index) {
    for (Pending& p : *shared) {
      if (index.has_value()) {
        p.done(static_cast<Revision>(*index));
      } else {
        p.done(index.error());
      }
    }
    {
      std::lock_guard lock(mu_);
      --in_flight_;
    }
    cv_.notify_all();
  };
  for (;;) {
    Status s = log_->Propose(&entry, done);
    if (s.ok()) return;
    bool stopping = false;
    {
      std::lock_guard lock(mu_);
      stopping = stopping_;
    }
    if (s.code() != StatusCode::kResourceExhausted || stopping) {
      done(s);
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace kvatlas::server
