#include "server/runtime/listen_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/internal/host_port.h"

namespace kvatlas::server {
namespace {

// An open socket bound to `host`:`port`, or the errno of what failed.
struct Bound {
  int fd = -1;
  int error = 0;
};

Bound BindTo(const sockaddr* address, socklen_t length) {
  Bound bound;
  bound.fd = socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (bound.fd < 0) {
    bound.error = errno;
    return bound;
  }
  const int on = 1;
  if (setsockopt(bound.fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      bind(bound.fd, address, length) != 0) {
    bound.error = errno;
    close(bound.fd);
    bound.fd = -1;
  }
  return bound;
}

uint16_t PortOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

}  // namespace

ListenSocket& ListenSocket::operator=(ListenSocket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

void ListenSocket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string BindErrorText(int error) {
  switch (error) {
    case EADDRINUSE:
      return "address already in use";
    case EADDRNOTAVAIL:
      return "not an address of this machine (cannot assign requested address)";
    case EACCES:
      return "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)";
    default: {
      std::string text = std::strerror(error);
      if (!text.empty()) text[0] = static_cast<char>(std::tolower(text[0]));
      return text;
    }
  }
}

Result<ListenSocket> BindListenSocket(std::string_view what, const std::string& address,
                                      bool ipv4_only) {
  const std::string where = std::string(what) + " " + address;
  const Result<HostPort> host_port = ParseHostPort(address);
  if (!host_port.has_value()) return host_port.status().WithContext(where);
  const HostPort& parsed = *host_port;
  addrinfo hints{};
  hints.ai_family = ipv4_only ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | (ipv4_only ? AI_NUMERICHOST : 0);
  addrinfo* found = nullptr;
  const int rv =
      getaddrinfo(parsed.host.c_str(), std::to_string(parsed.port).c_str(), &hints, &found);
  if (rv != 0 || found == nullptr) {
    return Status::InvalidArgument(
        where + ": " +
        (ipv4_only ? std::string("the host must be an IPv4 address")
                   : "cannot resolve " + parsed.host + " (" + gai_strerror(rv) + ")"));
  }
  const Bound bound = BindTo(found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (bound.fd < 0) return Status::Unavailable(where + ": " + BindErrorText(bound.error));
  return ListenSocket(bound.fd, PortOf(bound.fd));
}

Status ProbeZmqBind(std::string_view what, const std::string& endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return Status::Ok();
  const std::string rest = endpoint.substr(kTcp.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return Status::Ok();
  std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Ok();  // "*" (any port), or not a port: ZMQ's to judge
  }
  const unsigned long port_number = std::stoul(port);
  if (port_number == 0 || port_number > 65535) return Status::Ok();
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  sockaddr_storage address{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (host == "*" || inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    if (host == "*") v4->sin_addr.s_addr = htonl(INADDR_ANY);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port_number));
    length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port_number));
    length = sizeof(sockaddr_in6);
  } else {
    return Status::Ok();  // an interface or host name: ZMQ resolves it
  }
  const Bound bound = BindTo(reinterpret_cast<const sockaddr*>(&address), length);
  if (bound.fd < 0) {
    return Status::Unavailable(std::string(what) + " " + endpoint + ": " +
                               BindErrorText(bound.error));
  }
  close(bound.fd);
  return Status::Ok();
}

}  // namespace kvatlas::server
