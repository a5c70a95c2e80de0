// RecoveryProgress: what a starting server is doing (the phase: opening RocksDB, loading
// the state from it, loading the raft log, replaying it...), how far it got, and whether
// it was asked to stop (SIGINT/SIGTERM while starting). The thread recovering updates it
// and polls stop_requested() in its loops; another thread logs it every few seconds and
// another one requests the stop.
//
// Several phases at once: a server with several groups recovers them side by side, each
// on a thread of its own, each reporting to a part of the server's progress (AddPart,
// named "group 3"). The parts running are what the recovery does (ReadRunning); the
// server's own phase only while no part runs. A stop requested of the server's progress
// reaches every part.
//
// Ending the process at once (SignalWatcher): allowed only while every running phase is
// uninterruptible (AllUninterruptible). A phase not marked so may be stopped at its next
// check and makes no promise about a crash in it, and the start ends only once every part
// has, so ending at once while one such phase runs would neither be known safe nor save
// time beyond what a second stop signal (which always ends the process at once) gives.
// While some of the parts are uninterruptible and others not, a stop waits for the
// uninterruptible ones to end.
//
// Thread-safety: every method, from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/common/status.h"

namespace kvatlas::server {

class RecoveryProgress {
 public:
  RecoveryProgress() = default;
  RecoveryProgress(const RecoveryProgress&) = delete;
  RecoveryProgress& operator=(const RecoveryProgress&) = delete;

  // A part of this recovery that runs beside others (one group's open, on a thread of its
  // own), with a phase and counters of its own; `label` names it in the log ("group 3").
  // A stop requested of this progress reaches the part; one requested of the part (a
  // sibling failed) reaches only the part. Owned by this progress: valid until it is
  // destroyed. Called on a part, adds a part to that part's owner (parts do not nest).
  [[nodiscard]] RecoveryProgress* AddPart(std::string label);
  // "" for a server's own progress, the name given to AddPart for a part.
  const std::string& label() const { return label_; }

  // Starts a phase named as the log says it ("loading the state from RocksDB"): the
  // counters restart at zero. `unit` names what the phase counts ("entries"; "" = it
  // counts nothing, only its time is told); `total_records` and `total_bytes` (0 =
  // unknown) are what the phase handles in all, as far as it is known beforehand.
  void BeginPhase(std::string name, std::string unit = "", uint64_t total_records = 0,
                  uint64_t total_bytes = 0);
  // The phase ends with none after it (a part whose work is done, until its next
  // BeginPhase): the part no longer runs, and its counters stay as they were.
  void EndPhase();
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

  // The current phase (until the next BeginPhase or EndPhase) runs inside a library that
  // cannot be asked to stop (libraft reading its snapshot and log) and writes nothing a
  // crash could not leave: a stop requested meanwhile may end the process at once
  // (SignalWatcher) instead of waiting for the phase to end, if every phase running is
  // so (the file comment).
  void MarkUninterruptible() { uninterruptible_.store(true, std::memory_order_release); }

  // Asks the recovery to stop at its next check: this progress's and, on a server's own
  // progress, every part's. Irreversible.
  void RequestStop() { stop_.store(true, std::memory_order_release); }
  bool stop_requested() const {
    return stop_.load(std::memory_order_acquire) || (owner_ != nullptr && owner_->stop_requested());
  }
  // kCancelled when a stop was requested, naming `where`; Ok otherwise. What a recovery
  // loop returns to unwind.
  [[nodiscard]] Status CheckStop(const std::string& where) const;

  struct View {
    std::string label;             // the part's (AddPart); "" for a server's own progress
    std::string phase;             // "" before the first phase and after EndPhase
    std::string unit;              // of `records`; "" = not counted
    uint64_t records = 0;          // in this phase
    uint64_t bytes = 0;            // in this phase
    uint64_t total_records = 0;    // of this phase, 0 = unknown
    uint64_t total_bytes = 0;      // of this phase, 0 = unknown
    double phase_seconds = 0;      // since the phase began
    double total_seconds = 0;      // since the first phase began (the owner's, for a part)
    bool uninterruptible = false;  // MarkUninterruptible
  };
  // This progress's own phase (not its parts').
  [[nodiscard]] View Read() const;
  // What the recovery runs now: the parts that run a phase, in the order they were added,
  // or, when none does, this progress's own phase; empty when nothing runs.
  [[nodiscard]] std::vector<View> ReadRunning() const;

  // One line describing the phase for the log, e.g. "loading the state from RocksDB:
  // 3100000 records in 8.2 s (378000/s), 324 MB on disk; 9.0 s since recovery began"
  // (prefixed with "LABEL: " for a part).
  [[nodiscard]] static std::string Describe(const View& view);
  // One line for the phases of ReadRunning: Describe's for one; for several, each one's
  // (labelled, "; " between them) and the time since recovery began once, at the end.
  [[nodiscard]] static std::string Describe(const std::vector<View>& running);
  // The phases' labelled names, "; " between them ("group 1: loading the raft snapshot and
  // log; group 2: ..."): what a stop signal's log line says the start was doing.
  [[nodiscard]] static std::string Names(const std::vector<View>& running);
  // True when `running` is not empty and every phase in it is uninterruptible: the process
  // may then be ended at once (the file comment).
  [[nodiscard]] static bool AllUninterruptible(const std::vector<View>& running);

 private:
  using Clock = std::chrono::steady_clock;
  RecoveryProgress(RecoveryProgress* owner, std::string label)
      : owner_(owner), label_(std::move(label)) {}
  // Sets `start` to when this progress's first phase began; false when none did yet.
  bool FirstStart(Clock::time_point* start) const;

  RecoveryProgress* const owner_ = nullptr;  // a part's; null for a server's own
  const std::string label_;
  mutable std::mutex mu_;
  std::string phase_;              // guarded by mu_
  std::string unit_;               // guarded by mu_
  bool began_ = false;             // guarded by mu_: a first phase began
  Clock::time_point phase_start_;  // guarded by mu_
  Clock::time_point first_start_;  // guarded by mu_
  uint64_t total_records_ = 0;     // guarded by mu_
  uint64_t total_bytes_ = 0;       // guarded by mu_
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> uninterruptible_{false};
  // Lock order: parts_mu_, then a part's mu_, then this progress's mu_.
  mutable std::mutex parts_mu_;
  std::vector<std::unique_ptr<RecoveryProgress>> parts_;  // guarded by parts_mu_
};

// The bytes of the regular files in `dir` and below; 0 when it cannot be read. For the
// totals of a phase that reads a directory.
[[nodiscard]] uint64_t DirectoryBytes(const std::string& dir);

// Logs the progress of a RecoveryProgress (every phase it runs, ReadRunning) every
// `interval` (while one of them began a second ago or more) on a thread of its own, until
// destroyed.
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
