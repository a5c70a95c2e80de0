// Approximate mode for a scheduler scoring in its own process (docs/routing.md
// §Approximate mode, docs/feed.md §Predicted records) against a real server: a LocalIndex
// with predictions on sees the predictions a server-side route records and those a router
// records with Client::RecordPrediction (binary kPredict) or POST /v1/predictions; its
// Scorer ranks the predicted instance first exactly as the server's kRoute does; a real
// event of the holder replaces them and they expire on the replica. A LocalIndex without
// the option sees none. POST /v1/predictions and GET /v1/watch?predicted= refuse bad input
// with a JSON error naming the problem.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/client/local_index.h"
#include "kvatlas/client/scorer.h"
#include "tests/integration/client_connect.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

const ContextKey kContext{"default", "llama", "", 4, ""};
constexpr uint32_t kTtlMs = 4000;

std::vector<BlockKey> Keys(BlockKey first, uint32_t count) {
  std::vector<BlockKey> keys;
  for (uint32_t i = 0; i < count; ++i) keys.push_back(first + i);
  return keys;
}

LookupRequest Prompt() {
  LookupRequest request;
  request.context = kContext;
  request.by_hash = true;
  request.seq_hashes = Keys(1, 8);
  return request;
}

bool Eventually(const std::function<bool()>& probe, std::chrono::seconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (probe()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

std::unique_ptr<LocalIndex> StartLocal(const ServerProcess& server, bool predictions) {
  LocalIndexOptions options;
  options.client.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
  options.contexts = {kContext};
  options.predictions = predictions;
  Result<std::unique_ptr<LocalIndex>> local = LocalIndex::Start(options);
  REQUIRE_MESSAGE(local.has_value(), local.status().ToString());
  REQUIRE((*local)->WaitSynced(20s).ok());
  return std::move(*local);
}

// The replica's predicted prefix of the prompt on `instance` (rank 0), 0 when none.
uint32_t PredictedOn(const LocalIndex& local, const std::string& instance) {
  Result<LookupAnswer> answer = local.Lookup(Prompt());
  REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
  for (const PredictedPrefix& p : answer->predicted) {
    if (p.instance_id == instance && p.dp_rank == 0) return p.blocks;
  }
  return 0;
}

// The scheduler's decision over the replica and the server's kRoute over the same
// candidates rank alike, cost for cost and credit for credit (the predicted blocks are in
// the credit; kRoute answers them apart only to approximate requests). Returns the local
// pick.
std::string CompareWithServer(Client& client, const LocalIndex& local, const Scorer& scorer,
                              const std::vector<RouteCandidate>& candidates) {
  Result<LookupAnswer> lookup = local.Lookup(Prompt());
  REQUIRE_MESSAGE(lookup.has_value(), lookup.status().ToString());
  Result<RoutingAnswer> mine = scorer.Score(Prompt(), *lookup, candidates);
  REQUIRE_MESSAGE(mine.has_value(), mine.status().ToString());
  Result<RoutingAnswer> theirs = client.Route(RoutingRequest{Prompt(), candidates, {}});
  REQUIRE_MESSAGE(theirs.has_value(), theirs.status().ToString());
  REQUIRE(mine->ranked.size() == theirs->ranked.size());
  for (size_t i = 0; i < mine->ranked.size(); ++i) {
    CAPTURE(i);
    CHECK(mine->ranked[i].candidate.instance_id == theirs->ranked[i].candidate.instance_id);
    CHECK(mine->ranked[i].credit == doctest::Approx(theirs->ranked[i].credit));
    CHECK(mine->ranked[i].cost == doctest::Approx(theirs->ranked[i].cost));
  }
  return mine->ranked.at(0).candidate.instance_id;
}

// The predicted blocks the replica's Scorer credits to the pick.
uint32_t PickPredicted(const LocalIndex& local, const Scorer& scorer,
                       const std::vector<RouteCandidate>& candidates) {
  Result<LookupAnswer> lookup = local.Lookup(Prompt());
  REQUIRE(lookup.has_value());
  Result<RoutingAnswer> mine = scorer.Score(Prompt(), *lookup, candidates);
  REQUIRE(mine.has_value());
  return mine->ranked.at(0).predicted_blocks;
}

std::vector<std::string> TtlConfig(const TempDir& dir) {
  const auto path = dir.path() / "config.json";
  std::ofstream(path) << R"({"predicted_ttl_ms": )" << kTtlMs << "}";
  return {"--config", path.string()};
}

TEST_SUITE("Integration.LocalPredictions") {
  TEST_CASE("LocalPredictions: a replica sees routes' and local decisions' predictions") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", TtlConfig(dir));
    std::unique_ptr<Client> client = ConnectClient(server);
    std::unique_ptr<LocalIndex> local = StartLocal(server, true);
    std::unique_ptr<LocalIndex> plain = StartLocal(server, false);
    Result<Scorer> scorer = Scorer::Create();
    REQUIRE(scorer.has_value());
    const std::vector<RouteCandidate> a_then_b = {{"a", std::nullopt, 0, 0, false},
                                                  {"b", std::nullopt, 0, 0, false}};
    // Nothing known: a tie, the first candidate wins, here and on the server.
    CHECK(CompareWithServer(*client, *local, *scorer, a_then_b) == "a");

    // A server-side route picks b (flagged: it publishes no events) and records the
    // prompt's blocks as predicted there; the replica sees them on the feed.
    Result<RoutingAnswer> routed = client->Route(RoutingRequest{
        Prompt(), {{"b", std::nullopt, 0, 0, true}, {"a", std::nullopt, 0, 0, true}}, {}});
    REQUIRE_MESSAGE(routed.has_value(), routed.status().ToString());
    CHECK(routed->ranked.at(0).candidate.instance_id == "b");
    REQUIRE(Eventually([&] { return PredictedOn(*local, "b") == 8; }));
    // b now wins over a, as on the server (which reads its own table).
    CHECK(CompareWithServer(*client, *local, *scorer, a_then_b) == "b");
    CHECK(PickPredicted(*local, *scorer, a_then_b) == 8);
    // A replica without the option sees no prediction, and still ranks a first.
    CHECK(PredictedOn(*plain, "b") == 0);

    // A local decision: this router sent the prompt to c (rank 0).
    Result<uint32_t> queued = client->RecordPrediction(kContext, HolderKey{"c", 0}, Keys(1, 8));
    REQUIRE_MESSAGE(queued.has_value(), queued.status().ToString());
    CHECK(*queued == 8);
    REQUIRE(Eventually([&] { return PredictedOn(*local, "c") == 8; }));
    const std::vector<RouteCandidate> a_then_c = {{"a", std::nullopt, 0, 0, false},
                                                  {"c", 0, 0, 0, false}};
    CHECK(CompareWithServer(*client, *local, *scorer, a_then_c) == "c");
    // Over REST too (tokens hashed by the server: a different prompt, so only counted).
    auto http = server.Client();
    const Answer posted = Post(http, "/v1/predictions",
                               json{{"model_name", "llama"},
                                    {"block_size", 4},
                                    {"backend_id", "d"},
                                    {"dp_rank", 0},
                                    {"keys", Keys(1, 4)}});
    CHECK(posted.status == 200);
    CHECK(posted.body["queued"] == 4);
    REQUIRE(Eventually([&] { return PredictedOn(*local, "d") == 4; }));

    // A real event of c replaces its predictions, on the replica as on the server.
    BlockEvent stored;
    stored.type = EventType::kStored;
    stored.context = kContext;
    stored.holder = HolderKey{"c", 0};
    stored.tier = Tier::kGpu;
    stored.medium_known = true;
    stored.seq_hashes = {100};
    Result<IngestAnswer> ingested = client->Ingest({stored});
    REQUIRE_MESSAGE(ingested.has_value(), ingested.status().ToString());
    REQUIRE(local->WaitForRevision(ingested->revision, 20s).ok());
    CHECK(PredictedOn(*local, "c") == 0);
    CHECK(CompareWithServer(*client, *local, *scorer, a_then_c) == "a");
    CHECK(local->Stats().predicted_entries > 0);

    // After the TTL the predictions are gone from the replica, and both rank a first again.
    REQUIRE(Eventually([&] { return PredictedOn(*local, "b") == 0; },
                       std::chrono::seconds(kTtlMs / 1000 + 10)));
    REQUIRE(Eventually([&] { return PredictedOn(*local, "d") == 0; }));
    CHECK(CompareWithServer(*client, *local, *scorer, a_then_b) == "a");
  }

  TEST_CASE("LocalPredictions: RecordPrediction and POST /v1/predictions refuse bad input") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);
    CHECK(client->RecordPrediction(kContext, HolderKey{"", 0}, {1}).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(client->RecordPrediction(kContext, HolderKey{"c", 0}, {}).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(client->RecordPrediction(ContextKey{"default", "", "", 4, ""}, HolderKey{"c", 0}, {1})
              .status()
              .code() == StatusCode::kInvalidArgument);

    auto http = server.Client();
    const json base = {
        {"model_name", "llama"}, {"block_size", 4}, {"backend_id", "c"}, {"keys", {1, 2}}};
    CHECK(Post(http, "/v1/predictions", base).status == 200);
    const auto refused = [&](json body, const std::string& needle, int status = 400) {
      const Answer answer = Post(http, "/v1/predictions", body);
      CAPTURE(body.dump());
      CAPTURE(answer.raw);
      CHECK(answer.status == status);
      REQUIRE(answer.body.is_object());
      CHECK(answer.body["message"].get<std::string>().find(needle) != std::string::npos);
    };
    json body = base;
    body.erase("backend_id");
    refused(body, "backend_id: is required");
    body = base;
    body["backend_id"] = "";
    refused(body, "backend_id");
    body = base;
    body.erase("model_name");
    refused(body, "model_name");
    body = base;
    body["block_size"] = 0;
    refused(body, "block_size");
    body = base;
    body["keys"] = json::array();
    refused(body, "keys: at least one block key is needed");
    body = base;
    body["keys"] = {1, -2};
    refused(body, "keys[1]: must be an unsigned integer");
    body = base;
    body["token_ids"] = {1, 2, 3, 4};
    refused(body, "keys, token_ids: exactly one is needed");
    body = base;
    body.erase("keys");
    body["token_ids"] = {1, 2, 3};  // no complete block
    refused(body, "token_ids: at least one complete block is needed");
    body = base;
    body["dp_rank"] = "0";
    refused(body, "dp_rank: must be an unsigned 32-bit integer");
    body = base;
    body["key"] = {1};
    refused(body, "key: unknown field");
    refused(json::array(), "body");
    body = base;
    body["keys"] = std::vector<uint64_t>(65'537, 1);
    refused(body, "keys: 65537 elements; at most 65536", 413);
    // Tokens: complete blocks only, hashed by the server.
    body = base;
    body.erase("keys");
    body["token_ids"] = Tokens(1, 10);
    const Answer tokens = Post(http, "/v1/predictions", body);
    CHECK(tokens.status == 200);
    CHECK(tokens.body["queued"] == 2);

    // The watch's opt-in parameter is checked before the stream starts.
    const Answer watch = Get(http, "/v1/watch?predicted=yes");
    CHECK(watch.status == 400);
    CHECK(watch.body["message"].get<std::string>().find("predicted") != std::string::npos);
  }

  TEST_CASE("LocalPredictions: a server without predictions refuses a local decision") {
    TempDir dir;
    const auto path = dir.path() / "config.json";
    std::ofstream(path) << R"({"predicted_max_entries": 0})";
    ServerProcess server(dir.path() / "data", {"--config", path.string()});
    std::unique_ptr<Client> client = ConnectClient(server);
    const Result<uint32_t> queued = client->RecordPrediction(kContext, HolderKey{"c", 0}, {1});
    CHECK(queued.status().code() == StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace kvatlas::testing
