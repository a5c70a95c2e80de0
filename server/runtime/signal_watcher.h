// SignalWatcher: kvatlas-server's handling of SIGINT, SIGTERM and SIGHUP, from before the
// server recovers its state until the process exits, on a thread of its own (the signals
// must be blocked in every thread first: BlockServerSignals, before any thread starts).
//
// - The first SIGINT or SIGTERM asks the server to stop: RecoveryProgress::RequestStop (a
//   start still recovering stops at its next check, every group's if it recovers several)
//   and Wait() returns kStop. When every phase running cannot be cut short
//   (RecoveryProgress::AllUninterruptible: libraft loading its log), it exits at once (0).
// - A second one exits the process at once (_exit with 128 + the signal's number, as a
//   shell reports a process the signal killed): for an operator who will not wait for a
//   stop to finish. Nothing is corrupted (the raft log and RocksDB are crash-safe; the
//   next start recovers as after a crash).
// - SIGHUP: Wait() returns kReload once for the SIGHUPs received since it last did (one
//   received while the server starts is returned once it runs).
//
// Thread-safety: Wait and MarkStarted from the owning thread.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/state/recovery_progress.h"

namespace kvatlas::server {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in every thread it starts
// later) and returns that set.
sigset_t BlockServerSignals();

class SignalWatcher {
 public:
  enum class Event { kNone, kStop, kReload };

  // `signals` from BlockServerSignals; `progress` outlives the watcher.
  SignalWatcher(const sigset_t& signals, RecoveryProgress* progress);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // The server runs: a stop signal from now on is logged as a shutdown, not as a stop of
  // the start.
  void MarkStarted() { started_.store(true, std::memory_order_release); }

  // Waits up to `timeout` for a stop (kStop, then on every later call too) or a SIGHUP not
  // returned yet (kReload); kNone when neither came.
  Event Wait(std::chrono::milliseconds timeout);

 private:
  void Run();
  // Handles one signal (on the watcher's thread).
  void Received(int signal);

  RecoveryProgress* progress_;
  const sigset_t signals_;
  std::atomic<bool> started_{false};
  std::atomic<bool> exiting_{false};  // the destructor runs: Run returns
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;            // guarded by mu_
  bool reload_pending_ = false;  // guarded by mu_: a SIGHUP not returned by Wait yet
  std::thread thread_;
};

}  // namespace kvatlas::server
