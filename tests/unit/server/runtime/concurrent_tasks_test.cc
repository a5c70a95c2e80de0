// RunConcurrently: every task once on a bounded number of threads, the first failure
// deciding the result and stopping the rest, and no thread left behind.
#include "server/runtime/concurrent_tasks.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/support/thread_count.h"

namespace kvatlas::server {
namespace {

using testing::ThreadCount;

TEST_CASE("RunConcurrently: runs every task once, at most `threads` at a time") {
  constexpr size_t kTasks = 12;
  std::vector<std::atomic<int>> runs(kTasks);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  int stops = 0;
  const size_t before = ThreadCount();
  const Status s = RunConcurrently(
      kTasks, 3, "test-task",
      [&](size_t i) {
        const int now = ++running;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ++runs[i];
        --running;
        return Status::Ok();
      },
      [&] { ++stops; });
  CHECK(s.ok());
  for (const auto& r : runs) CHECK(r.load() == 1);
  CHECK(most.load() >= 2);  // side by side
  CHECK(most.load() <= 3);
  CHECK(stops == 0);
  CHECK(ThreadCount() == before);
}

TEST_CASE("RunConcurrently: the first failure is returned, stops the others and skips the rest") {
  constexpr size_t kTasks = 40;
  std::atomic<bool> stop{false};
  std::atomic<int> begun{0};
  std::atomic<int> stops{0};
  const size_t before = ThreadCount();
  const Status s = RunConcurrently(
      kTasks, 2, "test-task",
      [&](size_t i) -> Status {
        ++begun;
        if (i == 1) return Status::Corruption("task 1 is damaged");
        // The others run until stopped (a group's open at its next check).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return Status(StatusCode::kCancelled, "stopped");
      },
      [&] {
        ++stops;
        stop.store(true);
      });
  CHECK(s.code() == StatusCode::kCorruption);
  CHECK(s.message() == "task 1 is damaged");
  CHECK(stops.load() == 1);
  CHECK(begun.load() == 2);  // tasks 0 and 1; none began after the failure
  CHECK(ThreadCount() == before);
}

TEST_CASE("RunConcurrently: with one thread the tasks run in order on the caller's thread") {
  std::vector<size_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  bool elsewhere = false;
  int stops = 0;
  const Status s = RunConcurrently(
      4, 1, "test-task",
      [&](size_t i) -> Status {
        elsewhere = elsewhere || std::this_thread::get_id() != caller;
        order.push_back(i);
        return i == 2 ? Status::IOError("task 2") : Status::Ok();
      },
      [&] { ++stops; });
  CHECK(s.code() == StatusCode::kIOError);
  CHECK(order == std::vector<size_t>{0, 1, 2});
  CHECK_FALSE(elsewhere);
  CHECK(stops == 1);
  CHECK(RunConcurrently(
            0, 4, "test-task", [](size_t) { return Status::Internal("never"); }, [] {})
            .ok());
}

}  // namespace
}  // namespace kvatlas::server
