#include "client/cli/rpc_client.h"

#include <cstdio>

namespace kvatlas::cli {
namespace {

// How kvatlas::Client names a peer that answered in HTTP (client/src/client_impl.cc).
constexpr std::string_view kHttpPeer = "REST (HTTP) port";

}  // namespace

int Failed(const Status& status, const RpcTarget& target) {
  std::fprintf(stderr, "kvatlas: %s\n", status.ToString().c_str());
  if (status.code() == StatusCode::kUnauthenticated) {
    std::fprintf(stderr,
                 "  The server needs a valid access token: give it with --token or "
                 "KVATLAS_TOKEN.\n");
  }
  if (status.message().find(kHttpPeer) != std::string::npos) {
    std::fprintf(stderr,
                 "  --server (KVATLAS_SERVER) takes the binary protocol port (kvatlas-server "
                 "--rpc-listen), e.g. 127.0.0.1:7071; the REST port goes to --http.\n");
  } else if (!target.tls.enabled && status.code() == StatusCode::kUnavailable) {
    std::fprintf(stderr,
                 "  If the server uses TLS (tls_cert), pass --ca FILE (or KVATLAS_CA) or --tls.\n");
  }
  return 1;
}

std::unique_ptr<Client> ConnectOrExplain(const RpcTarget& target) {
  ClientOptions options;
  options.endpoints = {target.server};
  options.token = target.token;
  options.tls.enabled = target.tls.enabled;
  options.tls.ca_file = target.tls.ca_file;
  options.tls.cert_file = target.tls.cert_file;
  options.tls.key_file = target.tls.key_file;
  options.connect_timeout =
      std::min<std::chrono::milliseconds>(target.timeout, std::chrono::seconds(3));
  options.default_deadline = target.timeout;
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  if (client) return std::move(client).value();
  if (client.error().code() == StatusCode::kUnavailable &&
      client.error().message().find(kHttpPeer) == std::string::npos) {
    std::fprintf(stderr,
                 "kvatlas: cannot reach a kvatlas server at %s: %s\n"
                 "  Is kvatlas-server running with --rpc-listen %s? Pick the server with "
                 "--server HOST:PORT or KVATLAS_SERVER.\n",
                 target.server.c_str(), client.error().message().c_str(), target.server.c_str());
  } else {
    (void)Failed(client.error(), target);
  }
  return nullptr;
}

}  // namespace kvatlas::cli
