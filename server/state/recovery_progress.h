// RecoveryProgress: what a starting server is doing (the phase: opening RocksDB, loading
// the state from it, loading the raft log, replaying it...), how far it got, and whether
// it was asked to stop (SIGINT/SIGTERM while starting). The thread recovering updates it
// and polls stop_requested() in its loops; another thread logs it every few seconds and
// another one requests the stop.
//
// Thread-safety: every method, from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "kvatlas/common/status.h"

namespace kvatlas::server {

class RecoveryProgress {
 public:
  // Starts a phase named as the log says it ("loading the state from RocksDB"): the
  // counters restart at zero. `unit` names what the phase counts ("entries"; "" = it
  // counts nothing, only its time is told); `total_records` and `total_bytes` (0 =
  // unknown) are what the phase handles in all, as far as it is known beforehand.
  void BeginPhase(std::string name, std::string unit = "", uint64_t total_records = 0,
                  uint64_t total_bytes = 0);
  // The current phase made progress: `records` more loaded or applied, `bytes` more read.
  void Add(uint64_t records, uint64_t bytes = 0) {
    records_.fetch_add(records, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  // Sets the phase's counters (for a phase measured by polling, e.g. a log replay).
  void Set(uint64_t records, uint64_t bytes) {
    records_.store(records, std::memory_order_relaxed);
    bytes_.store(bytes, std::memory_order_relaxed);
  }

  // The current phase (until the next BeginPhase) runs inside a library that cannot be
  // asked to stop (libraft reading its snapshot and log) and writes nothing a crash could
  // not leave: a stop requested meanwhile may end the process at once (SignalWatcher)
  // instead of waiting for the phase to end.
  void MarkUninterruptible() { uninterruptible_.store(true, std::memory_order_release); }

  // Asks the recovery to stop at its next check. Irreversible.
  void RequestStop() { stop_.store(true, std::memory_order_release); }
  bool stop_requested() const { return stop_.load(std::memory_order_acquire); }
  // kCancelled when a stop was requested, naming `where`; Ok otherwise. What a recovery
  // loop returns to unwind.
  [[nodiscard]] Status CheckStop(const std::string& where) const;

  struct View {
    std::string phase;             // "" before the first phase
    std::string unit;              // of `records`; "" = not counted
    uint64_t records = 0;          // in this phase
    uint64_t bytes = 0;            // in this phase
    uint64_t total_records = 0;    // of this phase, 0 = unknown
    uint64_t total_bytes = 0;      // of this phase, 0 = unknown
    double phase_seconds = 0;      // since the phase began
    double total_seconds = 0;      // since the first phase began
    bool uninterruptible = false;  // MarkUninterruptible
  };
  [[nodiscard]] View Read() const;
  // One line describing the phase for the log, e.g. "loading the state from RocksDB:
  // 3100000 records in 8.2 s (378000/s), 324 MB on disk; 9.0 s since recovery began".
  [[nodiscard]] static std::string Describe(const View& view);

 private:
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mu_;
  std::string phase_;              // guarded by mu_
  std::string unit_;               // guarded by mu_
  Clock::time_point phase_start_;  // guarded by mu_
  Clock::time_point first_start_;  // guarded by mu_
  uint64_t total_records_ = 0;     // guarded by mu_
  uint64_t total_bytes_ = 0;       // guarded by mu_
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> uninterruptible_{false};
};

// The bytes of the regular files in `dir` and below; 0 when it cannot be read. For the
// totals of a phase that reads a directory.
[[nodiscard]] uint64_t DirectoryBytes(const std::string& dir);

// Logs the progress of a RecoveryProgress every `interval` (while a phase runs that began
// a second ago or more) on a thread of its own, until destroyed.
class ProgressLogger {
 public:
  ProgressLogger(const RecoveryProgress* progress, std::chrono::milliseconds interval);
  ~ProgressLogger();
  ProgressLogger(const ProgressLogger&) = delete;
  ProgressLogger& operator=(const ProgressLogger&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace kvatlas::server
