#include "server/runtime/signal_watcher.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/internal/log.h"
#include "common/internal/thread_name.h"

namespace kvatlas::server {
namespace {

std::string NameOf(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "SIGHUP";
  }
}

}  // namespace

sigset_t BlockServerSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

SignalWatcher::SignalWatcher(const sigset_t& signals, RecoveryProgress* progress)
    : progress_(progress), signals_(signals) {
  thread_ = std::thread([this] {
    SetCurrentThreadName("signals");
    Run();
  });
}

SignalWatcher::~SignalWatcher() {
  // sigwaitinfo has no timeout to poll a flag with: the thread is woken by a SIGHUP aimed
  // at it, which it takes for the end (no descriptor for a wake-up: a server at its open
  // file limit has none to spare).
  exiting_.store(true, std::memory_order_release);
  pthread_kill(thread_.native_handle(), SIGHUP);
  thread_.join();
}

void SignalWatcher::Run() {
  for (;;) {
    const int signal = sigwaitinfo(&signals_, nullptr);
    if (exiting_.load(std::memory_order_acquire)) return;
    if (signal > 0) Received(signal);
  }
}

void SignalWatcher::Received(int signal) {
  if (signal == SIGHUP) {
    {
      std::lock_guard lock(mu_);
      reload_pending_ = true;
    }
    cv_.notify_all();
    return;
  }
  bool again = false;
  {
    std::lock_guard lock(mu_);
    again = stop_;
    stop_ = true;
  }
  if (again) {
    LogWarning("received a second stop signal (" + NameOf(signal) +
               "): exiting at once (the next start recovers as after a crash)");
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(128 + signal);
  }
  progress_->RequestStop();
  // Every phase running: a server with several groups recovers them side by side.
  const std::vector<RecoveryProgress::View> running = progress_->ReadRunning();
  const std::string phases = RecoveryProgress::Names(running);
  if (started_.load(std::memory_order_acquire)) {
    LogInfo("received " + NameOf(signal) + ", shutting down");
  } else if (RecoveryProgress::AllUninterruptible(running)) {
    LogInfo("received " + NameOf(signal) + " while starting (" + phases +
            ", which cannot be cut short): exiting now; nothing is lost, the next start "
            "does it again");
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  } else {
    LogInfo("received " + NameOf(signal) + " while starting: stopping (" + phases +
            "); send it again to exit at once");
  }
  cv_.notify_all();
}

SignalWatcher::Event SignalWatcher::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return stop_ || reload_pending_; });
  if (stop_) return Event::kStop;
  if (reload_pending_) {
    reload_pending_ = false;
    return Event::kReload;
  }
  return Event::kNone;
}

}  // namespace kvatlas::server
