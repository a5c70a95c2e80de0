// Opening a listening TCP acceptor the way every kvatlas listener does: SO_REUSEADDR (not
// SO_REUSEPORT, which would let a second server split the traffic), so a quick restart can
// bind again; or taking over a socket the caller bound earlier (the server binds its
// listeners' sockets before it recovers its state: server/runtime/listen_socket.h).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/system/error_code.hpp>
#include <cerrno>

namespace kvatlas {

// Makes `acceptor` listen on `endpoint`, or, when `bound_fd` >= 0, on a duplicate of that
// socket (bound to `endpoint`, of its protocol, not yet listening; the caller keeps and
// closes its own descriptor). Returns the error of the step that failed.
inline boost::system::error_code ListenOn(boost::asio::ip::tcp::acceptor& acceptor,
                                          const boost::asio::ip::tcp::endpoint& endpoint,
                                          int bound_fd) {
  using boost::asio::ip::tcp;
  boost::system::error_code ec;
  if (bound_fd >= 0) {
    const int fd = fcntl(bound_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return {errno, boost::system::system_category()};
    acceptor.assign(endpoint.protocol(), fd, ec);
    if (ec) close(fd);
  } else {
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
  }
  if (!ec) acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  return ec;
}

}  // namespace kvatlas
