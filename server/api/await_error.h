// AwaitError(ec): the completion token of a coroutine's Asio/Beast operation that reports
// its error in `ec` instead of throwing (errors are values: the REST server and the peer
// client branch on them).
#pragma once

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

namespace kvatlas::server {

inline auto AwaitError(boost::system::error_code& ec) {
  return boost::asio::redirect_error(boost::asio::use_awaitable, ec);
}

}  // namespace kvatlas::server
