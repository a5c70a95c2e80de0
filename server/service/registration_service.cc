#include "server/service/registration_service.h"

#include <mutex>
#include <string>
#include <utility>

#include "server/service/ingest_service.h"

namespace kvatlas::server {

Status CheckRegistrationLimits(const Registry& registry, std::span<const Registration> added,
                               const RegistrationLimits& limits) {
  size_t count = registry.registrations.size();
  for (const Registration& r : added) {
    if (r.PublishesEvents()) {
      KVATLAS_RETURN_IF_ERROR(CheckTransport("endpoint", r.endpoint, limits.allowed_transports));
      KVATLAS_RETURN_IF_ERROR(CheckHost("endpoint", r.endpoint, limits.allowed_hosts));
    }
    if (!r.replay_endpoint.empty()) {
      KVATLAS_RETURN_IF_ERROR(
          CheckTransport("replay_endpoint", r.replay_endpoint, limits.allowed_transports));
      KVATLAS_RETURN_IF_ERROR(
          CheckHost("replay_endpoint", r.replay_endpoint, limits.allowed_hosts));
    }
    if (!registry.registrations.contains(r.Key())) ++count;
  }
  if (count > limits.max_registrations) {
    return Status::ResourceExhausted(
        "too many registrations: max_registrations is " + std::to_string(limits.max_registrations) +
        " and " + std::to_string(registry.registrations.size()) +
        " publishers are registered; unregister one first (POST /unregister)");
  }
  return Status::Ok();
}

namespace {

// The configured name limits on a registration's names (its REST field names).
Status CheckRegistrationNames(const Registration& r, const NameLimits& limits) {
  const std::string_view key = "max_name_bytes";
  KVATLAS_RETURN_IF_ERROR(CheckLength("", "modelname", r.model, limits.name_bytes, key));
  KVATLAS_RETURN_IF_ERROR(CheckLength("", "lora_name", r.lora_name, limits.name_bytes, key));
  KVATLAS_RETURN_IF_ERROR(CheckLength("", "tenant_id", r.tenant_id, limits.name_bytes, key));
  KVATLAS_RETURN_IF_ERROR(CheckLength("", "instance_id", r.instance_id, limits.name_bytes, key));
  // The registration key is the stream's: the separator of placed streams' keys
  // (registration.h PlacedStreamKey) must not occur in it.
  for (const auto& [field, value] :
       {std::pair<std::string_view, const std::string&>{"instance_id", r.instance_id},
        {"tenant_id", r.tenant_id}}) {
    if (value.find(kPlacedStreamSeparator) != std::string::npos) {
      return Status::InvalidArgument(std::string(field) +
                                     ": must not contain the byte 0x1f (it separates a "
                                     "stream's key from a placed context's)");
    }
  }
  return CheckLength("", "additionalsalt", r.additional_salt, limits.salt_bytes, "max_salt_bytes");
}

}  // namespace

Result<Revision> RegisterPublisher(const Services& services, Registration registration) {
  KVATLAS_RETURN_IF_ERROR(CheckRegistrationNames(registration, services.options.names));
  // One registration at a time: the check and the write must not interleave with another.
  static std::mutex admit_mu;
  std::lock_guard lock(admit_mu);
  KVATLAS_RETURN_IF_ERROR(services.machine->ReadRegistry([&](const Registry& r, Revision) {
    return CheckRegistrationLimits(r, std::span(&registration, 1), services.options.registrations);
  }));
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

Status CheckStreamsFollowed(const Services& services) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::string failing;
  size_t count = 0;
  for (const auto& view : ListStreams(services)) {
    const int64_t since = view->error_since_unix_ms();
    if (since == 0 || now - since < kStreamErrorGrace.count()) continue;
    if (++count <= 3) failing += (failing.empty() ? "" : "; ") + view->key + ": " + view->error();
  }
  if (count == 0) return Status::Ok();
  return Status::Unavailable(std::to_string(count) + " engine stream(s) cannot be followed (" +
                             failing + (count > 3 ? "; ..." : "") + "); see GET /v1/streams");
}

std::vector<std::string> StreamsStuckConnecting(const Services& services) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::vector<std::string> warnings;
  size_t more = 0;
  for (const auto& view : ListStreams(services)) {
    const StreamCounters& c = view->counters;
    if (!c.connecting.load(std::memory_order_relaxed)) continue;
    const int64_t for_ms = now - c.connecting_since_unix_ms.load(std::memory_order_relaxed);
    if (for_ms < kStreamConnectingGrace.count()) continue;
    if (warnings.size() == kMaxStreamWarnings) {
      ++more;
      continue;
    }
    warnings.push_back("engine stream " + view->key + " has been connecting to " + view->endpoint +
                       " for " + std::to_string(for_ms / 1000) +
                       " s: no publisher answers there, so nothing is ingested from it (is the "
                       "engine running, and its endpoint right?); see GET /v1/streams");
  }
  if (more > 0) {
    warnings.push_back(std::to_string(more) + " more engine stream(s) still connecting");
  }
  return warnings;
}

std::vector<std::shared_ptr<const StreamView>> ListStreams(const Services& services) {
  if (services.zmq == nullptr) return {};
  return services.zmq->Streams();
}

}  // namespace kvatlas::server
