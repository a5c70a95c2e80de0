#include "server/rpc/rpc_buffer_budget.h"

#include <utility>

namespace kvatlas::server {

size_t RpcBufferBudget::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

bool RpcBufferBudget::AcquireOrWait(size_t bytes, std::function<void()> wake) {
  std::lock_guard lock(mu_);
  if (bytes <= limit_ - used_) {
    used_ += bytes;
    if (metrics_) metrics_->SetRpcBufferedBytes(used_);
    return true;
  }
  waiters_.push_back(std::move(wake));
  return false;
}

void RpcBufferBudget::Release(size_t bytes, bool wake_waiters) {
  if (bytes == 0) return;
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard lock(mu_);
    used_ -= bytes;
    if (metrics_) metrics_->SetRpcBufferedBytes(used_);
    if (wake_waiters) waiters.swap(waiters_);
  }
  for (const auto& wake : waiters) wake();
}

}  // namespace kvatlas::server
