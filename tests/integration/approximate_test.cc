// Approximate mode (docs/routing.md §Approximate mode) against a real server: a route that
// picks a candidate flagged `predict` (an instance publishing no KV events) records the
// request's blocks as predicted there, so the next route sharing the prefix prefers it and
// the answers mark the blocks predicted; the Conductor /query reports them too; a real
// event of the instance replaces them; after the TTL they are gone. An instance registered
// without events, or whose stream is quiet, is predicted without the flag. Bad settings,
// flags and registrations are refused naming the field.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

constexpr uint32_t kBlock = 4;

// A route of 8 blocks (tokens 1..32) plus `extra` tokens, over candidates `first` then
// `second`, flagged `predict` (a probe is not: it records nothing): with equal costs the
// first wins.
json Route(uint32_t extra, const char* first = "b", const char* second = "a", bool predict = true) {
  return {{"model_name", "m"},
          {"block_size", kBlock},
          {"token_ids", Tokens(1, 32 + extra)},
          {"candidates", json::array({{{"instance_id", first}, {"predict", predict}},
                                      {{"instance_id", second}, {"predict", predict}}})}};
}

// Polls `probe` until it holds; bounded (the predictions are proposed every 50 ms).
bool Eventually(const std::function<bool()>& probe) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (probe()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

json Candidate(const json& answer, const std::string& id) {
  for (const json& c : answer["candidates"]) {
    if (c["instance_id"] == id) return c;
  }
  return json();
}

std::vector<std::string> ConfigArgs(const TempDir& dir, const std::string& text) {
  const auto path = dir.path() / "config.json";
  std::ofstream(path) << text;
  return {"--config", path.string()};
}

TEST_SUITE("Integration.Approximate") {
  TEST_CASE("Approximate: a route records predicted blocks; the next route prefers them") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", ConfigArgs(dir, R"({"predicted_ttl_ms": 3000})"));
    auto client = server.Client();

    // Nothing is known: b (first) wins and its blocks become predicted.
    const Answer first = Post(client, "/v1/route", Route(0));
    REQUIRE(first.status == 200);
    CHECK(first.body["instance_id"] == "b");
    CHECK(Candidate(first.body, "b")["predicted_blocks"] == 0);

    // A request sharing the 8-block prefix, candidates a then b: b wins on its predicted
    // prefix (a would win a tie), and the answer marks the blocks predicted.
    Answer next;
    REQUIRE(Eventually([&] {
      next = Post(client, "/v1/route", Route(8, "a", "b", false));
      return next.status == 200 && next.body["instance_id"] == "b";
    }));
    const json b = Candidate(next.body, "b");
    CHECK(b["predicted_blocks"] == 8);
    CHECK(b["matched"]["PREDICTED"] == 8);
    CHECK(b["matched"]["GPU"] == 0);
    CHECK(b["credit"] == 8.0);
    CHECK(Candidate(next.body, "a")["predicted_blocks"] == 0);

    // The Conductor dialect marks them too (longest_matched counts them, in tokens).
    const Answer query =
        Post(client, "/query",
             json{{"model", "m"}, {"block_size", kBlock}, {"token_ids", Tokens(1, 32)}});
    REQUIRE(query.status == 200);
    CHECK(query.body["default"]["b"]["PREDICTED"] == 32);
    CHECK(query.body["default"]["b"]["longest_matched"] == 32);
    CHECK(query.body["default"]["b"]["GPU"] == 0);
    // A query about one instance reports that one only.
    const Answer only_a = Post(client, "/query",
                               json{{"model", "m"},
                                    {"block_size", kBlock},
                                    {"token_ids", Tokens(1, 32)},
                                    {"instance_id", "a"}});
    REQUIRE(only_a.status == 200);
    CHECK(only_a.body["default"].contains("a"));
    CHECK(!only_a.body["default"].contains("b"));

    // The weight is the caller's: PREDICTED 0 credits nothing.
    json unweighted = Route(0, "a", "b", false);
    unweighted["weights"] = {{"PREDICTED", 0}};
    const Answer zero = Post(client, "/v1/route", unweighted);
    REQUIRE(zero.status == 200);
    CHECK(zero.body["instance_id"] == "a");
    CHECK(Candidate(zero.body, "b")["credit"] == 0.0);

    const Answer stats = Get(client, "/v1/stats");
    REQUIRE(stats.status == 200);
    CHECK(stats.body["predicted"]["entries"].get<uint64_t>() >= 8);

    // After the TTL (3 s) they are gone: a, first, wins again.
    CHECK(Eventually([&] {
      const Answer later = Post(client, "/v1/route", Route(0, "a", "b", false));
      return later.status == 200 && Candidate(later.body, "b")["predicted_blocks"] == 0;
    }));
  }

  TEST_CASE("Approximate: a real event of the instance replaces its predictions") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    auto client = server.Client();
    REQUIRE(Post(client, "/v1/route", Route(0)).status == 200);
    REQUIRE(Eventually([&] {
      const Answer a = Post(client, "/v1/route", Route(0, "a", "b", false));
      return a.status == 200 && Candidate(a.body, "b")["predicted_blocks"] == 8;
    }));
    // b's stream is up: one stored block; its 8 predicted blocks go, the real one counts.
    const json event = json::array({{{"event_type", "stored"},
                                     {"model_name", "m"},
                                     {"block_size", kBlock},
                                     {"backend_id", "b"},
                                     {"token_ids", Tokens(1, kBlock)}}});
    REQUIRE(Post(client, "/v1/events", event).status == 200);
    const Answer after = Post(client, "/v1/route", Route(0, "a", "b", false));
    REQUIRE(after.status == 200);
    CHECK(Candidate(after.body, "b")["predicted_blocks"] == 0);
    CHECK(Candidate(after.body, "b")["matched"]["GPU"] == 1);
  }

  TEST_CASE("Approximate: instances registered without events, or quiet, are predicted unflagged") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    auto client = server.Client();
    const auto registration = [](const char* instance, bool events) {
      json r = {
          {"type", "vLLM"}, {"modelname", "m"}, {"instance_id", instance}, {"block_size", kBlock}};
      if (events) {
        r["endpoint"] = "tcp://127.0.0.1:9";  // nothing publishes there: the stream is down
      } else {
        r["publishes_events"] = false;
      }
      return r;
    };
    REQUIRE(Post(client, "/register", registration("b", false)).status == 200);
    REQUIRE(Post(client, "/register", registration("d", true)).status == 200);
    REQUIRE(Post(client, "/register", registration("e", true)).status == 200);
    // d's events are live (one stored block a moment ago); e has sent none.
    const json event = json::array({{{"event_type", "stored"},
                                     {"model_name", "m"},
                                     {"block_size", kBlock},
                                     {"backend_id", "d"},
                                     {"token_ids", Tokens(1001, kBlock)}}});
    REQUIRE(Post(client, "/v1/events", event).status == 200);

    const Answer listing = Get(client, "/v1/registrations");
    REQUIRE(listing.status == 200);
    bool listed = false;
    for (const json& r : listing.body["registrations"]) {
      if (r["instance_id"] != "b") continue;
      listed = true;
      CHECK(r["publishes_events"] == false);
      CHECK(r["endpoint"].is_null());
    }
    CHECK(listed);
    const Answer streams = Get(client, "/v1/streams");
    REQUIRE(streams.status == 200);
    for (const json& stream : streams.body["streams"]) CHECK(stream["instance_id"] != "b");

    // Unflagged routes, each with its own prompt, picking (first candidate wins a tie) an
    // unregistered instance c, the live d, then the quiet e, then b without events. The
    // routes' predictions are applied in order, so once b's is seen, c's and d's would be.
    const auto route = [&](uint32_t first_token, const char* picked) {
      const json body = {
          {"model_name", "m"},
          {"block_size", kBlock},
          {"token_ids", Tokens(first_token, 32)},
          {"candidates", json::array({{{"instance_id", picked}}, {{"instance_id", "a"}}})}};
      return Post(client, "/v1/route", body);
    };
    REQUIRE(route(101, "c").body["instance_id"] == "c");
    REQUIRE(route(201, "d").body["instance_id"] == "d");
    REQUIRE(route(301, "e").body["instance_id"] == "e");
    REQUIRE(route(401, "b").body["instance_id"] == "b");
    // Seen as a preference over a, first now: b's and e's prefixes are predicted.
    const auto predicted = [&](uint32_t first_token, const char* instance) {
      const json body = {
          {"model_name", "m"},
          {"block_size", kBlock},
          {"token_ids", Tokens(first_token, 32)},
          {"candidates", json::array({{{"instance_id", "a"}}, {{"instance_id", instance}}})}};
      const Answer a = Post(client, "/v1/route", body);
      REQUIRE(a.status == 200);
      return Candidate(a.body, instance)["predicted_blocks"].get<uint32_t>();
    };
    REQUIRE(Eventually([&] { return predicted(401, "b") == 8; }));
    CHECK(predicted(301, "e") == 8);
    CHECK(predicted(201, "d") == 0);
    CHECK(predicted(101, "c") == 0);
  }

  TEST_CASE("Approximate: bad flags and settings are refused naming the field") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    auto client = server.Client();
    json bad_flag = Route(0);
    bad_flag["candidates"][1]["predict"] = "yes";
    const Answer flag = Post(client, "/v1/route", bad_flag);
    CHECK(flag.status == 400);
    CHECK(flag.body.value("message", "").rfind("candidates[1].predict: must be true or false", 0) ==
          0);
    // A registration says whether the instance publishes events, and only one with events
    // has an endpoint.
    const json base = {
        {"type", "vLLM"}, {"modelname", "m"}, {"instance_id", "b"}, {"block_size", kBlock}};
    const std::pair<json, std::string> registrations[] = {
        {json{{"publishes_events", "no"}}, "body.publishes_events: must be true or false"},
        {json{{"publishes_events", false}, {"endpoint", "tcp://127.0.0.1:9"}},
         "body.endpoint: must be absent when publishes_events is false"},
        {json{{"publishes_events", false}, {"replay_endpoint", "tcp://127.0.0.1:9"}},
         "body.replay_endpoint: must be absent when publishes_events is false"},
        {json{{"publishes_events", true}}, "body.endpoint: is required"},
    };
    for (const auto& [fields, message] : registrations) {
      json body = base;
      body.update(fields);
      const Answer refused = Post(client, "/register", body);
      CHECK(refused.status == 400);
      CHECK(refused.body.value("message", "") == message);
    }
    json bad_weight = Route(0);
    bad_weight["weights"] = {{"PREDICTED", 1.5}};
    const Answer weight = Post(client, "/v1/route", bad_weight);
    CHECK(weight.status == 400);
    CHECK(weight.body.value("message", "").rfind("weights.PREDICTED:", 0) == 0);

    for (const char* ttl : {"50", "3600001"}) {
      const RunResult run = RunServerToExit(
          ConfigArgs(dir, std::string(R"({"predicted_ttl_ms": )") + ttl + "}"), dir.path());
      CHECK(run.exit_code != 0);
      CHECK(run.err.find("predicted_ttl_ms") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace kvatlas::testing
