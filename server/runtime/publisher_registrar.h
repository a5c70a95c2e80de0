// PublisherRegistrar: registers the config file's publishers as POST /register would,
// unless every group's state already holds exactly that registration (a restart must not
// rewrite it; a registration is every group's, ingest_service.h SplitByGroup). Only group
// 1's leader registers, and a cluster may not have one yet: it tries every 100 ms until
// every one is registered, then its thread ends. They count against the
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
#include "server/service/services.h"

namespace kvatlas::server {

class PublisherRegistrar {
 public:
  // `services` (complete: its groups' too) must outlive the registrar (or its Stop).
  PublisherRegistrar(std::vector<Registration> publishers, RegistrationLimits limits,
                     const Services* services);

  void Start() { task_.Start(); }
  // Idempotent. Waits for a registration in progress to be applied (or to fail).
  void RequestStop() { task_.RequestStop(); }  // ends the loop without waiting for it
  void Stop() { task_.Stop(); }

 private:
  PeriodicTask::Next Round();

  static constexpr std::chrono::milliseconds kRetry{100};
  const std::vector<Registration> publishers_;
  const RegistrationLimits limits_;
  const Services* services_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace kvatlas::server
