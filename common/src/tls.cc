#include "common/internal/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvatlas {
namespace {

namespace ssl = boost::asio::ssl;
using boost::system::error_code;

// TLS 1.2's suites: ECDHE (forward secrecy) with an AEAD cipher. TLS 1.3's are OpenSSL's
// defaults, all of that kind.
constexpr char kTls12Ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// OpenSSL's queued errors, oldest first ("no start line; PEM lib"); empties the queue.
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    std::string text = reason != nullptr ? reason : "error " + std::to_string(e);
    if (out.find(text) == std::string::npos) out += (out.empty() ? "" : "; ") + text;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Status Invalid(const char* what, const std::string& path, const std::string& why) {
  return Status::InvalidArgument(std::string(what) + " " + path + ": " + why);
}

// The file must be readable: OpenSSL's own message for a missing file is obscure.
Status CheckReadable(const char* what, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr)
    return Invalid(what, path, std::string("cannot read: ") + std::strerror(errno));
  std::fclose(file);
  return Status::Ok();
}

TlsContextPtr NewContext(ssl::context::method method) {
  auto context = std::make_shared<ssl::context>(method);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(
      native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_cipher_list(native, kTls12Ciphers);
  return context;
}

Status UseCertificateAndKey(SSL_CTX* native, const std::string& cert_file,
                            const std::string& key_file, const char* cert_what,
                            const char* key_what) {
  ERR_clear_error();
  KVATLAS_RETURN_IF_ERROR(CheckReadable(cert_what, cert_file));
  KVATLAS_RETURN_IF_ERROR(CheckReadable(key_what, key_file));
  if (SSL_CTX_use_certificate_chain_file(native, cert_file.c_str()) != 1) {
    return Invalid(cert_what, cert_file, "not a PEM certificate chain (" + OpenSslErrors() + ")");
  }
  // OpenSSL checks the key against the certificate as it loads it.
  if (SSL_CTX_use_PrivateKey_file(native, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(native) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
      return Invalid(key_what, key_file,
                     "not an unencrypted PEM private key (" + OpenSslErrors() + ")");
    }
    return Invalid(key_what, key_file,
                   "does not match the certificate " + cert_file + " (" + OpenSslErrors() + ")");
  }
  return Status::Ok();
}

Status UseCaFile(SSL_CTX* native, const std::string& ca_file, const char* what) {
  ERR_clear_error();
  KVATLAS_RETURN_IF_ERROR(CheckReadable(what, ca_file));
  if (SSL_CTX_load_verify_locations(native, ca_file.c_str(), nullptr) != 1) {
    return Invalid(what, ca_file, "no PEM CA certificate in it (" + OpenSslErrors() + ")");
  }
  return Status::Ok();
}

std::string TimeText(const ASN1_TIME* time) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "?";
  ASN1_TIME_print(bio, time);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n > 0 ? n : 0));
  BIO_free(bio);
  return out;
}

// "certificate "/CN=x" valid from ... until ...", with a warning when not valid now.
std::string Describe(SSL_CTX* native) {
  X509* cert = SSL_CTX_get0_certificate(native);
  if (cert == nullptr) return "no certificate";
  char subject[256] = "";
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
  std::string out = std::string("certificate \"") + subject + "\" valid until " +
                    TimeText(X509_get0_notAfter(cert));
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    out += "; it has expired: clients will refuse it";
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    out += "; it is not valid yet (from " + TimeText(X509_get0_notBefore(cert)) +
           "): clients will refuse it";
  }
  return out;
}

}  // namespace

Result<TlsContextPtr> MakeServerTlsContext(const TlsServerFiles& files, std::string* summary) {
  TlsContextPtr context = NewContext(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  KVATLAS_RETURN_IF_ERROR(
      UseCertificateAndKey(native, files.cert_file, files.key_file, "tls_cert", "tls_key"));
  if (!files.client_ca_file.empty()) {
    KVATLAS_RETURN_IF_ERROR(UseCaFile(native, files.client_ca_file, "tls_client_ca"));
    // The CA names sent in the CertificateRequest, so that a client picks the right
    // certificate.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.client_ca_file.c_str());
    if (names == nullptr) {
      return Invalid("tls_client_ca", files.client_ca_file,
                     "no PEM CA certificate in it (" + OpenSslErrors() + ")");
    }
    SSL_CTX_set_client_CA_list(native, names);
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  if (summary != nullptr) *summary = Describe(native);
  return context;
}

Result<TlsContextPtr> MakeClientTlsContext(const TlsClientFiles& files) {
  TlsContextPtr context = NewContext(ssl::context::tls_client);
  SSL_CTX* native = context->native_handle();
  if (files.cert_file.empty() != files.key_file.empty()) {
    return Status::InvalidArgument(
        "TLS client certificate: give both the certificate and the key files, or neither");
  }
  if (!files.cert_file.empty()) {
    KVATLAS_RETURN_IF_ERROR(UseCertificateAndKey(native, files.cert_file, files.key_file,
                                                 "client certificate", "client key"));
  }
  if (files.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(native) != 1) {
      return Status::InvalidArgument("the system's CA certificates cannot be loaded (" +
                                     OpenSslErrors() + "); give a CA file");
    }
  } else {
    KVATLAS_RETURN_IF_ERROR(UseCaFile(native, files.ca_file, "CA file"));
  }
  SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
  return context;
}

Status SetTlsPeerName(SSL* ssl, const std::string& host) {
  error_code ec;
  (void)boost::asio::ip::make_address(host, ec);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (!ec) {
    if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
      return Status::InvalidArgument("TLS: cannot verify the IP address \"" + host + "\"");
    }
    return Status::Ok();
  }
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (SSL_set1_host(ssl, host.c_str()) != 1 || SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
    return Status::InvalidArgument("TLS: cannot verify the host name \"" + host + "\"");
  }
  return Status::Ok();
}

std::string TlsFailureReason(const error_code& ec, SSL* ssl) {
  if (ssl != nullptr) {
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) return X509_verify_cert_error_string(verify);
  }
  if (ec == boost::asio::error::eof || ec == boost::asio::ssl::error::stream_truncated) {
    return "the peer closed the connection during the handshake";
  }
  return ec.message();
}

Result<std::unique_ptr<ReloadableTlsContext>> ReloadableTlsContext::Load(TlsServerFiles files) {
  std::string summary;
  KVATLAS_ASSIGN_OR_RETURN(TlsContextPtr context, MakeServerTlsContext(files, &summary));
  return std::unique_ptr<ReloadableTlsContext>(
      new ReloadableTlsContext(std::move(files), std::move(context), std::move(summary)));
}

TlsContextPtr ReloadableTlsContext::Current() const {
  std::lock_guard lock(mu_);
  return context_;
}

Result<std::string> ReloadableTlsContext::Reload() {
  std::string summary;
  KVATLAS_ASSIGN_OR_RETURN(TlsContextPtr context, MakeServerTlsContext(files_, &summary));
  std::lock_guard lock(mu_);
  context_ = std::move(context);
  summary_ = summary;
  return summary;
}

std::string ReloadableTlsContext::Summary() const {
  std::lock_guard lock(mu_);
  return summary_;
}

}  // namespace kvatlas
