// PublisherRegistrar: registers the config file's publishers as POST /register would,
// unless the state already holds exactly that registration (a restart must not rewrite
// it). Only the leader can write, and a cluster may not have one yet: it tries every
// 100 ms until every one is registered, then its thread ends. They count against the
// registration limits like POST /register's; a set past them is logged and never
// registered.
//
// Thread-safety: construct, Start and Stop from one thread; rounds run on the task's.
#pragma once

#include <vector>

#include "common/internal/periodic_task.h"
#include "server/model/registration.h"
#include "server/replication/raft_log.h"
#include "server/service/registration_service.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

class PublisherRegistrar {
 public:
  // `machine`, `applier` and `raft` must outlive the registrar (or its Stop).
  PublisherRegistrar(std::vector<Registration> publishers, RegistrationLimits limits,
                     StateMachine* machine, Applier* applier, RaftLog* raft);

  void Start() { task_.Start(); }
  // Idempotent. Waits for a registration in progress to be applied (or to fail).
  void RequestStop() { task_.RequestStop(); }  // ends the loop without waiting for it
  void Stop() { task_.Stop(); }

 private:
  PeriodicTask::Next Round();

  static constexpr std::chrono::milliseconds kRetry{100};
  const std::vector<Registration> publishers_;
  const RegistrationLimits limits_;
  StateMachine* machine_;
  Applier* applier_;
  RaftLog* raft_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
