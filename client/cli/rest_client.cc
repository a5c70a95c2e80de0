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

std::string RestUnreachableAdvice(const std::string& address, const TlsFlags& tls) {
  std::string advice = "  Is kvatlas-server running with --http-listen " + address +
                       "? Pick the server with --http HOST:PORT or KVATLAS_HTTP.";
  if (!tls.enabled) {
    advice += "\n  If it serves HTTPS (tls_cert), pass --ca FILE (or KVATLAS_CA) or --tls.";
  }
  return advice;
}

}  // namespace kvatlas::cli
