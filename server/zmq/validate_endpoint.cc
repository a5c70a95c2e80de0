// ZmqIngest::ValidateEndpoint: the endpoint syntax kvatlas accepts for publishers,
// replay endpoints and listeners.
#include <algorithm>
#include <string>
#include <string_view>

#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {

Status ZmqIngest::ValidateEndpoint(std::string_view endpoint, bool for_bind) {
  auto invalid = [&](const std::string& why) {
    return Status::InvalidArgument("endpoint \"" + std::string(endpoint) + "\": " + why);
  };
  const size_t scheme_end = endpoint.find("://");
  if (scheme_end == std::string_view::npos) {
    return invalid("expected tcp://HOST:PORT, ipc://PATH or inproc://NAME");
  }
  const std::string_view scheme = endpoint.substr(0, scheme_end);
  const std::string_view rest = endpoint.substr(scheme_end + 3);
  if (scheme == "ipc" || scheme == "inproc") {
    if (rest.empty()) return invalid("the " + std::string(scheme) + " name is empty");
    return Status::Ok();
  }
  if (scheme != "tcp") return invalid("unsupported scheme \"" + std::string(scheme) + "\"");
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return invalid("expected tcp://HOST:PORT");
  const std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  if (host == "*" && !for_bind) return invalid("cannot connect to host *");
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return invalid("the port must be a number");
  }
  const int number = std::stoi(std::string(port));
  if (number > 65535 || (number == 0 && !for_bind)) return invalid("port out of range");
  return Status::Ok();
}

}  // namespace kvatlas::server
