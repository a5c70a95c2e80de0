#include "server/service/registration_service.h"

#include <utility>

#include "server/service/ingest_service.h"

namespace kvatlas::server {

Result<Revision> RegisterPublisher(const Services& services, Registration registration) {
  CommandBatch batch;
  batch.commands.emplace_back(RegisterCommand{std::move(registration)});
  return SubmitAndWait(services, std::move(batch));
}

Result<Revision> UnregisterPublisher(const Services& services, std::string instance_id,
                                     std::string tenant_id, uint32_t dp_rank) {
  const std::string key = Registration::RegistrationKey(instance_id, tenant_id, dp_rank);
  const bool known = services.machine->ReadRegistry(
      [&key](const Registry& r, Revision) { return r.registrations.contains(key); });
  if (!known) {
    return Status::NotFound("no publisher is registered as " + key +
                            " (instance_id|tenant_id|dp_rank)");
  }
  CommandBatch batch;
  batch.commands.emplace_back(
      UnregisterCommand{std::move(instance_id), std::move(tenant_id), dp_rank});
  return SubmitAndWait(services, std::move(batch));
}

RegistrationListing ListRegistrations(const Services& services) {
  return services.machine->ReadRegistry([](const Registry& r, Revision revision) {
    RegistrationListing listing;
    listing.revision = revision;
    listing.registrations.reserve(r.registrations.size());
    for (const auto& [key, registration] : r.registrations) {
      listing.registrations.push_back(registration);
    }
    return listing;
  });
}

std::vector<std::shared_ptr<const StreamView>> ListStreams(const Services& services) {
  if (services.zmq == nullptr) return {};
  return services.zmq->Streams();
}

}  // namespace kvatlas::server
