// The CLI's binary-protocol connection (kvatlas::Client) for lookup, blocks, ingest, stats
// and ping, and how its failures are reported: the Status with advice for the usual causes
// (a missing token, TLS, a REST port given as --server).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "client/cli/args.h"
#include "kvatlas/client/client.h"

namespace kvatlas::cli {

// Where the binary-protocol requests go and how.
struct RpcTarget {
  std::string server;  // HOST:PORT (ServerAddress)
  std::chrono::milliseconds timeout{30000};
  TlsFlags tls;
  std::string token;  // "" = none
};

// Prints "kvatlas: <status>" and advice for it to stderr; returns 1.
int Failed(const Status& status, const RpcTarget& target);

// A connected client, or nullptr once the failure has been printed (then exit 1).
[[nodiscard]] std::unique_ptr<Client> ConnectOrExplain(const RpcTarget& target);

}  // namespace kvatlas::cli
