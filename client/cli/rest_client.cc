#include "client/cli/rest_client.h"

#include <nlohmann/json.hpp>

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

Result<RestAnswer> RestRequest(const RestTarget& target, const std::string& method,
                               const std::string& path, const std::string& body) {
  const std::optional<std::pair<std::string, int>> to = SplitHostPort(target.address);
  if (!to) return Status::InvalidArgument("not HOST:PORT: \"" + target.address + "\"");
  const std::unique_ptr<httplib::Client> rest = MakeRestClient(to->first, to->second, target.tls);
  httplib::Client& client = *rest;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(target.timeout);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(target.timeout - seconds);
  client.set_connection_timeout(std::min<std::chrono::seconds>(
      std::max<std::chrono::seconds>(seconds, std::chrono::seconds(1)), std::chrono::seconds(3)));
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  httplib::Headers headers;
  for (auto& [name, value] : AuthHeaders(target.token)) headers.emplace(name, value);
  httplib::Result result = method == "GET" ? client.Get(path, headers)
                           : method == "DELETE"
                               ? client.Delete(path, headers)
                               : client.Post(path, headers, body, "application/json");
  if (!result) {
    return Status::Unavailable("cannot reach the kvatlas REST API at " + target.address + ": " +
                               DescribeRestError(result.error()));
  }
  return RestAnswer{result->status, std::move(result->body)};
}

std::string RestErrorText(const RestAnswer& answer) {
  const nlohmann::json doc =
      nlohmann::json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  const auto field = [&](const char* name, const std::string& otherwise) {
    if (!doc.is_object()) return otherwise;
    const auto it = doc.find(name);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : otherwise;
  };
  return "HTTP " + std::to_string(answer.status) + " " + field("code", "error") + ": " +
         field("message", answer.body);
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
