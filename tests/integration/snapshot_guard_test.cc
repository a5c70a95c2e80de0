// A server whose last raft snapshot reached snapshot_stop_bytes takes no new contexts
// (docs/scaling.md §Policy): writes into the contexts it holds go on, a write naming a new
// one gets 429 naming it, and GET /v1/groups, /readyz and /metrics say so; and so from its
// first second after a restart.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
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

bool Accepting(httplib::Client& client) {
  return Get(client, "/v1/groups").body["groups"][0]["accepting"] == true;
}

// Writes into `model`, one log entry each, until a snapshot is taken and the guard (every
// second) sees it: bounded. Whether it refuses new contexts by then.
bool WriteUntilRefusing(httplib::Client& client, const std::string& model) {
  for (uint64_t key = 1; key <= 400; ++key) {
    if (Post(client, "/v1/events", StoredIn(model, key)).status != 200) return false;
    if (key % 16 == 0) std::this_thread::sleep_for(100ms);
    if (!Accepting(client)) return true;
  }
  return false;
}

TEST_SUITE("Integration.SnapshotGuard") {
  TEST_CASE("past snapshot_stop_bytes the group takes no new contexts, and the held ones go on") {
    TempDir dir;
    // A snapshot every 16 log entries, and a bound any snapshot passes.
    ServerProcess server(dir.path() / "data",
                         {"--snapshot-stop-bytes", "1", "--raft-snapshot-threshold", "16"});
    auto client = server.Client();
    CHECK(Accepting(client));
    REQUIRE(WriteUntilRefusing(client, "held"));
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

  TEST_CASE("a restarted server goes on refusing new contexts before it takes a snapshot") {
    TempDir dir;
    const std::filesystem::path data = dir.path() / "data";
    {
      ServerProcess server(data, {"--snapshot-stop-bytes", "1", "--raft-snapshot-threshold", "16"});
      auto client = server.Client();
      REQUIRE(WriteUntilRefusing(client, "held"));
      REQUIRE(server.Terminate() == 0);
    }
    // A threshold no restart reaches: the only snapshot this run knows is the one it loads.
    ServerProcess server(data,
                         {"--snapshot-stop-bytes", "1", "--raft-snapshot-threshold", "100000"});
    auto client = server.Client();
    // The guard's first round runs as the policies start, just after the listeners: bounded.
    bool refusing = false;
    for (int i = 0; i < 50 && !refusing; ++i) {
      refusing = !Accepting(client);
      if (!refusing) std::this_thread::sleep_for(100ms);
    }
    CHECK(refusing);
    CHECK(Get(client, "/v1/groups").body["groups"][0]["snapshot_bytes"].get<uint64_t>() > 0);
    CHECK(Post(client, "/v1/events", StoredIn("fresh", 1)).status == 429);
    CHECK(Post(client, "/v1/events", StoredIn("held", 2000)).status == 200);
  }
}

}  // namespace
}  // namespace kvatlas::testing
