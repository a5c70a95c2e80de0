#include "client/cli/rest_client.h"

namespace kvatlas::cli {

std::unique_ptr<httplib::Client> MakeRestClient(const std::string& host, int port,
                                                const TlsFlags& tls) {
  if (!tls.enabled) return std::make_unique<httplib::Client>(host, port);
  const std::string bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  auto client = std::make_unique<httplib::Client>(
      "https://" + bracketed + ":" + std::to_string(port), tls.cert_file, tls.key_file);
  if (!tls.ca_file.empty()) client->set_ca_cert_path(tls.ca_file.c_str());
  client->enable_server_certificate_verification(true);
  return client;
}

std::string DescribeRestError(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "the connection was refused or the address is unreachable";
    case httplib::Error::ConnectionTimeout:
      return "no connection within the timeout";
    case httplib::Error::Read:
      return "the connection closed before an answer came (a TLS server reached without "
             "--tls, or not a REST port?)";
    case httplib::Error::Write:
      return "the request could not be sent (the connection closed)";
    case httplib::Error::SSLConnection:
      return "the TLS handshake failed (a plain HTTP server reached with --tls?)";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate did not verify (see --ca)";
    case httplib::Error::SSLLoadingCerts:
      return "the TLS files could not be loaded";
    default:
      return "request failed (" + httplib::to_string(error) + ")";
  }
}

std::string RestUnreachableAdvice(const std::string& address, const TlsFlags& tls) {
  std::string advice = "  Is kvatlas-server running with --http-listen " + address +
                       "? Pick the server with --http HOST:PORT or KVATLAS_HTTP.";
  if (!tls.enabled) {
    advice += "\n  If it serves HTTPS (tls_cert), pass --ca FILE (or KVATLAS_CA) or --tls.";
  }
  return advice;
}

}  // namespace kvatlas::cli
