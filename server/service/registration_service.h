// Engine publishers kvatlas follows (the Mooncake Conductor's /register and /unregister,
// docs/engine-events.md): registrations are replicated state, so they change through the
// Applier like any write; and the live status of every followed stream. Safe from any
// thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/model/registration.h"
#include "server/service/services.h"

namespace kvatlas::server {

// Follows `registration` (replacing one with the same Key()); returns the revision.
[[nodiscard]] Result<Revision> RegisterPublisher(const Services& services,
                                                 Registration registration);

// Stops following the publisher registered as instance|tenant|dp_rank, dropping its
// holder's entries. kNotFound naming the key when nothing is registered under it.
[[nodiscard]] Result<Revision> UnregisterPublisher(const Services& services,
                                                   std::string instance_id, std::string tenant_id,
                                                   uint32_t dp_rank);

// Every registration, by key, and the revision it was read at.
struct RegistrationListing {
  std::vector<Registration> registrations;
  Revision revision = 0;
};
[[nodiscard]] RegistrationListing ListRegistrations(const Services& services);

// Every followed stream (ZmqIngest::Streams); empty when ZMQ ingest is not running.
[[nodiscard]] std::vector<std::shared_ptr<const StreamView>> ListStreams(const Services& services);

}  // namespace kvatlas::server
