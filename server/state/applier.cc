#include "server/state/applier.h"

#include <vector>

namespace kvatlas::server {

Applier::Applier(StateMachine* machine, ApplierOptions options)
    : machine_(machine), options_(options), thread_([this] { Run(); }) {}

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
  {
    std::lock_guard lock(mu_);
    if (stopping_ || failed_) {
      return Status::Unavailable(failed_
                                     ? "the server stopped taking writes after a storage failure"
                                     : "the server is shutting down");
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

}  // namespace kvatlas::server
