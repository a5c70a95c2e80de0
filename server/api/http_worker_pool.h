// HttpWorkerPool: the threads that run REST handlers, which may block (a write waiting for
// its group commit, forwarding to the leader, an SSE stream waiting for events). Its queue
// is bounded so that a burst is refused (503) instead of buffered without limit.
//
// Thread-safety: Submit from any thread; Stop from the owner.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvatlas::server {

class HttpWorkerPool {
 public:
  HttpWorkerPool(size_t threads, size_t max_queued);
  ~HttpWorkerPool();  // Stop()s
  HttpWorkerPool(const HttpWorkerPool&) = delete;
  HttpWorkerPool& operator=(const HttpWorkerPool&) = delete;

  // Queues `job`; false when `max_queued` jobs wait already or the pool is stopping.
  [[nodiscard]] bool Submit(std::function<void()> job);
  // Runs the queued jobs, then joins the threads. Idempotent.
  void Stop();

 private:
  void Run();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvatlas::server
