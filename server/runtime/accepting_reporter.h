// AcceptingReporter: keeps the placement directory's word on which groups take new
// contexts (SetGroupAcceptingCommand; docs/scaling.md §Placed contexts) equal to what their
// snapshot guards say. Every second, for each group this server leads, it compares the
// group's applier (Applier::new_contexts_refused, set by the group's SnapshotGuard here)
// with the directory as this server has applied it, and when they differ submits the
// change to group 1 — one at a time per group, so a slow commit is not submitted twice.
// Level-triggered: a new leader, or a submission lost with its leader, is corrected within
// a round.
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "common/internal/periodic_task.h"
#include "server/service/services.h"

namespace kvatlas::server {

class AcceptingReporter {
 public:
  // `services` (with every group's parts: Services::groups) must outlive the reporter (or
  // its Stop).
  explicit AcceptingReporter(const Services* services);

  void Start() { task_.Start(); }
  void RequestStop() { task_.RequestStop(); }  // ends the loop without waiting for it
  void Stop() { task_.Stop(); }                // idempotent

 private:
  PeriodicTask::Next Round();

  static constexpr std::chrono::milliseconds kPeriod{1'000};
  const Services* services_;
  // Per group: a change submitted and not answered yet (set by the task, cleared by the
  // answer's callback on an applier or forwarder thread).
  std::shared_ptr<std::vector<std::atomic<bool>>> in_flight_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
