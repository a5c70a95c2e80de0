#include "server/service/reroute_worker.h"

#include <utility>

#include "common/internal/thread_name.h"

namespace kvatlas::server {

RerouteWorker::RerouteWorker()
    : thread_([this] {
        SetCurrentThreadName("reroute");
        Run();
      }) {}

RerouteWorker::~RerouteWorker() { Stop(); }

bool RerouteWorker::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= kMaxQueued) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void RerouteWorker::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RerouteWorker::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued ran
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace kvatlas::server
