#include "server/runtime/concurrent_tasks.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "common/internal/thread_name.h"

namespace kvatlas::server {

Status RunConcurrently(size_t count, size_t threads, const std::string& thread_name,
                       const std::function<Status(size_t index)>& task,
                       const std::function<void()>& stop) {
  if (threads <= 1 || count <= 1) {
    for (size_t i = 0; i < count; ++i) {
      if (Status s = task(i); !s.ok()) {
        stop();
        return s;
      }
    }
    return Status::Ok();
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first;  // guarded by mu: the first failure
  auto run = [&] {
    for (;;) {
      if (failed.load(std::memory_order_acquire)) return;
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= count) return;
      Status s = task(i);
      if (s.ok()) continue;
      {
        std::lock_guard lock(mu);
        if (!first.ok()) return;  // another task failed first: its error stands
        first = std::move(s);
        failed.store(true, std::memory_order_release);
      }
      stop();
      return;
    }
  };
  std::vector<std::thread> pool;
  const size_t started = std::min(threads, count);
  pool.reserve(started);
  for (size_t t = 0; t < started; ++t) {
    // A thread that cannot be made (std::system_error: at the process's thread limit)
    // leaves its tasks to the others, or to the calling thread when none could be made.
    try {
      pool.emplace_back([&] {
        SetCurrentThreadName(thread_name);
        run();
      });
    } catch (const std::system_error&) {
      break;
    }
  }
  if (pool.empty()) run();
  for (std::thread& thread : pool) thread.join();
  return first;
}

}  // namespace kvatlas::server
