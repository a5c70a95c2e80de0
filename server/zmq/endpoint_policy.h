// Which ZMQ endpoints kvatlas may connect to for registered publishers (docs/limits.md): a
// registration is persisted and its socket reconnected forever, so by default only tcp:// is
// followed (config zmq_allowed_transports; ipc:// and inproc://, local files and in-process
// names, only when configured), and the hosts of tcp endpoints can be restricted to
// networks and names (config zmq_allowed_hosts). Pure functions; safe from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"

namespace kvatlas::server {

// One element of zmq_allowed_hosts: "*", an address or network ("10.0.0.5", "10.0.0.0/8",
// "fd00::/8", "[fd00::1]"), a host name ("engine-0.svc") or a name suffix
// ("*.engines.svc.cluster.local", which matches names ending in ".engines.svc...").
struct HostPattern {
  enum class Kind : uint8_t { kAny, kNetwork, kName, kSuffix };
  Kind kind = Kind::kAny;
  std::string text;  // as configured, for messages
  // kNetwork: the address (IPv4 in the first 4 bytes), its family and prefix length.
  std::array<uint8_t, 16> address{};
  bool ipv6 = false;
  unsigned prefix_bits = 0;
  // kName: the lower-case name; kSuffix: the lower-case suffix with its leading dot.
  std::string name;
};

// What registrations the service layer admits (registration_service.h), however they
// arrive (POST /register, the config file's publishers).
struct RegistrationLimits {
  // Registrations at once; a new key past it is refused (replacing one is not new).
  size_t max_registrations = 256;
  // Transports a publisher or replay endpoint may use.
  std::vector<std::string> allowed_transports = {"tcp"};
  // Hosts a tcp publisher or replay endpoint may name.
  std::vector<HostPattern> allowed_hosts = {HostPattern{}};
};

// "a,b,,c" → {"a", "b", "", "c"}; "" → {""}. The views point into `csv`.
[[nodiscard]] std::vector<std::string_view> SplitCommaList(std::string_view csv);

// The transports kvatlas knows: tcp, ipc, inproc.
// "tcp,ipc" → {"tcp", "ipc"}. kInvalidArgument naming zmq_allowed_transports for an empty
// list, an empty or unknown element.
[[nodiscard]] Result<std::vector<std::string>> ParseTransports(std::string_view csv);

// Ok when `endpoint`'s scheme (text before "://") is in `allowed`; else kInvalidArgument
// "<field>: endpoint "ipc://x": transport ipc is not allowed (zmq_allowed_transports: tcp)".
[[nodiscard]] Status CheckTransport(std::string_view field, std::string_view endpoint,
                                    const std::vector<std::string>& allowed);

// "10.0.0.0/8,*.svc" → its patterns. kInvalidArgument naming zmq_allowed_hosts for an
// empty list or element, a bad address or prefix length, or a name with characters a host
// name cannot have.
[[nodiscard]] Result<std::vector<HostPattern>> ParseHostPatterns(std::string_view csv);

// Ok when `endpoint` is not tcp://, or its host matches one of `allowed`: an address
// literal matches "*" and the networks containing it; a name matches "*", itself and its
// suffixes -- never a network, since the name is resolved only later, by libzmq, and could
// resolve anywhere. Else kInvalidArgument "<field>: host 10.1.2.3 of endpoint
// "tcp://10.1.2.3:5557" is not allowed (zmq_allowed_hosts: 10.0.0.0/24)".
[[nodiscard]] Status CheckHost(std::string_view field, std::string_view endpoint,
                               const std::vector<HostPattern>& allowed);

}  // namespace kvatlas::server
