// TLS for kvatlas's listeners and clients (OpenSSL through Boost.Asio's ssl): one policy for
// every context — TLS 1.2 or later, forward-secret AEAD cipher suites only (the TLS 1.3
// defaults, and ECDHE with AES-GCM or ChaCha20-Poly1305 for 1.2), no compression, no
// renegotiation — and the loading of certificates, keys and CAs from PEM files, with errors
// that name the file and OpenSSL's reason. docs/security.md §TLS.
//
// Contexts are immutable once made; connections keep the shared_ptr of the context they
// were made with, so replacing a ReloadableTlsContext's context never touches them.
// Thread-safety: the functions are; ReloadableTlsContext is thread-safe.
#pragma once

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <mutex>
#include <string>

#include "kvatlas/common/result.h"

namespace kvatlas {

using TlsContextPtr = std::shared_ptr<boost::asio::ssl::context>;

struct TlsServerFiles {
  std::string cert_file;  // PEM certificate chain, the server's certificate first
  std::string key_file;   // PEM private key (unencrypted)
  // PEM CA certificates; when set, every client must present a certificate chaining to
  // one of them (mutual TLS), else the handshake fails.
  std::string client_ca_file;
};

struct TlsClientFiles {
  std::string ca_file;  // PEM CA certificates; empty: OpenSSL's default trust store
  // The client's certificate chain and key (PEM), both or neither.
  std::string cert_file;
  std::string key_file;
};

// A server context under the policy. kInvalidArgument naming the key and file ("tls_cert
// /etc/x.pem: ...") when a file cannot be read or parsed, or the key does not match the
// certificate. `*summary`, when given, gets a one-line description of the certificate
// (subject, expiry), and a warning when it has expired or is not yet valid.
[[nodiscard]] Result<TlsContextPtr> MakeServerTlsContext(const TlsServerFiles& files,
                                                         std::string* summary = nullptr);

// A client context under the policy that verifies the server's certificate chain (the
// host name is checked per connection: SetTlsPeerName). kInvalidArgument as above.
[[nodiscard]] Result<TlsContextPtr> MakeClientTlsContext(const TlsClientFiles& files);

// Makes the connection `ssl` (a client's) require that the server's certificate names
// `host` — a DNS name, or an IP address literal checked against the certificate's IP
// addresses — and send it as SNI when it is a name. Call before the handshake.
[[nodiscard]] Status SetTlsPeerName(SSL* ssl, const std::string& host);

// Why a handshake on `ssl` failed with `ec`, for an error message: the certificate
// verification error when there was one ("certificate has expired", "hostname mismatch"),
// else OpenSSL's reason ("wrong version number", "tlsv13 alert certificate required").
[[nodiscard]] std::string TlsFailureReason(const boost::system::error_code& ec, SSL* ssl);

// A server context that can be replaced by one made again from the same files (SIGHUP):
// new connections use the current one, open connections keep theirs.
class ReloadableTlsContext {
 public:
  // Makes the first context; MakeServerTlsContext's errors.
  [[nodiscard]] static Result<std::unique_ptr<ReloadableTlsContext>> Load(TlsServerFiles files);

  // The context for a new connection.
  TlsContextPtr Current() const;
  // Makes a new context from the files. On success it becomes Current() and the result
  // describes the certificate; on failure Current() is unchanged and the error says why.
  [[nodiscard]] Result<std::string> Reload();
  // The certificate's one-line description, as of the last successful load.
  std::string Summary() const;

 private:
  ReloadableTlsContext(TlsServerFiles files, TlsContextPtr context, std::string summary)
      : files_(std::move(files)), context_(std::move(context)), summary_(std::move(summary)) {}

  const TlsServerFiles files_;
  mutable std::mutex mu_;
  TlsContextPtr context_;  // guarded by mu_
  std::string summary_;    // guarded by mu_
};

}  // namespace kvatlas
