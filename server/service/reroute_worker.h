// RerouteWorker: one thread that routes again the write parts their group refused
// wrong_group (placement_service.h) for the writes answered by callback — the binary
// protocol's and the ZMQ ingest's — whose threads must not wait for a placement's commits.
// A bounded queue: a part posted while it is full (or after Stop) is not taken, and its
// write fails unavailable. Such refusals are rare: they need a placement made in the last
// moments by another server.
//
// Thread-safety: Post from any thread; Stop from one (it runs what is queued first).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace kvatlas::server {

class RerouteWorker {
 public:
  static constexpr size_t kMaxQueued = 1'024;

  RerouteWorker();
  ~RerouteWorker();  // Stop()s
  RerouteWorker(const RerouteWorker&) = delete;
  RerouteWorker& operator=(const RerouteWorker&) = delete;

  // Queues `task`; false (and `task` not run) when the queue is full or the worker stopped.
  [[nodiscard]] bool Post(std::function<void()> task);
  // Runs what is queued, then ends the thread. Idempotent.
  void Stop();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::thread thread_;
};

}  // namespace kvatlas::server
