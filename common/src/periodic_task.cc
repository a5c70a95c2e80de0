#include "common/internal/periodic_task.h"

#include <utility>

namespace kvatlas {

PeriodicTask::PeriodicTask(std::chrono::milliseconds first_wait, Round round)
    : first_wait_(first_wait), round_(std::move(round)) {}

PeriodicTask::~PeriodicTask() { Stop(); }

void PeriodicTask::Start() {
  std::lock_guard lock(mu_);
  if (started_ || stop_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void PeriodicTask::RequestStop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void PeriodicTask::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

bool PeriodicTask::stop_requested() const {
  std::lock_guard lock(mu_);
  return stop_;
}

void PeriodicTask::Run() {
  std::chrono::milliseconds wait = first_wait_;
  std::unique_lock lock(mu_);
  for (;;) {
    if (cv_.wait_for(lock, wait, [this] { return stop_; })) return;
    lock.unlock();
    const Next next = round_();
    lock.lock();
    if (!next) return;
    wait = *next;
  }
}

}  // namespace kvatlas
