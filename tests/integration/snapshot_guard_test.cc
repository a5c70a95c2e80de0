// A server whose last raft snapshot reached snapshot_stop_bytes takes no new contexts
// (docs/scaling.md §Policy): writes into the contexts it holds go on, a write naming a new
// one gets 429 naming it, and GET /v1/groups, /readyz and /metrics say so.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

json StoredIn(const std::string& model, uint64_t key) {
  return json::array({{{"event_type", "stored"},
                       {"model_name", model},
                       {"block_size", 4},
                       {"backend_id", "vllm-0"},
                       {"medium", "gpu"},
                       {"seq_hashes", {key}}}});
}

TEST_SUITE("Integration.SnapshotGuard") {
  TEST_CASE("past snapshot_stop_bytes the group takes no new contexts, and the held ones go on") {
    TempDir dir;
    // A snapshot every 16 log entries, and a bound any snapshot passes.
    ServerProcess server(dir.path() / "data",
                         {"--snapshot-stop-bytes", "1", "--raft-snapshot-threshold", "16"});
    auto client = server.Client();
    CHECK(Get(client, "/v1/groups").body["groups"][0]["accepting"] == true);
    // Writes one log entry each, until a snapshot is taken and the guard (every second)
    // sees it: bounded.
    bool refusing = false;
    for (uint64_t key = 1; key <= 400 && !refusing; ++key) {
      REQUIRE(Post(client, "/v1/events", StoredIn("held", key)).status == 200);
      if (key % 16 == 0) std::this_thread::sleep_for(100ms);
      refusing = Get(client, "/v1/groups").body["groups"][0]["accepting"] == false;
    }
    REQUIRE(refusing);
    const json group = Get(client, "/v1/groups").body["groups"][0];
    CHECK(group["snapshot_bytes"].get<uint64_t>() >= 1);
    CHECK(group["refusing_new_contexts"].get<std::string>().find(
              "at or past snapshot_stop_bytes 1") != std::string::npos);

    const Answer refused = Post(client, "/v1/events", StoredIn("fresh", 1));
    CHECK(refused.status == 429);
    CHECK(refused.body["code"] == "resource_exhausted");
    const std::string message = refused.body["message"].get<std::string>();
    CHECK(message.find("fresh") != std::string::npos);
    CHECK(message.find("is new and this server's group takes no new contexts") !=
          std::string::npos);
    CHECK(Post(client, "/v1/events", StoredIn("held", 1000)).status == 200);

    const Answer ready = Get(client, "/readyz");
    CHECK(ready.status == 200);
    CHECK(ready.body["warnings"].dump().find("the group takes no new contexts") !=
          std::string::npos);
    const auto metrics = client.Get("/metrics");
    REQUIRE(metrics);
    CHECK(metrics->body.find("kvatlas_group_accepting{group=\"1\"} 0") != std::string::npos);
  }
}

}  // namespace
}  // namespace kvatlas::testing
