// PeriodicTask: rounds run on the task's thread at the waits they choose; Stop wakes a
// waiting loop, joins it and is idempotent. No timed assertions: waits for something to
// happen are bounded and generous; the short sleeps only give a wrong extra round a chance
// to show.
#include "common/internal/periodic_task.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace kvatlas {
namespace {

using std::chrono::milliseconds;
constexpr auto kPatience = std::chrono::seconds(30);
constexpr milliseconds kForever = std::chrono::hours(24);

// Waits (bounded) until `rounds` reaches `n`; false if it never does.
bool WaitForRounds(const std::atomic<int>& rounds, int n) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (rounds.load() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  return rounds.load() >= n;
}

// Stops `task` on another thread; true if Stop returned within the patience. (A Stop that
// never returns then hangs the test at the future's destruction: ctest's timeout fails it.)
bool StopsWithinPatience(PeriodicTask& task) {
  std::future<void> stopped = std::async(std::launch::async, [&task] { task.Stop(); });
  return stopped.wait_for(kPatience) == std::future_status::ready;
}

TEST_CASE("PeriodicTask: runs round after round at its period until stopped") {
  std::atomic<int> rounds{0};
  PeriodicTask task(milliseconds(1), [&]() -> PeriodicTask::Next {
    ++rounds;
    return milliseconds(1);
  });
  CHECK(rounds.load() == 0);  // nothing before Start
  task.Start();
  REQUIRE(WaitForRounds(rounds, 5));
  CHECK(StopsWithinPatience(task));
  const int after_stop = rounds.load();
  std::this_thread::sleep_for(milliseconds(20));
  CHECK(rounds.load() == after_stop);  // joined: no round runs after Stop returned
}

TEST_CASE("PeriodicTask: Stop wakes a loop waiting for its first round") {
  std::atomic<int> rounds{0};
  PeriodicTask task(kForever, [&]() -> PeriodicTask::Next {
    ++rounds;
    return kForever;
  });
  task.Start();
  CHECK(StopsWithinPatience(task));
  CHECK(rounds.load() == 0);
}

TEST_CASE("PeriodicTask: the wait a round returns is the next one, and Stop cuts it short") {
  std::atomic<int> rounds{0};
  PeriodicTask task(milliseconds(0), [&]() -> PeriodicTask::Next {
    ++rounds;
    return kForever;
  });
  task.Start();
  REQUIRE(WaitForRounds(rounds, 1));  // first_wait 0: at once
  CHECK(StopsWithinPatience(task));
  CHECK(rounds.load() == 1);
}

TEST_CASE("PeriodicTask: a round returning nullopt ends the loop") {
  std::atomic<int> rounds{0};
  PeriodicTask task(milliseconds(0), [&]() -> PeriodicTask::Next {
    return ++rounds < 3 ? PeriodicTask::Next(milliseconds(0)) : std::nullopt;
  });
  task.Start();
  REQUIRE(WaitForRounds(rounds, 3));
  std::this_thread::sleep_for(milliseconds(20));
  CHECK(rounds.load() == 3);
  CHECK(StopsWithinPatience(task));  // the thread already ended: Stop just joins it
}

TEST_CASE("PeriodicTask: Stop is idempotent, works unstarted, and Start after Stop runs nothing") {
  std::atomic<int> rounds{0};
  auto round = [&]() -> PeriodicTask::Next {
    ++rounds;
    return milliseconds(0);
  };
  {
    PeriodicTask never_started(milliseconds(0), round);
    never_started.Stop();
    never_started.Stop();
    never_started.Start();  // stopped for good
    std::this_thread::sleep_for(milliseconds(20));
    CHECK(rounds.load() == 0);
  }  // the destructor stops again
  PeriodicTask task(milliseconds(0), round);
  task.Start();
  task.Start();  // a second Start starts no second thread
  REQUIRE(WaitForRounds(rounds, 1));
  CHECK(StopsWithinPatience(task));
  CHECK(StopsWithinPatience(task));
  CHECK(task.stop_requested());
}

TEST_CASE("PeriodicTask: a long round sees stop_requested and returns early") {
  std::atomic<int> rounds{0};
  PeriodicTask* self = nullptr;
  PeriodicTask task(milliseconds(0), [&]() -> PeriodicTask::Next {
    ++rounds;
    while (!self->stop_requested()) std::this_thread::sleep_for(milliseconds(1));
    return milliseconds(0);
  });
  self = &task;
  CHECK_FALSE(task.stop_requested());
  task.Start();
  REQUIRE(WaitForRounds(rounds, 1));
  CHECK(StopsWithinPatience(task));
  CHECK(rounds.load() == 1);  // stopped after the round: no second one
}

// What lets an owner of several tasks ask all of them first, so that their rounds end
// together rather than one after another (the server's shutdown).
TEST_CASE("PeriodicTask: RequestStop does not wait for the round in progress; Stop joins it") {
  std::atomic<int> rounds{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  PeriodicTask task(milliseconds(0), [&]() -> PeriodicTask::Next {
    ++rounds;
    released.wait();
    return milliseconds(0);
  });
  task.Start();
  REQUIRE(WaitForRounds(rounds, 1));
  std::future<void> asked = std::async(std::launch::async, [&task] { task.RequestStop(); });
  // The round is still blocked: RequestStop must return anyway.
  CHECK(asked.wait_for(kPatience) == std::future_status::ready);
  CHECK(task.stop_requested());
  release.set_value();
  CHECK(StopsWithinPatience(task));
  CHECK(rounds.load() == 1);  // no round after the request
}

}  // namespace
}  // namespace kvatlas
