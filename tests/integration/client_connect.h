// Integration tests that talk to a real server through kvatlas::Client: one connection to a
// ServerProcess's binary-protocol port.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "kvatlas/client/client.h"
#include "tests/integration/server_process.h"

namespace kvatlas::testing {

// A client of `server`; the test fails unless it connects. The default deadline is long
// because sanitizer builds are slow.
inline std::unique_ptr<Client> ConnectClient(const ServerProcess& server) {
  ClientOptions options;
  options.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
  options.default_deadline = std::chrono::seconds(20);
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
  return std::move(client).value();
}

}  // namespace kvatlas::testing
