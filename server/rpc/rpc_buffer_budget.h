// RpcBufferBudget: the bytes that all connections of one RpcServer may hold at once for
// incomplete large frames (rpc_max_buffered_bytes). A connection reserves a large frame's
// whole size when its length prefix arrives and reads the frame's body only once the
// reservation is granted, so a partly received frame never waits for budget that other
// partly received frames hold: every holder needs only its client's bytes to finish (and
// rpc_frame_timeout_ms bounds how long it may take). Exported as the gauge
// kvatlas_rpc_buffered_bytes.
//
// Thread-safety: every member is safe from any thread (connections live on different io
// threads).
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <vector>

#include "server/service/metrics.h"

namespace kvatlas::server {

class RpcBufferBudget {
 public:
  // `metrics` (may be null) must outlive the budget.
  RpcBufferBudget(size_t limit, Metrics* metrics) : limit_(limit), metrics_(metrics) {}
  RpcBufferBudget(const RpcBufferBudget&) = delete;
  RpcBufferBudget& operator=(const RpcBufferBudget&) = delete;

  size_t limit() const { return limit_; }
  size_t used() const;

  // Takes `bytes` and returns true when they fit under the limit. Otherwise returns false
  // and keeps `wake`, which the next Release() calls once (on the releasing thread, under
  // no lock: it must only post), after which the caller tries again. Deciding and
  // registering under one lock means a release cannot slip in between and be missed.
  [[nodiscard]] bool AcquireOrWait(size_t bytes, std::function<void()> wake);
  // Returns bytes taken by AcquireOrWait and wakes every waiter (unless `wake_waiters` is
  // false: at teardown, when their executors may be gone).
  void Release(size_t bytes, bool wake_waiters = true);

 private:
  const size_t limit_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  size_t used_ = 0;                             // guarded by mu_
  std::vector<std::function<void()>> waiters_;  // guarded by mu_
};

}  // namespace kvatlas::server
