// ZmqIngest::ValidateEndpoint: the endpoint syntax kvatlas accepts for publishers,
// replay endpoints and listeners; and the transport allow-list (endpoint_policy.h).
#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "server/zmq/endpoint_policy.h"
#include "server/zmq/zmq_ingest.h"

namespace kvatlas::server {
namespace {

constexpr std::string_view kKnownTransports[] = {"tcp", "ipc", "inproc"};

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

}  // namespace

std::vector<std::string_view> SplitCommaList(std::string_view csv) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= csv.size()) {
    size_t end = csv.find(',', start);
    if (end == std::string_view::npos) end = csv.size();
    out.push_back(csv.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<std::vector<std::string>> ParseTransports(std::string_view csv) {
  std::vector<std::string> out;
  for (const std::string_view item : SplitCommaList(csv)) {
    if (std::find(std::begin(kKnownTransports), std::end(kKnownTransports), item) ==
        std::end(kKnownTransports)) {
      return Status::InvalidArgument("zmq_allowed_transports: \"" + std::string(csv) +
                                     "\": expected a comma-separated list of tcp, ipc, inproc");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.emplace_back(item);
  }
  return out;
}

Status CheckTransport(std::string_view field, std::string_view endpoint,
                      const std::vector<std::string>& allowed) {
  const std::string_view scheme = endpoint.substr(0, endpoint.find("://"));
  if (std::find(allowed.begin(), allowed.end(), scheme) != allowed.end()) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + ": endpoint \"" + std::string(endpoint) +
                                 "\": transport " + std::string(scheme) +
                                 " is not allowed (zmq_allowed_transports: " + Join(allowed) + ")");
}

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
