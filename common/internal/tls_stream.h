// MaybeTlsStream<NextLayer>: a stream that is either `NextLayer` itself (a tcp::socket, a
// beast::tcp_stream) or TLS over it (asio::ssl::stream<NextLayer>), chosen at run time when
// the connection is made, behind one AsyncReadStream / AsyncWriteStream interface. Code
// written once against it (Beast's HTTP parser, asio::async_write, a coroutine's reads)
// serves plaintext and TLS listeners alike; the dispatch costs a branch per operation.
//
// Rules of asio::ssl::stream apply to the TLS form: every operation on one connection runs
// in one strand (one read and one write may be outstanding at once), and the stream must
// outlive its outstanding operations. It keeps the context it was made with alive.
// Thread-compatible, like the streams it wraps.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include "common/internal/tls.h"

namespace kvatlas {

template <class NextLayer>
class MaybeTlsStream {
 public:
  using next_layer_type = NextLayer;
  using executor_type = typename NextLayer::executor_type;
  using TlsStream = boost::asio::ssl::stream<NextLayer>;

  // Plaintext.
  explicit MaybeTlsStream(NextLayer next) : plain_(std::move(next)) {}
  // TLS with `context`; null `context`: plaintext.
  MaybeTlsStream(NextLayer next, TlsContextPtr context) : context_(std::move(context)) {
    if (context_) {
      tls_.emplace(std::move(next), *context_);
    } else {
      plain_.emplace(std::move(next));
    }
  }

  bool is_tls() const { return tls_.has_value(); }
  // REQUIRES: is_tls().
  TlsStream& tls() { return *tls_; }
  // The OpenSSL connection; null for plaintext.
  SSL* native_handle() { return tls_ ? tls_->native_handle() : nullptr; }

  NextLayer& next_layer() { return tls_ ? tls_->next_layer() : *plain_; }
  const NextLayer& next_layer() const { return tls_ ? tls_->next_layer() : *plain_; }
  executor_type get_executor() { return next_layer().get_executor(); }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto&& handler, const MutableBuffers& b) {
          if (tls_) {
            tls_->async_read_some(b, std::forward<decltype(handler)>(handler));
          } else {
            plain_->async_read_some(b, std::forward<decltype(handler)>(handler));
          }
        },
        token, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto&& handler, const ConstBuffers& b) {
          if (tls_) {
            tls_->async_write_some(b, std::forward<decltype(handler)>(handler));
          } else {
            plain_->async_write_some(b, std::forward<decltype(handler)>(handler));
          }
        },
        token, buffers);
  }

 private:
  TlsContextPtr context_;  // before tls_: the SSL object is made from it
  std::optional<NextLayer> plain_;
  std::optional<TlsStream> tls_;
};

}  // namespace kvatlas
