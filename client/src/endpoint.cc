#include "client/src/endpoint.h"

#include <charconv>

namespace kvatlas::client {

std::string Endpoint::ToString() const {
  const std::string port_text = std::to_string(port);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port_text;
  return host + ":" + port_text;
}

Result<Endpoint> ParseEndpoint(std::string_view text) {
  const auto invalid = [&](std::string_view why) {
    return Status::InvalidArgument("endpoint \"" + std::string(text) + "\": " + std::string(why));
  };
  Endpoint endpoint;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return invalid("missing ']' after an IPv6 address");
    endpoint.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') return invalid("expected [v6]:port");
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return invalid("expected host:port");
    endpoint.host = std::string(text.substr(0, colon));
    if (endpoint.host.find(':') != std::string::npos) {
      return invalid("an IPv6 address needs brackets: [v6]:port");
    }
    port_text = text.substr(colon + 1);
  }
  if (endpoint.host.empty()) return invalid("empty host");
  uint32_t port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port == 0 || port > 65535) {
    return invalid("the port must be a number from 1 to 65535");
  }
  endpoint.port = static_cast<uint16_t>(port);
  return endpoint;
}

}  // namespace kvatlas::client
