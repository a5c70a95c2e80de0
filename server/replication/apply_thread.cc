#include "server/replication/apply_thread.h"

#include <chrono>
#include <string_view>

#include "common/internal/log.h"
#include "common/internal/thread_name.h"

namespace kvatlas::server {

ApplyThread::ApplyThread(LogStateMachine* machine, size_t max_queued)
    : machine_(machine), max_queued_(max_queued == 0 ? 1 : max_queued) {
  thread_ = std::thread([this] {
    SetCurrentThreadName("raft-apply");
    Run();
  });
}

ApplyThread::~ApplyThread() { Stop(); }

void ApplyThread::Enqueue(uint64_t index, std::string entry) {
  {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [this] { return queue_.size() < max_queued_; });
    queue_.push_back(Entry{index, std::move(entry)});
  }
  work_cv_.notify_one();
}

Status ApplyCommittedEntry(LogStateMachine* machine, uint64_t index, std::string_view entry,
                           uint64_t* took_ms) {
  const auto start = std::chrono::steady_clock::now();
  Status s = machine->ApplyEntry(index, entry);
  *took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - start)
                 .count();
  if (!s.ok()) LogError("applying log entry " + std::to_string(index) + ": " + s.ToString());
  return s;
}

Status NotAppliedHere(uint64_t index, bool failed) {
  return Status::Unavailable("log entry " + std::to_string(index) +
                             " was committed but not applied here (" +
                             (failed ? "the state machine failed" : "stopping") + ")");
}

void ApplyThread::WhenApplied(uint64_t index, std::function<void(Status)> done) {
  Status outcome;
  {
    std::lock_guard lock(mu_);
    if (index > applied_.load(std::memory_order_relaxed)) {
      if (!Finished()) {
        waiters_.emplace(index, std::move(done));
        return;
      }
      outcome = NotAppliedHere(index, failed());
    }
  }
  done(outcome);
}

bool ApplyThread::Finished() const {
  return failed() || exited_ || (stopping_ && queue_.empty() && !applying_);
}

uint64_t ApplyThread::AppliedIndexOr(uint64_t if_idle) {
  std::lock_guard lock(mu_);
  return queue_.empty() && !applying_ ? if_idle : applied_.load(std::memory_order_relaxed);
}

void ApplyThread::Drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !applying_; });
}

void ApplyThread::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Waiters for entries never handed over (raft stopped first).
  Ready ready;
  {
    std::lock_guard lock(mu_);
    CollectWaiters(&ready);
  }
  for (auto& [done, status] : ready) done(status);
}

void ApplyThread::CollectWaiters(Ready* ready) {
  const auto end = waiters_.upper_bound(applied_.load(std::memory_order_relaxed));
  for (auto it = waiters_.begin(); it != end; ++it) {
    ready->emplace_back(std::move(it->second), Status::Ok());
  }
  waiters_.erase(waiters_.begin(), end);
  if (!Finished()) return;
  for (auto& [index, done] : waiters_)
    ready->emplace_back(std::move(done), NotAppliedHere(index, failed()));
  waiters_.clear();
}

void ApplyThread::Run() {
  Ready ready;
  for (;;) {
    Entry entry;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {  // stopping, everything applied
        exited_ = true;
        return;
      }
      entry = std::move(queue_.front());
      queue_.pop_front();
      applying_ = true;
    }
    idle_cv_.notify_all();  // room for Enqueue
    Status s;
    if (!failed()) {
      uint64_t took = 0;
      s = ApplyCommittedEntry(machine_, entry.index, entry.data, &took);
      uint64_t longest = longest_apply_ms_.load(std::memory_order_relaxed);
      while (took > longest && !longest_apply_ms_.compare_exchange_weak(longest, took)) {
      }
    }
    {
      std::lock_guard lock(mu_);
      if (!s.ok()) {
        failed_.store(true, std::memory_order_release);
      } else if (!failed()) {
        applied_.store(entry.index, std::memory_order_release);
      }
      applying_ = false;
      CollectWaiters(&ready);
    }
    idle_cv_.notify_all();  // Drain
    for (auto& [done, status] : ready) done(status);
    ready.clear();
  }
}

}  // namespace kvatlas::server
