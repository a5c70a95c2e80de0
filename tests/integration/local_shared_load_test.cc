// Shared load for a scheduler scoring in its own process (docs/routing.md §Shared load,
// "LocalIndex and Scorer"): two routers' LoadReporters report load on the instance holding
// the longer prefix; a LocalIndex-based scheduler fetches the fleet's reports
// (Client::FetchLoadsInto, binary kLoadView) into a FleetLoadTable, fills its load-less
// candidates and Scorer moves the request to the unloaded instance — which it does not
// without the fill, nor with one router's load alone — and ranks exactly as the server's
// route over the same candidates does.
#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/client/load_reporter.h"
#include "kvatlas/client/local_index.h"
#include "kvatlas/client/scorer.h"
#include "kvatlas/common/fleet_load.h"
#include "tests/integration/client_connect.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

const ContextKey kContext{"default", "llama", "", 16, ""};
constexpr uint32_t kPromptBlocks = 16;

// `holder` caches the first `blocks` blocks of the prompt (keys 1, 2, ...) on GPU.
BlockEvent Stored(const std::string& holder, uint32_t blocks) {
  BlockEvent e;
  e.type = EventType::kStored;
  e.context = kContext;
  e.holder = HolderKey{holder, 0};
  e.tier = Tier::kGpu;
  e.medium_known = true;
  for (uint32_t b = 1; b <= blocks; ++b) e.seq_hashes.push_back(b);
  return e;
}

LookupRequest Prompt() {
  LookupRequest request;
  request.context = kContext;
  request.by_hash = true;
  for (uint32_t b = 1; b <= kPromptBlocks; ++b) request.seq_hashes.push_back(b);
  return request;
}

// The routing costs of the test, spelled out so that a change of the defaults does not
// change what it checks: "a" saves 8 new prefill blocks over "b" (cost 8); each router
// queues 15 prompt blocks on "a" (cost 0.3 · 15 = 4.5): one router's load does not
// outweigh the saving, the two routers' sum (9) does.
RoutingOptions Costs() {
  RoutingOptions options;
  options.prefill_scale = 1.0;
  options.queue_scale = 0.3;
  options.decode_scale = 0.1;
  // The plain cost, without the relative terms: the figures below are the load's alone.
  options.replica_credit = 0;
  options.excess_queue_scale = 0;
  return options;
}

TEST_SUITE("Integration.SharedLoad") {
  TEST_CASE("a LocalIndex scheduler fills its candidates from the fleet's reports") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);
    Result<IngestAnswer> ingested = client->Ingest({Stored("a", 12), Stored("b", 4)});
    REQUIRE_MESSAGE(ingested.has_value(), ingested.status().ToString());

    LocalIndexOptions options;
    options.client.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
    options.contexts = {kContext};
    Result<std::unique_ptr<LocalIndex>> local = LocalIndex::Start(options);
    REQUIRE_MESSAGE(local.has_value(), local.status().ToString());
    REQUIRE((*local)->WaitForRevision(ingested->revision, 20s).ok());
    Result<Scorer> scorer = Scorer::Create(Costs());
    REQUIRE(scorer.has_value());

    const LookupRequest prompt = Prompt();
    Result<LookupAnswer> lookup = (*local)->Lookup(prompt);
    REQUIRE_MESSAGE(lookup.has_value(), lookup.status().ToString());
    const std::vector<RouteCandidate> no_load = {{"a", std::nullopt, 0, 0},
                                                 {"b", std::nullopt, 0, 0}};
    // The scheduler's step: fetch the fleet's loads, fill, score. Returns the winner.
    FleetLoadTable table;
    const auto route = [&](std::vector<RouteCandidate>* filled) {
      *filled = no_load;
      REQUIRE(client->FetchLoadsInto(&table).ok());
      (void)table.FillCandidates(*filled, kContext.block_size, FleetLoadTable::Clock::now());
      Result<RoutingAnswer> answer = scorer->Score(prompt, *lookup, *filled);
      REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
      return *answer;
    };
    std::vector<RouteCandidate> filled;
    CHECK(route(&filled).ranked.at(0).candidate.instance_id == "a");  // no load anywhere

    auto r1 = LoadReporter::Create(client.get(), {"r1", 50ms, 5'000});
    auto r2 = LoadReporter::Create(client.get(), {"r2", 50ms, 5'000});
    REQUIRE(r1.has_value());
    REQUIRE(r2.has_value());
    (*r1)->RouteStarted("a", 0, 15, 0);
    REQUIRE((*r1)->Flush().ok());
    CHECK(route(&filled).ranked.at(0).candidate.instance_id == "a");  // 4.5 < 8
    CHECK(filled[0].queued_prefill_tokens == 15 * 16);

    (*r2)->RouteStarted("a", 0, 15, 0);
    REQUIRE((*r2)->Flush().ok());
    const RoutingAnswer shared = route(&filled);
    CHECK(filled[0].queued_prefill_tokens == 30 * 16);
    CHECK(filled[1].queued_prefill_tokens == 0);
    CHECK(shared.ranked.at(0).candidate.instance_id == "b");  // 9 > 8: the sum moves it

    // Without the fill the same scheduler still sends it to the loaded instance.
    Result<RoutingAnswer> unfilled = scorer->Score(prompt, *lookup, no_load);
    REQUIRE(unfilled.has_value());
    CHECK(unfilled->ranked.at(0).candidate.instance_id == "a");

    // The server's route over the same load-less candidates fills and ranks the same.
    RoutingRequest request{prompt, no_load, Costs()};
    Result<RoutingAnswer> server_answer = client->Route(request);
    REQUIRE_MESSAGE(server_answer.has_value(), server_answer.status().ToString());
    REQUIRE(server_answer->ranked.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(server_answer->ranked[i].candidate.instance_id ==
            shared.ranked[i].candidate.instance_id);
      CHECK(server_answer->ranked[i].cost == doctest::Approx(shared.ranked[i].cost));
    }

    // A router that leaves is gone from the next fetch.
    r2->reset();
    CHECK(route(&filled).ranked.at(0).candidate.instance_id == "a");
    CHECK(filled[0].queued_prefill_tokens == 15 * 16);
  }
}

}  // namespace
}  // namespace kvatlas::testing
