#include "server/runtime/publisher_registrar.h"

#include <string>
#include <utility>

#include "common/internal/log.h"

namespace kvatlas::server {

PublisherRegistrar::PublisherRegistrar(std::vector<Registration> publishers,
                                       RegistrationLimits limits, StateMachine* machine,
                                       Applier* applier, RaftLog* raft)
    : publishers_(std::move(publishers)),
      limits_(std::move(limits)),
      machine_(machine),
      applier_(applier),
      raft_(raft),
      task_(std::chrono::milliseconds(0), [this] { return Round(); }) {}

PeriodicTask::Next PublisherRegistrar::Round() {
  CommandBatch batch;
  // They count against max_registrations like POST /register's (the service layer's check).
  const Status admitted = machine_->ReadRegistry([&](const Registry& registry, Revision) {
    std::vector<Registration> added;
    for (const Registration& r : publishers_) {
      auto it = registry.registrations.find(r.Key());
      if (it == registry.registrations.end() || !(it->second == r)) {
        batch.commands.emplace_back(RegisterCommand{r});
        added.push_back(r);
      }
    }
    return CheckRegistrationLimits(registry, added, limits_);
  });
  if (!admitted.ok()) {
    LogError("the config file's publishers are not registered: " + admitted.ToString());
    return std::nullopt;
  }
  if (batch.commands.empty()) return std::nullopt;
  if (raft_->is_leader()) {
    Result<Revision> applied = applier_->Submit(std::move(batch)).get();
    if (applied.has_value()) {
      LogInfo("registered the config file's publishers at revision " + std::to_string(*applied));
    } else {
      LogWarning("registering the config file's publishers: " + applied.error().ToString());
    }
  }
  return kRetry;
}

}  // namespace kvatlas::server
