// Shared in-flight load through the client library (docs/routing.md §Shared load): two
// routers' LoadReporters (binary kLoadReport) feed the server's table, and a route whose
// candidates give no load is scored with their sum; a reporter that goes away takes its
// load with it, and a burst of routed requests costs a bounded number of reports.
#include "kvatlas/client/load_reporter.h"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "kvatlas/client/client.h"
#include "tests/integration/client_connect.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

// "a"'s queued prefill blocks as a route without caller loads scores it.
double QueuedOnA(Client& client) {
  RoutingRequest request;
  request.lookup.context = ContextKey{"default", "llama", "", 16, ""};
  request.lookup.token_ids.assign(64, 1);
  request.candidates = {RouteCandidate{"a", std::nullopt, 0, 0}};
  Result<RoutingAnswer> answer = client.Route(request);
  REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
  return answer->ranked.at(0).queued_prefill_blocks;
}

// Waits (bounded) until QueuedOnA is `want`.
bool WaitQueued(Client& client, double want) {
  for (int i = 0; i < 200; ++i) {
    if (QueuedOnA(client) == want) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST_SUITE("Integration.LoadReporter") {
  TEST_CASE("two routers' reporters are summed for routes; a finished one leaves") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);

    CHECK(LoadReporter::Create(client.get(), {"", 100ms, 2'000}).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(LoadReporter::Create(client.get(), {"r", 1'000ms, 2'000}).status().code() ==
          StatusCode::kInvalidArgument);  // interval past ttl / 3
    CHECK(client->ReportLoad(LoadReport{"r", 5, {}}).status().code() ==
          StatusCode::kInvalidArgument);

    auto r1 = LoadReporter::Create(client.get(), {"r1", 50ms, 2'000});
    auto r2 = LoadReporter::Create(client.get(), {"r2", 50ms, 2'000});
    REQUIRE(r1.has_value());
    REQUIRE(r2.has_value());
    const uint64_t t1 = (*r1)->RouteStarted("a", 0, 4, 40);
    (*r1)->RouteStarted("a", 0, 2, 20);
    const uint64_t t2 = (*r2)->RouteStarted("a", 0, 3, 30);
    CHECK(WaitQueued(*client, 9));  // 4 + 2 + 3 prompt blocks queued on "a"
    (*r1)->PrefillDone(t1);
    CHECK(WaitQueued(*client, 5));
    (*r1)->RouteFinished(t1);
    (*r1)->RouteFinished(t1);  // twice: a no-op
    r1->reset();               // r1 leaves: its empty report goes at once, not after its lease
    CHECK(QueuedOnA(*client) == 3);
    (*r2)->RouteFinished(t2);
    CHECK(WaitQueued(*client, 0));

    // A burst of routed requests costs at most one report per interval (+ the first).
    const auto start = std::chrono::steady_clock::now();
    const uint64_t before = (*r2)->reports_sent();
    for (int i = 0; i < 20'000; ++i) {
      (*r2)->RouteFinished((*r2)->RouteStarted("b", 0, 1, 1));
    }
    std::this_thread::sleep_for(200ms);
    const double intervals =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start) / 50ms;
    const uint64_t reports = (*r2)->reports_sent() - before;
    MESSAGE("20,000 routed requests in " << intervals << " intervals: " << reports << " reports");
    CHECK(static_cast<double>(reports) <= intervals + 2);
    CHECK((*r2)->reports_failed() == 0);
  }
}

}  // namespace
}  // namespace kvatlas::testing
