// kvatlas::Client against the real server binary over the binary protocol: answers equal
// the REST API's, pipelining from many threads on one connection, reconnection after a
// server restart, deadlines and an unreachable server.
#include "kvatlas/client/client.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kvatlas/client/block_hasher.h"
#include "kvatlas/common/json_codec.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kBlockSize = 16;

std::string RpcEndpoint(const ServerProcess& server) {
  return server.host() + ":" + std::to_string(server.rpc_port());
}

std::unique_ptr<Client> MustConnect(std::vector<std::string> endpoints, size_t connections = 1) {
  ClientOptions options;
  options.endpoints = std::move(endpoints);
  options.connections = connections;
  options.default_deadline = 20s;  // sanitizer builds are slow
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
  return std::move(client).value();
}

BlockEvent Stored(const std::string& backend, Tier tier, std::vector<uint32_t> tokens) {
  BlockEvent event;
  event.type = EventType::kStored;
  event.context.model = "llama";
  event.context.block_size = kBlockSize;
  event.holder.id = backend;
  event.tier = tier;
  event.medium = std::string(TierName(tier));
  event.token_ids = std::move(tokens);
  return event;
}

LookupRequest LookupTokens(std::vector<uint32_t> tokens) {
  LookupRequest request;
  request.context.model = "llama";
  request.context.block_size = kBlockSize;
  request.token_ids = std::move(tokens);
  return request;
}

json LookupJson(const std::vector<uint32_t>& tokens) {
  return json{{"model_name", "llama"}, {"block_size", kBlockSize}, {"token_ids", tokens}};
}

// A server with a prompt of 8 blocks: engine-a holds all 8 on GPU, engine-b the first 3
// on CPU (shared prefix), a pool the first 2 with locations.
struct Fixture {
  Fixture()
      : server(dir.path() / "data"),
        endpoint(RpcEndpoint(server)),
        client(MustConnect({endpoint})) {}

  void IngestScenario() {
    std::vector<BlockEvent> events = {
        Stored("engine-a", Tier::kGpu, prompt),
        Stored("engine-b", Tier::kCpu, {prompt.begin(), prompt.begin() + 3 * kBlockSize})};
    BlockEvent pool =
        Stored("pool", Tier::kShared, {prompt.begin(), prompt.begin() + 2 * kBlockSize});
    pool.locations = {"nvme://0", "nvme://1"};
    events.push_back(pool);
    Result<IngestAnswer> ack = client->Ingest(events);
    REQUIRE_MESSAGE(ack.has_value(), ack.status().ToString());
    CHECK(ack->events == 3);
    CHECK(ack->blocks == 13);
    CHECK(ack->revision > 0);
  }

  TempDir dir;
  ServerProcess server;
  std::string endpoint;
  std::unique_ptr<Client> client;
  std::vector<uint32_t> prompt = Tokens(500, 8 * kBlockSize);
};

TEST_SUITE("Integration.Client") {
  TEST_CASE("Client: ingest then lookup answers exactly what REST /v1/lookup answers") {
    Fixture f;
    f.IngestScenario();
    std::vector<uint32_t> query = f.prompt;
    query.insert(query.end(), {1, 2, 3});  // a partial block never counts
    Result<LookupAnswer> answer = f.client->Lookup(LookupTokens(query));
    REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    CHECK(answer->blocks_queried == 8);
    CHECK(answer->blocks_found == 8);
    REQUIRE(answer->instances.size() == 2);
    CHECK(answer->instances[0].instance_id == "engine-a");
    CHECK(answer->instances[0].blocks.gpu == 8);
    CHECK(answer->instances[1].blocks.cpu == 3);
    REQUIRE(answer->shared.size() == 1);
    CHECK(answer->shared[0].locations == std::vector<std::string>{"nvme://0", "nvme://1"});

    httplib::Client rest = f.server.Client();
    Answer via_rest = Post(rest, "/v1/lookup", LookupJson(query));
    REQUIRE(via_rest.status == 200);
    CHECK(json::parse(EncodeLookupAnswer(*answer)) == via_rest.body);

    // Lookup by hashes computed with the client's BlockHasher finds the same blocks.
    LookupRequest by_hash;
    by_hash.context = answer->context;
    by_hash.by_hash = true;
    by_hash.seq_hashes = BlockHasher().SequenceHashes(f.prompt, kBlockSize);
    Result<LookupAnswer> hashed = f.client->Lookup(by_hash);
    REQUIRE(hashed.has_value());
    CHECK(hashed->instances == answer->instances);

    // Locate equals GET /v1/blocks/{key}.
    Result<LocateAnswer> located = f.client->Locate(LocateRequest{by_hash.seq_hashes[0], {}});
    REQUIRE_MESSAGE(located.has_value(), located.status().ToString());
    CHECK(located->copies.size() == 3);
    Answer blocks = Get(rest, "/v1/blocks/" + std::to_string(by_hash.seq_hashes[0]));
    REQUIRE(blocks.status == 200);
    CHECK(blocks.body["copies"].size() == located->copies.size());
    CHECK(blocks.body["revision"] == located->revision);

    Result<StatsAnswer> stats = f.client->Stats();
    REQUIRE_MESSAGE(stats.has_value(), stats.status().ToString());
    const json doc = json::parse(stats->json);
    CHECK(doc["index"]["blocks"] == 8);
    CHECK(f.client->Ping().ok());
  }

  TEST_CASE("Client: 1,000 concurrent lookups from 8 threads pipeline on one connection") {
    Fixture f;
    f.IngestScenario();
    constexpr int kThreads = 8;
    constexpr int kPerThread = 125;
    std::atomic<int> correct{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&f, &correct, t] {
        std::vector<std::pair<uint32_t, std::future<Result<LookupAnswer>>>> futures;
        for (int i = 0; i < kPerThread; ++i) {
          const uint32_t blocks = 1 + static_cast<uint32_t>((t * kPerThread + i) % 12);
          std::vector<uint32_t> tokens(
              f.prompt.begin(), f.prompt.begin() + std::min<uint32_t>(blocks, 8) * kBlockSize);
          // Past 8 blocks the query goes on with tokens nobody holds.
          for (uint32_t b = 8; b < blocks; ++b) {
            for (uint32_t k = 0; k < kBlockSize; ++k) tokens.push_back(900000 + b * kBlockSize + k);
          }
          futures.emplace_back(blocks, f.client->LookupAsync(LookupTokens(tokens)));
        }
        for (auto& [blocks, future] : futures) {
          Result<LookupAnswer> answer = future.get();
          if (answer.has_value() && answer->blocks_queried == blocks &&
              answer->blocks_found == std::min<uint32_t>(blocks, 8) &&
              answer->instances.size() == 2 &&
              answer->instances[0].blocks.disk == std::min<uint32_t>(blocks, 8) &&
              answer->instances[1].blocks.disk == std::min<uint32_t>(blocks, 3)) {
            ++correct;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(correct == kThreads * kPerThread);
    CHECK(f.client->OpenConnections() == 1);
  }

  TEST_CASE("Client: calls spread over several connections") {
    Fixture f;
    f.IngestScenario();
    std::unique_ptr<Client> three = MustConnect({f.endpoint}, 3);
    CHECK(three->OpenConnections() == 3);
    std::vector<std::future<Result<LookupAnswer>>> futures;
    for (int i = 0; i < 300; ++i) futures.push_back(three->LookupAsync(LookupTokens(f.prompt)));
    int found = 0;
    for (auto& future : futures) {
      Result<LookupAnswer> answer = future.get();
      if (answer.has_value() && answer->blocks_found == 8) ++found;
    }
    CHECK(found == 300);
  }

  TEST_CASE("Client: deadlines — a 1 µs call fails with kDeadlineExceeded") {
    Fixture f;
    Status s = f.client->Ping(std::chrono::microseconds(1));
    CHECK(s.code() == StatusCode::kDeadlineExceeded);
    Result<LookupAnswer> late =
        f.client->Lookup(LookupTokens(f.prompt), std::chrono::microseconds(1));
    REQUIRE_FALSE(late.has_value());
    CHECK(late.error().code() == StatusCode::kDeadlineExceeded);
    CHECK(f.client->Ping().ok());  // later calls are unaffected
  }

  TEST_CASE("Client: reconnects after the server restarts on the same address") {
    Fixture f;
    f.IngestScenario();
    Result<LookupAnswer> before = f.client->Lookup(LookupTokens(f.prompt));
    REQUIRE(before.has_value());
    REQUIRE(f.server.Terminate() == 0);

    // Down: calls fail quickly with kUnavailable (refused, not a timeout).
    const auto start = std::chrono::steady_clock::now();
    Status down = f.client->Ping(5s);
    CHECK(down.code() == StatusCode::kUnavailable);
    CHECK(std::chrono::steady_clock::now() - start < 2s);

    // Same data dir, same port (taken from the first run's rpc.addr).
    const std::string port = f.endpoint.substr(f.endpoint.rfind(':') + 1);
    ServerProcess again(f.dir.path() / "data", {"--rpc-listen", "127.0.0.1:" + port});
    REQUIRE(RpcEndpoint(again) == f.endpoint);
    Result<LookupAnswer> after = Status::Unavailable("not tried");
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      after = f.client->Lookup(LookupTokens(f.prompt), 5s);
      if (after.has_value() || after.error().code() != StatusCode::kUnavailable) break;
      std::this_thread::sleep_for(20ms);  // the client backs off between connect rounds
    }
    REQUIRE_MESSAGE(after.has_value(), after.status().ToString());
    CHECK(after->instances == before->instances);
    CHECK(f.client->OpenConnections() == 1);
  }

  TEST_CASE("Client: a connection the server closed while idle is reopened transparently") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--rpc-idle-timeout-ms", "50"});
    std::unique_ptr<Client> client = MustConnect({RpcEndpoint(server)});
    REQUIRE(client->Ping().ok());
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (client->OpenConnections() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE(client->OpenConnections() == 0);  // the server closed it
    CHECK(client->Ping().ok());               // no call was in flight: nothing fails
    CHECK(client->OpenConnections() == 1);
  }

  TEST_CASE("Client: Connect to an unreachable server is kUnavailable quickly") {
    TempDir dir;
    std::string endpoint;
    {
      ServerProcess server(dir.path() / "data");
      endpoint = RpcEndpoint(server);
      REQUIRE(server.Terminate() == 0);
    }
    ClientOptions options;
    options.endpoints = {endpoint};
    const auto start = std::chrono::steady_clock::now();
    Result<std::unique_ptr<Client>> client = Client::Connect(options);
    REQUIRE_FALSE(client.has_value());
    CHECK(client.error().code() == StatusCode::kUnavailable);
    CHECK(client.error().message().find(endpoint) != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - start < 1s);
  }
}

}  // namespace
}  // namespace kvatlas::testing
