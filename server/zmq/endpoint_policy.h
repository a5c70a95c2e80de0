// Which ZMQ transports kvatlas may connect to for registered publishers (config
// zmq_allowed_transports, docs/limits.md): a registration is persisted and its socket
// reconnected forever, so by default only tcp:// is followed; ipc:// and inproc:// (local
// files and in-process names) only when configured. Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"

namespace kvatlas::server {

// What registrations the service layer admits (registration_service.h), however they
// arrive (POST /register, the config file's publishers).
struct RegistrationLimits {
  // Registrations at once; a new key past it is refused (replacing one is not new).
  size_t max_registrations = 256;
  // Transports a publisher or replay endpoint may use.
  std::vector<std::string> allowed_transports = {"tcp"};
};

// The transports kvatlas knows: tcp, ipc, inproc.
// "tcp,ipc" → {"tcp", "ipc"}. kInvalidArgument naming zmq_allowed_transports for an empty
// list, an empty or unknown element.
[[nodiscard]] Result<std::vector<std::string>> ParseTransports(std::string_view csv);

// Ok when `endpoint`'s scheme (text before "://") is in `allowed`; else kInvalidArgument
// "<field>: endpoint "ipc://x": transport ipc is not allowed (zmq_allowed_transports: tcp)".
[[nodiscard]] Status CheckTransport(std::string_view field, std::string_view endpoint,
                                    const std::vector<std::string>& allowed);

}  // namespace kvatlas::server
