// WorkerPool: threads that run jobs which may block, from a bounded queue, so that a burst
// is refused instead of buffered without limit. The REST server's handlers run on one (a
// write waiting for its group commit, forwarding to the leader, an SSE stream waiting for
// events; refused: 503), and so do the write parts a server of several groups routes
// again (docs/scaling.md §Placed contexts; refused: unavailable).
//
// Thread-safety: Submit from any thread; Stop from the owner.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvatlas {

class WorkerPool {
 public:
  // `threads` (at least 1) named `thread_name`; at most `max_queued` (at least 1) jobs wait.
  WorkerPool(size_t threads, size_t max_queued, std::string thread_name);
  ~WorkerPool();  // Stop()s
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `job`; false when `max_queued` jobs wait already or the pool is stopping.
  [[nodiscard]] bool Submit(std::function<void()> job);
  // Runs the queued jobs, then joins the threads. Idempotent.
  void Stop();

 private:
  void Run();

  const size_t max_queued_;
  const std::string thread_name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvatlas
