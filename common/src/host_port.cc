#include "common/internal/host_port.h"

#include <charconv>

namespace kvatlas {

std::string HostPort::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text) {
  const Status bad =
      Status::InvalidArgument("expected HOST:PORT or [V6]:PORT, got \"" + std::string(text) + "\"");
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad;
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return bad;
  }
  uint16_t port = 0;
  const char* const end = port_text.data() + port_text.size();
  const auto [ptr, ec] = std::from_chars(port_text.data(), end, port);
  if (port_text.empty() || ec != std::errc() || ptr != end) return bad;
  return HostPort{std::string(host), port};
}

bool IsConnectableHostPort(std::string_view text) {
  const Result<HostPort> parsed = ParseHostPort(text);
  return parsed.has_value() && parsed->port != 0;
}

}  // namespace kvatlas
