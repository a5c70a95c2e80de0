// Engine publishers kvatlas follows (the Mooncake Conductor's /register and /unregister,
// docs/engine-events.md): registrations are replicated state, so they change through the
// Applier like any write; and the live status of every followed stream. Safe from any
// thread.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/model/registration.h"
#include "server/service/services.h"
#include "server/zmq/endpoint_policy.h"

namespace kvatlas::server {

// Follows `registration` (replacing one with the same Key()); returns the revision.
// kInvalidArgument naming the field when an endpoint's transport is not allowed, and
// kResourceExhausted naming max_registrations when a new key would pass the cap
// (CheckRegistrationLimits; registrations are admitted one at a time, so concurrent
// requests cannot overshoot it together).
[[nodiscard]] Result<Revision> RegisterPublisher(const Services& services,
                                                 Registration registration);

// Whether `registry` may take `added` (new keys count, replacements do not): every
// endpoint's transport allowed and at most limits.max_registrations in all. Pure.
[[nodiscard]] Status CheckRegistrationLimits(const Registry& registry,
                                             std::span<const Registration> added,
                                             const RegistrationLimits& limits);

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

// kUnavailable naming the streams that cannot be followed: whose error (a socket that
// cannot be created, a connection libzmq keeps closing) has lasted kStreamErrorGrace or
// more. GET /readyz reports it. A publisher that is merely down is not an error.
inline constexpr std::chrono::milliseconds kStreamErrorGrace{10'000};
[[nodiscard]] Status CheckStreamsFollowed(const Services& services);

// The registered streams that have been connecting (no message and no confirmed connection
// to their publisher, stream_stats.h) for kStreamConnectingGrace or more: what GET /readyz
// reports, without failing, as "warnings" (an engine that is down or still loading its
// model stalls only its own stream; this server still takes writes). One line naming the
// stream, its endpoint and for how long; at most kMaxStreamWarnings, then a count of the
// others.
inline constexpr std::chrono::milliseconds kStreamConnectingGrace{10'000};
inline constexpr size_t kMaxStreamWarnings = 3;
[[nodiscard]] std::vector<std::string> StreamsStuckConnecting(const Services& services);

// Every followed stream (ZmqIngest::Streams); empty when ZMQ ingest is not running.
[[nodiscard]] std::vector<std::shared_ptr<const StreamView>> ListStreams(const Services& services);

}  // namespace kvatlas::server
