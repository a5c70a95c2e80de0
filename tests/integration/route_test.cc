// Routing decisions against the real server: Client::Route (binary kRoute) and
// POST /v1/route answer the same ranking, which kvatlas::Scorer reproduces locally from a
// lookup; bad input is a 400 / invalid_argument naming the field.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "kvatlas/client/client.h"
#include "kvatlas/client/scorer.h"
#include "kvatlas/common/routing.h"
#include "tests/integration/client_connect.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kBlockSize = 16;

BlockEvent StoredBlocks(const std::string& backend, Tier tier, std::vector<uint32_t> tokens) {
  BlockEvent event;
  event.type = EventType::kStored;
  event.context.model = "llama";
  event.context.block_size = kBlockSize;
  event.holder.id = backend;
  event.tier = tier;
  event.token_ids = std::move(tokens);
  return event;
}

RouteCandidate Candidate(std::string id, uint64_t queued_tokens) {
  RouteCandidate c;
  c.instance_id = std::move(id);
  c.queued_prefill_tokens = queued_tokens;
  return c;
}

TEST_SUITE("Integration.Route") {
  TEST_CASE("Route: binary kRoute in approximate mode records and marks predicted blocks") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const std::unique_ptr<Client> connected = ConnectClient(server);
    Client& client = *connected;
    // Nothing known: b, listed first, wins; flagged predict, its 4 blocks are recorded. Only
    // b is flagged, so a probe that a wins records nothing.
    const auto route = [&](const char* first, const char* second) {
      RoutingRequest request;
      request.lookup.context.model = "llama";
      request.lookup.context.block_size = kBlockSize;
      request.lookup.token_ids = Tokens(50, 4 * kBlockSize);
      request.candidates = {Candidate(first, 0), Candidate(second, 0)};
      for (RouteCandidate& c : request.candidates) c.predict = c.instance_id == "b";
      return client.Route(std::move(request));
    };
    Result<RoutingAnswer> first = route("b", "a");
    REQUIRE_MESSAGE(first.has_value(), first.status().ToString());
    CHECK(first->ranked[0].candidate.instance_id == "b");
    // Bounded wait for the prediction (proposed every 50 ms): then b wins listed second,
    // and the binary answer marks its blocks.
    Result<RoutingAnswer> next = route("a", "b");
    for (int i = 0; i < 1'500 && next.has_value() && next->ranked[0].predicted_blocks == 0; ++i) {
      std::this_thread::sleep_for(20ms);
      next = route("a", "b");
    }
    REQUIRE_MESSAGE(next.has_value(), next.status().ToString());
    CHECK(next->ranked[0].candidate.instance_id == "b");
    CHECK(next->ranked[0].predicted_blocks == 4);
    CHECK(next->ranked[0].matched.predicted == 4);
    CHECK(next->ranked[1].predicted_blocks == 0);
  }

  TEST_CASE("Route: binary, REST and the local Scorer rank alike, with Dynamo's cost") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    ClientOptions options;
    options.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
    options.default_deadline = 20s;
    Result<std::unique_ptr<Client>> connected = Client::Connect(options);
    REQUIRE_MESSAGE(connected.has_value(), connected.status().ToString());
    Client& client = **connected;

    // engine-a: 8 blocks on GPU; engine-b: the first 3 on CPU; pool: the first 2 shared.
    const std::vector<uint32_t> prompt = Tokens(900, 8 * kBlockSize);
    Result<IngestAnswer> ack = client.Ingest(
        {StoredBlocks("engine-a", Tier::kGpu, prompt),
         StoredBlocks("engine-b", Tier::kCpu, {prompt.begin(), prompt.begin() + 3 * kBlockSize}),
         StoredBlocks("pool", Tier::kShared, {prompt.begin(), prompt.begin() + 2 * kBlockSize})});
    REQUIRE_MESSAGE(ack.has_value(), ack.status().ToString());

    RoutingRequest request;
    request.lookup.context.model = "llama";
    request.lookup.context.block_size = kBlockSize;
    request.lookup.token_ids = prompt;
    request.lookup.token_ids.insert(request.lookup.token_ids.end(), {1, 2, 3});  // 9 blocks
    // Dynamo weighs queued prefill work as new work: queue_scale 1 (on the wire as the
    // kRoute trailer), and has no relative terms (off: the terms trailer). engine-a: credit
    // 8, new 1, 10 queued → 11; engine-b: 3 CPU (0.75) → new 6.75; engine-c: 2 shared (0.5)
    // → new 8.
    request.options.queue_scale = 1;
    request.options.replica_credit = 0;
    request.options.excess_queue_scale = 0;
    request.candidates = {Candidate("engine-a", 10 * kBlockSize), Candidate("engine-b", 0),
                          Candidate("engine-c", 0)};
    Result<RoutingAnswer> answer = client.Route(request);
    REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    CHECK(answer->revision == ack->revision);
    CHECK(answer->prompt_blocks == 9);
    CHECK(answer->blocks_found == 8);
    REQUIRE(answer->ranked.size() == 3);
    CHECK(answer->ranked[0].candidate.instance_id == "engine-b");
    CHECK(answer->ranked[0].cost == doctest::Approx(6.75));
    CHECK(answer->ranked[0].matched == PrefixMatch{0, 3, 3, 2});
    CHECK(answer->ranked[1].candidate.instance_id == "engine-c");
    CHECK(answer->ranked[1].shared_blocks == 2);
    CHECK(answer->ranked[1].cost == doctest::Approx(8));
    CHECK(answer->ranked[2].candidate.instance_id == "engine-a");
    CHECK(answer->ranked[2].gpu_blocks == 8);
    CHECK(answer->ranked[2].cost == doctest::Approx(11));

    // POST /v1/route answers the same document.
    json body = {{"model_name", "llama"},
                 {"block_size", kBlockSize},
                 {"token_ids", request.lookup.token_ids},
                 {"candidates",
                  {{{"instance_id", "engine-a"}, {"queued_prefill_tokens", 10 * kBlockSize}},
                   {{"instance_id", "engine-b"}},
                   {{"instance_id", "engine-c"}, {"queued_prefill_tokens", 0}}}},
                 {"queue_scale", 1},
                 {"replica_credit", 0},
                 {"excess_queue_scale", 0}};
    httplib::Client rest = server.Client();
    Answer via_rest = Post(rest, "/v1/route", body);
    REQUIRE(via_rest.status == 200);
    CHECK(via_rest.body == json::parse(EncodeRouteAnswer(*answer)));
    CHECK(via_rest.body["instance_id"] == "engine-b");

    // The scheduler-side Scorer over a lookup answer ranks the same way.
    Result<LookupAnswer> lookup = client.Lookup(request.lookup);
    REQUIRE(lookup.has_value());
    Result<Scorer> scorer = Scorer::Create(request.options);
    REQUIRE(scorer.has_value());
    Result<RoutingAnswer> local = scorer->Score(request.lookup, *lookup, request.candidates);
    REQUIRE(local.has_value());
    CHECK(local->ranked == answer->ranked);

    // With the default queue_scale (0.4), engine-a's prefix is worth waiting for:
    // 1 + 0.4 · 10 = 5.
    request.options.queue_scale = kDefaultQueueScale;
    answer = client.Route(request);
    REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    CHECK(answer->ranked[0].candidate.instance_id == "engine-a");
    CHECK(answer->ranked[0].cost == doctest::Approx(1 + kDefaultQueueScale * 10));
    body.erase("queue_scale");
    CHECK(Post(rest, "/v1/route", body).body == json::parse(EncodeRouteAnswer(*answer)));
    body["queue_scale"] = 2e6;
    via_rest = Post(rest, "/v1/route", body);
    CHECK(via_rest.status == 400);
    CHECK(via_rest.body["message"].get<std::string>().starts_with(
        "queue_scale: must be a finite number from 0 to 1000000"));
    body.erase("queue_scale");

    // The defaults, relative terms on: engine-a queues 10 blocks against a mean of 10/3, so
    // its 8 blocks earn the others replica credit, (8 − own prefix) / 3 — engine-b 3 CPU ·
    // 0.75 + 5/3, new 9 − 3.917 = 5.083; engine-c 1 + 2, new 6 — and its queue past 1.5 ×
    // the mean weighs 0.7 · 5 more: 1 + 4 + 3.5 = 8.5. The REST body without the fields
    // answers the same.
    request.options = RoutingOptions{};
    answer = client.Route(request);
    REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    CHECK(answer->ranked[0].candidate.instance_id == "engine-b");
    CHECK(answer->ranked[0].credit == doctest::Approx(2.25 + 5.0 / 3));
    CHECK(answer->ranked[0].cost == doctest::Approx(9 - 2.25 - 5.0 / 3));
    CHECK(answer->ranked[1].candidate.instance_id == "engine-c");
    CHECK(answer->ranked[1].cost == doctest::Approx(6));
    CHECK(answer->ranked[2].candidate.instance_id == "engine-a");
    CHECK(answer->ranked[2].cost == doctest::Approx(8.5));
    json defaults = body;
    defaults.erase("replica_credit");
    defaults.erase("excess_queue_scale");
    CHECK(Post(rest, "/v1/route", defaults).body == json::parse(EncodeRouteAnswer(*answer)));
    request.options.queue_scale = 1;
    request.options.replica_credit = 0;
    request.options.excess_queue_scale = 0;

    // With CPU copies worth nothing, engine-b's 3 CPU blocks count for nothing (its prefix
    // already covers the 2 shared ones): 9; engine-c with the shared 2 blocks wins at 8.
    request.options.weights.cpu = 0;
    answer = client.Route(request);
    REQUIRE(answer.has_value());
    CHECK(answer->ranked[0].candidate.instance_id == "engine-c");
    CHECK(answer->ranked[0].cost == doctest::Approx(8));
    CHECK(answer->ranked[1].candidate.instance_id == "engine-b");
    CHECK(answer->ranked[1].cost == doctest::Approx(9));

    // Bad input names the field, on both interfaces.
    body["candidates"][1]["dp_rank"] = "one";
    via_rest = Post(rest, "/v1/route", body);
    CHECK(via_rest.status == 400);
    CHECK(via_rest.body["message"].get<std::string>().starts_with("candidates[1].dp_rank:"));
    body.erase("candidates");
    via_rest = Post(rest, "/v1/route", body);
    CHECK(via_rest.status == 400);
    CHECK(via_rest.body["message"].get<std::string>().starts_with("candidates:"));
    request.options.temperature = -1;
    CHECK(client.Route(request).status().message().starts_with("temperature:"));
    request.options = {};
    request.candidates.clear();
    CHECK(client.Route(request).status().code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvatlas::testing
