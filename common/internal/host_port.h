// "HOST:PORT" addresses, as kvatlas's flags, config file and announced member addresses
// write them. Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvatlas/common/result.h"

namespace kvatlas {

struct HostPort {
  std::string host;  // an IPv6 address without its brackets
  uint16_t port = 0;
  std::string ToString() const;  // "host:port", "[v6]:port"
};

// "HOST:PORT" or "[V6]:PORT" with a non-empty host and a port in 0..65535 (0: a listener
// picks a free port). kInvalidArgument otherwise; the message does not name a key (callers
// add it with WithContext). An unbracketed IPv6 address is ambiguous and refused.
[[nodiscard]] Result<HostPort> ParseHostPort(std::string_view text);

// A HOST:PORT another process can connect to: parses, and the port is not 0.
[[nodiscard]] bool IsConnectableHostPort(std::string_view text);

}  // namespace kvatlas
