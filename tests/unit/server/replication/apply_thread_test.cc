// ApplyThread: order, acknowledgement only after the apply, Drain, the bound, failures and
// Stop. The state machine here records what it applied and can be held inside an apply.
#include "server/replication/apply_thread.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvatlas::server {
namespace {

using namespace std::chrono_literals;

// Records applied indexes; holds every apply while `held` is set; fails the entry reading
// "fail".
class GatedMachine final : public LogStateMachine {
 public:
  Status ApplyEntry(uint64_t index, std::string_view entry) override {
    std::unique_lock lock(mu_);
    ++entered_;
    entered_cv_.notify_all();
    cv_.wait(lock, [this] { return !held_; });
    if (entry == "fail") return Status::IOError("storage failed");
    applied_.push_back(index);
    last_.store(index);
    return Status::Ok();
  }
  Result<std::unique_ptr<Capture>> CaptureState() override {
    return Status::FailedPrecondition("unused");
  }
  Status Restore(std::string_view) override { return Status::Ok(); }

  void Hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // Waits (bounded) until `n` applies have started.
  bool WaitEntered(int n) {
    std::unique_lock lock(mu_);
    return entered_cv_.wait_for(lock, 10s, [&] { return entered_ >= n; });
  }
  std::vector<uint64_t> applied() {
    std::lock_guard lock(mu_);
    return applied_;
  }
  uint64_t last() const { return last_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_, entered_cv_;
  bool held_ = false;
  int entered_ = 0;
  std::vector<uint64_t> applied_;
  std::atomic<uint64_t> last_{0};
};

TEST_CASE("entries are applied in order, and a waiter runs only once its entry is applied") {
  GatedMachine machine;
  ApplyThread thread(&machine, 8);
  machine.Hold();
  std::atomic<uint64_t> seen_at_ack{0};
  std::promise<Status> acked;
  for (uint64_t i = 1; i <= 5; ++i) thread.Enqueue(i, "e");
  thread.WhenApplied(3, [&](Status s) {
    seen_at_ack = machine.last();
    acked.set_value(std::move(s));
  });
  REQUIRE(machine.WaitEntered(1));
  auto ack = acked.get_future();
  CHECK(ack.wait_for(50ms) == std::future_status::timeout);  // held in apply 1
  CHECK(thread.applied_index() == 0);
  machine.Release();
  REQUIRE(ack.wait_for(10s) == std::future_status::ready);
  CHECK(ack.get().ok());
  CHECK(seen_at_ack.load() >= 3);
  thread.Drain();
  CHECK(machine.applied() == std::vector<uint64_t>{1, 2, 3, 4, 5});
  CHECK(thread.applied_index() == 5);
  // An index already applied: at once, on this thread.
  bool at_once = false;
  thread.WhenApplied(2, [&](Status s) { at_once = s.ok(); });
  CHECK(at_once);
}

TEST_CASE("Drain returns only once the entry being applied is done") {
  GatedMachine machine;
  ApplyThread thread(&machine, 8);
  machine.Hold();
  thread.Enqueue(1, "e");
  REQUIRE(machine.WaitEntered(1));  // out of the queue, inside the apply
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    thread.Drain();
    drained = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(drained.load());
  machine.Release();
  drainer.join();
  CHECK(drained.load());
  CHECK(machine.applied() == std::vector<uint64_t>{1});
}

TEST_CASE("Enqueue waits while the queue holds max_queued entries") {
  GatedMachine machine;
  ApplyThread thread(&machine, 2);
  machine.Hold();
  thread.Enqueue(1, "e");
  REQUIRE(machine.WaitEntered(1));  // 1 in apply: the queue is empty again
  thread.Enqueue(2, "e");
  thread.Enqueue(3, "e");  // the queue is full now
  std::atomic<bool> enqueued{false};
  std::thread producer([&] {
    thread.Enqueue(4, "e");
    enqueued = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(enqueued.load());
  machine.Release();
  producer.join();
  thread.Drain();
  CHECK(machine.applied() == std::vector<uint64_t>{1, 2, 3, 4});
}

TEST_CASE("after a failed apply, later entries are skipped and their waiters get an error") {
  GatedMachine machine;
  ApplyThread thread(&machine, 8);
  std::vector<Status> outcomes(4);
  machine.Hold();
  thread.Enqueue(1, "e");
  thread.Enqueue(2, "fail");
  thread.Enqueue(3, "e");
  for (uint64_t i = 1; i <= 3; ++i) {
    thread.WhenApplied(i, [&, i](Status s) { outcomes[i] = std::move(s); });
  }
  machine.Release();
  thread.Drain();
  CHECK(thread.failed());
  CHECK(outcomes[1].ok());
  CHECK(outcomes[2].code() == StatusCode::kUnavailable);
  CHECK(outcomes[3].code() == StatusCode::kUnavailable);
  CHECK(machine.applied() == std::vector<uint64_t>{1});
  CHECK(thread.applied_index() == 1);
  // A waiter that comes later is refused at once.
  Status late;
  thread.WhenApplied(4, [&](Status s) { late = std::move(s); });
  CHECK(late.code() == StatusCode::kUnavailable);
}

TEST_CASE("Stop applies what is queued and fails waiters for entries never handed over") {
  GatedMachine machine;
  ApplyThread thread(&machine, 8);
  machine.Hold();
  thread.Enqueue(1, "e");
  thread.Enqueue(2, "e");
  Status applied_outcome = Status::Internal("not called"), never_outcome;
  thread.WhenApplied(2, [&](Status s) { applied_outcome = std::move(s); });
  thread.WhenApplied(3, [&](Status s) { never_outcome = std::move(s); });
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    machine.Release();
  });
  thread.Stop();
  releaser.join();
  CHECK(machine.applied() == std::vector<uint64_t>{1, 2});
  CHECK(applied_outcome.ok());
  CHECK(never_outcome.code() == StatusCode::kUnavailable);
  thread.Stop();  // idempotent
}

}  // namespace
}  // namespace kvatlas::server
