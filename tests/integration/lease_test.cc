// Holder leases against the real server (docs/leases.md): with --holder-ttl 1, a holder
// that neither sends events nor heartbeats loses its entries (a holder-expired record on
// the change feed), one that heartbeats keeps them, and a registered publisher's holder is
// exempt; POST /v1/heartbeat validates its body; with leases off it is harmless.
#include <doctest/doctest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/sse_reader.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

json Stored(const std::string& backend, uint32_t first_token) {
  return {{"event_type", "stored"},
          {"model_name", "llama"},
          {"block_size", 4},
          {"backend_id", backend},
          {"token_ids", Tokens(first_token, 8)}};
}

json Heartbeat(const std::string& instance) {
  return {{"holders", json::array({{{"instance_id", instance}, {"dp_rank", 0}}})}};
}

// The holder's entry of GET /v1/holders, or nullopt when it is not listed.
std::optional<json> HolderOf(httplib::Client& rest, const std::string& id) {
  const Answer holders = Get(rest, "/v1/holders");
  REQUIRE(holders.status == 200);
  for (const json& h : holders.body["holders"]) {
    if (h["holder_id"] == id) return h;
  }
  return std::nullopt;
}

uint64_t EntriesOf(httplib::Client& rest, const std::string& id) {
  const std::optional<json> holder = HolderOf(rest, id);
  return holder ? (*holder)["entries"].get<uint64_t>() : 0;
}

bool IsExpiryOf(const json& record, const std::string& backend) {
  return record["op"] == "holder-expired" && record["backend_id"] == backend;
}

TEST_SUITE("Integration.Leases") {
  TEST_CASE("Leases: a silent holder expires, a heartbeating one and a publisher stay") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--holder-ttl", "1"});
    httplib::Client rest = server.Client();
    // A registered publisher (nothing listens at its endpoint: it never sends anything).
    const json registration = {{"endpoint", "tcp://127.0.0.1:9"},
                               {"type", "vLLM"},
                               {"modelname", "llama"},
                               {"instance_id", "pub"},
                               {"block_size", 4},
                               {"dp_rank", 0}};
    REQUIRE(Post(rest, "/register", registration).status == 200);
    Ingest(rest, json::array({Stored("engine-a", 1), Stored("engine-b", 1), Stored("pub", 1)}));
    REQUIRE(EntriesOf(rest, "engine-a") == 2);

    SseReader reader(server, "/v1/watch?from=0", [](const std::vector<json>& records) {
      for (const json& r : records) {
        if (IsExpiryOf(r, "engine-a")) return true;
      }
      return false;
    });
    // B heartbeats every 200 ms (its lease is 1 s); A is silent. A must be gone within a
    // few TTLs: expiry comes at most TTL + TTL/4 after its last activity.
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    bool a_gone = false;
    while (std::chrono::steady_clock::now() < deadline) {
      const Answer beat = Post(rest, "/v1/heartbeat", Heartbeat("engine-b"));
      REQUIRE(beat.status == 200);
      CHECK(beat.body == json{{"holders", 1}, {"ttl_seconds", 1}});
      if (EntriesOf(rest, "engine-a") == 0) {
        a_gone = true;
        break;
      }
      std::this_thread::sleep_for(200ms);
    }
    REQUIRE(a_gone);
    // Two more TTLs of heartbeats: B keeps its entries, and so does the publisher.
    for (int i = 0; i < 10; ++i) {
      REQUIRE(Post(rest, "/v1/heartbeat", Heartbeat("engine-b")).status == 200);
      std::this_thread::sleep_for(200ms);
    }
    CHECK(EntriesOf(rest, "engine-b") == 2);
    CHECK(EntriesOf(rest, "pub") == 2);
    const std::optional<json> b = HolderOf(rest, "engine-b");
    REQUIRE(b.has_value());
    REQUIRE((*b).contains("idle_seconds"));
    CHECK((*b)["idle_seconds"].get<double>() >= 0.0);

    reader.Join();
    bool saw_a = false;
    for (const json& r : reader.records) {
      saw_a = saw_a || IsExpiryOf(r, "engine-a");
      CHECK_FALSE(IsExpiryOf(r, "engine-b"));
      CHECK_FALSE(IsExpiryOf(r, "pub"));
    }
    CHECK(saw_a);
    const Answer metrics = Get(rest, "/metrics");
    CHECK(metrics.raw.find("\nkvatlas_holders_expired_total 1\n") != std::string::npos);
  }

  TEST_CASE("Leases: bad heartbeat bodies are 400 naming the field") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--holder-ttl", "30"});
    httplib::Client rest = server.Client();
    const struct {
      std::string body;
      std::string message;
    } cases[] = {
        {R"({})", "body.holders: is required"},
        {R"({"holders": {"instance_id": "a"}})", "body.holders: must be an array"},
        {R"({"holders": ["a"]})", "body.holders[0]: must be an object"},
        {R"({"holders": [{"instance_id": "a"}, {"dp_rank": 1}]})",
         "body.holders[1].instance_id: is required"},
        {R"({"holders": [{"instance_id": ""}]})",
         "body.holders[0].instance_id: must be a non-empty string"},
        {R"({"holders": [{"backend_id": 7}]})",
         "body.holders[0].backend_id: must be a non-empty string"},
        {R"({"holders": [{"instance_id": "a", "dp_rank": -1}]})",
         "body.holders[0].dp_rank: must be an integer"},
        {R"({"holders": [{"instance_id": "a", "dp_rank": 4294967296}]})",
         "body.holders[0].dp_rank: must be an integer"},
        {R"([1, 2])", "body: expected a JSON object"},
        {R"({"holders": [)", "body: invalid JSON"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.body);
      const Answer answer = Post(rest, "/v1/heartbeat", c.body);
      CHECK(answer.status == 400);
      CHECK(answer.body["code"] == "invalid_argument");
      CHECK(answer.body["message"].get<std::string>().starts_with(c.message));
    }
    // backend_id (the Conductor name), dp_rank optional, null as absent.
    const Answer ok =
        Post(rest, "/v1/heartbeat", std::string(R"({"holders": [{"backend_id": "store-1"},
                                           {"instance_id": "a", "dp_rank": null}], "x": 1})"));
    CHECK(ok.status == 200);
    CHECK(ok.body == json{{"holders", 2}, {"ttl_seconds", 30}});
    CHECK(Post(rest, "/v1/heartbeat", std::string(R"({"holders": []})")).body["holders"] == 0);
  }

  TEST_CASE("Leases: off by default, a heartbeat is harmless and nothing expires") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    httplib::Client rest = server.Client();
    Ingest(rest, json::array({Stored("engine-a", 1)}));
    const Answer beat = Post(rest, "/v1/heartbeat", Heartbeat("engine-a"));
    CHECK(beat.status == 200);
    CHECK(beat.body == json{{"holders", 1}, {"ttl_seconds", 0}});
    const std::optional<json> a = HolderOf(rest, "engine-a");
    REQUIRE(a.has_value());
    CHECK_FALSE((*a).contains("idle_seconds"));
    CHECK(Post(rest, "/v1/heartbeat", std::string("{}")).status == 400);
  }
}

}  // namespace
}  // namespace kvatlas::testing
