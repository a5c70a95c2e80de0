// Endpoint parsing for the client: "host:port" and "[v6]:port" strings of ClientOptions.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvatlas/common/result.h"

namespace kvatlas::client {

struct Endpoint {
  std::string host;  // without brackets for IPv6 literals
  uint16_t port = 0;

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
  // "host:port", with brackets around an IPv6 host.
  std::string ToString() const;
};

// Parses "host:port" or "[v6]:port"; the port must be 1..65535. kInvalidArgument (quoting
// the text) otherwise.
[[nodiscard]] Result<Endpoint> ParseEndpoint(std::string_view text);

}  // namespace kvatlas::client
