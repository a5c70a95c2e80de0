// AuditProposer: the leader's side of the replica audits (docs/replication.md §Replica
// audits). A thread of its own that, every `interval`, on the leader of a cluster of more
// than one member, proposes an AuditCommand when anything was applied since the last audit
// point — or, on an idle cluster, every kIdleIntervals intervals, so that a member that
// restarted with a damaged state is still checked. The command carries the leader's own
// latest audit point (StateMachine::audit().latest): every replica compares it with its own.
//
// Thread-safety: construct, Start, RequestStop and Stop from one thread; the rest is the
// proposer's (a PeriodicTask).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/internal/periodic_task.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

class AuditProposer {
 public:
  static constexpr int kIdleIntervals = 10;

  // `should_audit`: whether this server leads a cluster of more than one member now.
  // `machine` and `applier` must outlive the proposer. `interval` zero: Start does nothing.
  AuditProposer(std::chrono::milliseconds interval, const StateMachine* machine, Applier* applier,
                std::function<bool()> should_audit);
  ~AuditProposer();  // Stop()s

  void Start();
  // Ends the loop without waiting for it (PeriodicTask::RequestStop).
  void RequestStop() { task_.RequestStop(); }
  // Returns within about 2 s (the longest wait for an audit to apply).
  void Stop() { task_.Stop(); }

  // Whether an audit is due: something but audits was applied since the latest audit point
  // (`applied` past it), or none was proposed for kIdleIntervals intervals.
  [[nodiscard]] static bool Due(Revision applied, Revision latest_audit_index,
                                std::chrono::steady_clock::duration since_last_proposal,
                                std::chrono::milliseconds interval);

 private:
  // One round: proposes an audit point when one is due.
  void Round();

  const std::chrono::milliseconds interval_;
  const StateMachine* machine_;
  Applier* applier_;
  std::function<bool()> should_audit_;
  // The round's state, on the task's thread only.
  std::chrono::steady_clock::time_point last_proposal_;
  std::string last_error_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
