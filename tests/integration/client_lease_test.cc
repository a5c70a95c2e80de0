// Holder leases through the client library (docs/leases.md): Client::Heartbeat (binary
// kHeartbeat) keeps a silent holder alive while another one expires, and a LocalIndex
// following the context drops the expired holder's copies from the feed's holder-expired
// records.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "kvatlas/client/client.h"
#include "kvatlas/client/local_index.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

const ContextKey kContext{"default", "llama", "", 16, ""};

BlockEvent Stored(const std::string& holder, std::vector<uint64_t> keys) {
  BlockEvent e;
  e.type = EventType::kStored;
  e.context = kContext;
  e.holder = HolderKey{holder, 0};
  e.seq_hashes = std::move(keys);
  return e;
}

uint32_t Matched(const LookupAnswer& answer, const std::string& instance) {
  for (const InstanceMatch& m : answer.instances) {
    if (m.instance_id == instance) return m.blocks.disk;
  }
  return 0;
}

TEST_SUITE("Integration.ClientLeases") {
  TEST_CASE("Client::Heartbeat keeps a holder alive; a LocalIndex sees the other expire") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--holder-ttl", "1"});
    const std::string endpoint = server.host() + ":" + std::to_string(server.rpc_port());
    ClientOptions options;
    options.endpoints = {endpoint};
    auto client = Client::Connect(options);
    REQUIRE(client.has_value());

    LocalIndexOptions local_options;
    local_options.client = options;
    local_options.contexts = {kContext};
    auto local = LocalIndex::Start(local_options);
    REQUIRE(local.has_value());
    REQUIRE((*local)->WaitSynced(20s).ok());

    REQUIRE(
        (*client)->Ingest({Stored("silent", {1, 2, 3}), Stored("beating", {1, 2})}).has_value());
    const std::vector<BlockKey> chain = {1, 2, 3};
    bool expired = false;
    for (int i = 0; i < 60 && !expired; ++i) {  // up to 12 s; the TTL is 1 s
      Result<HeartbeatAnswer> beat = (*client)->Heartbeat({HolderKey{"beating", 0}});
      REQUIRE_MESSAGE(beat.has_value(), beat.status().ToString());
      CHECK(beat->holders == 1);
      CHECK(beat->ttl_seconds == 1);
      LookupRequest request;
      request.context = kContext;
      request.by_hash = true;
      request.seq_hashes = chain;
      Result<LookupAnswer> answer = (*client)->Lookup(request);
      REQUIRE(answer.has_value());
      expired = Matched(*answer, "silent") == 0;
      if (expired) {
        CHECK(Matched(*answer, "beating") == 2);
        REQUIRE((*local)->WaitForRevision(answer->revision, 20s).ok());
        Result<LookupAnswer> mine = (*local)->Lookup(kContext, chain);
        REQUIRE(mine.has_value());
        CHECK(Matched(*mine, "silent") == 0);
        CHECK(Matched(*mine, "beating") == 2);
      }
      std::this_thread::sleep_for(200ms);
    }
    CHECK(expired);

    // Bad holders are refused before anything is sent.
    CHECK((*client)->Heartbeat({HolderKey{"", 0}}).status().code() == StatusCode::kInvalidArgument);
    CHECK((*client)->Heartbeat(std::vector<HolderKey>(10'001, HolderKey{"a", 0})).status().code() ==
          StatusCode::kPayloadTooLarge);
  }

  TEST_CASE("Client::Heartbeat with leases off answers ttl_seconds 0") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    ClientOptions options;
    options.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
    auto client = Client::Connect(options);
    REQUIRE(client.has_value());
    Result<HeartbeatAnswer> beat = (*client)->Heartbeat({HolderKey{"a", 0}, HolderKey{"b", 1}});
    REQUIRE(beat.has_value());
    CHECK(beat->holders == 2);
    CHECK(beat->ttl_seconds == 0);
  }
}

}  // namespace
}  // namespace kvatlas::testing
