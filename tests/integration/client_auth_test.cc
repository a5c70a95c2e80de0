// kvatlas::Client with an access token (ClientOptions::token) against the real server:
// refused and accepted tokens, roles, a watch, and a write sent to a follower that the client
// follows to the leader on a connection of its own (which must authenticate too).
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "kvatlas/client/client.h"
#include "tests/integration/auth_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

Result<std::unique_ptr<Client>> ConnectWith(const ServerProcess& server, const std::string& token) {
  ClientOptions options;
  options.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
  options.default_deadline = 20s;
  options.token = token;
  return Client::Connect(std::move(options));
}

BlockEvent Stored(const std::string& backend) {
  BlockEvent event;
  event.type = EventType::kStored;
  event.context.model = "llama";
  event.context.block_size = 4;
  event.holder.id = backend;
  event.token_ids = {1, 2, 3, 4};
  return event;
}

TEST_SUITE("Integration.ClientAuth") {
  TEST_CASE("Client: the token is checked on connect, and each call by its role") {
    TempDir dir;
    WriteTokenFile(dir.path() / "tokens", {kReader, kWriter});
    ServerProcess server(dir.path() / "data", {"--token-file", (dir.path() / "tokens").string()});
    Result<std::unique_ptr<Client>> refused = ConnectWith(server, "kvt_wrong");
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code() == StatusCode::kUnauthenticated);
    // Without a token the client cannot know the server wants one: the first call tells.
    Result<std::unique_ptr<Client>> anonymous = ConnectWith(server, "");
    REQUIRE(anonymous.has_value());
    CHECK((*anonymous)->Ping().code() == StatusCode::kUnauthenticated);
    CHECK(ConnectWith(server, std::string(2000, 't')).error().code() ==
          StatusCode::kInvalidArgument);

    Result<std::unique_ptr<Client>> reader = ConnectWith(server, kReader.token);
    REQUIRE_MESSAGE(reader.has_value(), reader.error().ToString());
    CHECK((*reader)->Ping().ok());
    const Result<IngestAnswer> denied = (*reader)->Ingest({Stored("a")});
    REQUIRE_FALSE(denied.has_value());
    CHECK(denied.error().code() == StatusCode::kPermissionDenied);
    CHECK((*reader)->Ping().ok());  // the connection stays

    WatchOptions watch;
    watch.from = 0;
    Result<std::unique_ptr<WatchStream>> stream = (*reader)->Watch(watch);
    REQUIRE_MESSAGE(stream.has_value(), stream.error().ToString());
    Result<std::unique_ptr<Client>> writer = ConnectWith(server, kWriter.token);
    REQUIRE(writer.has_value());
    REQUIRE((*writer)->Ingest({Stored("b")}).has_value());
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    bool seen = false;
    while (!seen && std::chrono::steady_clock::now() < deadline) {
      Result<std::vector<FeedRecord>> records = (*stream)->Next(100ms);
      REQUIRE(records.has_value());
      for (const FeedRecord& r : *records) seen = seen || r.holder.id == "b";
    }
    CHECK(seen);
  }

  TEST_CASE("Client: a write sent to a follower reaches the leader with the token") {
    TempDir dir;
    WriteTokenFile(dir.path() / "tokens", {kReader, kWriter});
    const auto servers = StartCluster(dir.path(), 3, [&](int) {
      return std::vector<std::string>{"--token-file", (dir.path() / "tokens").string()};
    });
    const auto [follower, leader] = ReadyFollower(servers, kReader.token);
    Result<std::unique_ptr<Client>> writer = ConnectWith(*servers[follower], kWriter.token);
    REQUIRE(writer.has_value());
    const Result<IngestAnswer> applied = (*writer)->Ingest({Stored("via-follower")});
    CHECK_MESSAGE(applied.has_value(), applied.error().ToString());
    CHECK(leader != 0);
    Result<std::unique_ptr<Client>> reader = ConnectWith(*servers[follower], kReader.token);
    REQUIRE(reader.has_value());
    CHECK((*reader)->Ingest({Stored("x")}).error().code() == StatusCode::kPermissionDenied);
  }
}

}  // namespace
}  // namespace kvatlas::testing
