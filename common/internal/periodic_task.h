// PeriodicTask: one background loop (the server's policies: the announcer, the disk
// watcher, the lease keeper, the publisher registrar, the replica audit proposer): a
// thread of its own that runs a round, waits, and runs the next, until the round says it
// is done or Stop is called. A round chooses the wait before the next one (a fixed period,
// or a backoff); Stop wakes a waiting loop at once and joins it, so that a task never
// outlives what its rounds use. An owner of several tasks calls RequestStop on all of them
// before it Stops each, so that their rounds in progress end together, not one after
// another.
//
// Thread-safety: construct, Start, RequestStop and Stop from one thread (the owner);
// stop_requested() from any thread. A round runs on the task's thread, never two at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace kvatlas {

class PeriodicTask {
 public:
  // The wait before the next round, or nullopt: the task is done (its thread ends).
  using Next = std::optional<std::chrono::milliseconds>;
  using Round = std::function<Next()>;

  // `first_wait`: the wait before the first round (zero: at once when started).
  PeriodicTask(std::chrono::milliseconds first_wait, Round round);
  ~PeriodicTask();  // Stop()s
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

  // Starts the thread. Once only: a second Start, or a Start after Stop, does nothing.
  void Start();
  // Asks the loop to end and wakes it if it waits, without waiting for it: the round in
  // progress, if any, runs on (stop_requested() tells it). Idempotent.
  void RequestStop();
  // RequestStop, then joins the loop: returns once the round in progress, if any, has
  // returned. Idempotent; a task never started just stops.
  void Stop();

  // Whether Stop was called: a long round may check it to return early.
  [[nodiscard]] bool stop_requested() const;

 private:
  void Run();

  const std::chrono::milliseconds first_wait_;
  Round round_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::thread thread_;
};

}  // namespace kvatlas
