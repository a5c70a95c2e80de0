#include "server/runtime/publisher_registrar.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/internal/log.h"
#include "server/service/ingest_service.h"

namespace kvatlas::server {

PublisherRegistrar::PublisherRegistrar(std::vector<Registration> publishers,
                                       RegistrationLimits limits, const Services* services)
    : publishers_(std::move(publishers)),
      limits_(std::move(limits)),
      services_(services),
      task_(std::chrono::milliseconds(0), [this] { return Round(); }) {}

PeriodicTask::Next PublisherRegistrar::Round() {
  // A publisher is registered again unless every group holds exactly its registration.
  std::vector<Registration> added;
  auto missing_from = [&](const Services& group) {
    group.machine->ReadRegistry([&](const Registry& registry, Revision) {
      for (const Registration& r : publishers_) {
        auto it = registry.registrations.find(r.Key());
        const bool held = it != registry.registrations.end() && it->second == r;
        if (!held && std::find(added.begin(), added.end(), r) == added.end()) added.push_back(r);
      }
    });
  };
  if (services_->groups == nullptr) {
    missing_from(*services_);
  } else {
    for (const Services& group : *services_->groups) missing_from(group);
  }
  if (added.empty()) return std::nullopt;
  // They count against max_registrations like POST /register's (the service layer's check).
  const Status admitted = services_->machine->ReadRegistry([&](const Registry& registry, Revision) {
    return CheckRegistrationLimits(registry, added, limits_);
  });
  if (!admitted.ok()) {
    LogError("the config file's publishers are not registered: " + admitted.ToString());
    return std::nullopt;
  }
  if (services_->log->is_leader()) {
    CommandBatch batch;
    for (Registration& r : added) batch.commands.emplace_back(RegisterCommand{std::move(r)});
    Result<Revision> applied = SubmitAndWait(*services_, std::move(batch));
    if (applied.has_value()) {
      LogInfo("registered the config file's publishers at revision " + std::to_string(*applied));
    } else {
      LogWarning("registering the config file's publishers: " + applied.error().ToString());
    }
  }
  return kRetry;
}

}  // namespace kvatlas::server
